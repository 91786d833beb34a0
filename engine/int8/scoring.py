"""Scoring an INT8 decoder (or the whole INT8 path) against fp32 on the gate sentences:
log-mel distance, pause floor and DNSMOS, each on the same latents (paired)."""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph.flow_split import remove_frontend
from ..graph.split import SplitGraph
from ..precision import flow_path
from ..stream.decoder import ChunkedDecoder
from ..stream.expander import Expander
from ..values import SynthesisOptions
from ..voice import Voice
from .calibration import CALIBRATION_SEED, Latents
from .gate import MAX_LOG_MEL_DB, MAX_PAUSE_FLOOR_DBFS, mos_problems
from .measures import decode_latent, log_mel_distance, pause_floor_dbfs
from .mos import Dnsmos, MosScores, mean_scores

log = logging.getLogger(__name__)

# A candidate is first scored on this many sentences; one already far out of bounds
# there is not scored on the rest (each sentence costs a decode and two DNSMOS runs).
EARLY_SENTENCES = 3
EARLY_LOG_MEL_DB = MAX_LOG_MEL_DB * 1.3
EARLY_P808_DROP = 0.3


@dataclass(frozen=True)
class CandidateScore:
    distance: float  # mean log-mel distance to fp32, dB
    floor: float  # mean pause floor, dBFS
    mos: MosScores | None  # None: DNSMOS is not installed
    problems: tuple[str, ...]
    early: bool = False  # scored on the first EARLY_SENTENCES only
    expander: bool = True  # heard through the expander (expander.py)

    @property
    def good(self) -> bool:
        return not self.problems

    @property
    def text(self) -> str:
        mos = f", {Scorer.mos_text(self.mos)}" if self.mos else ""
        verdict = "" if self.good else f" ({'lost early: ' if self.early else ''}"
        verdict += "" if self.good else "; ".join(self.problems) + ")"
        gate = "expander" if self.expander else "no expander"
        return (
            f"{gate}: log-mel {self.distance:.2f} dB, pause floor {self.floor:.1f} dBFS"
            f"{mos}{verdict}"
        )

    def summary(self, label: str) -> dict[str, Any]:
        return {
            "variant": label,
            "log_mel_db": round(self.distance, 2),
            "pause_floor_dbfs": round(self.floor, 1),
            "mos": self.mos.as_dict() if self.mos else None,
            "passed": self.good,
            "early": self.early,
            "expander": self.expander,
        }


class Scorer:
    """The fp32 references of the gate sentences and their DNSMOS, and the scores of
    whatever is compared with them."""

    def __init__(
        self, voice: Voice, fp32: ChunkedDecoder, gate_latents: list[list[np.ndarray]]
    ) -> None:
        self.voice, self.gate_latents = voice, gate_latents
        self.references = [
            np.concatenate([decode_latent(fp32, z) for z in zs]) for zs in gate_latents
        ]
        try:
            self.dnsmos: Dnsmos | None = Dnsmos()
        except FileNotFoundError as exc:  # the gate then fails safe (gate.mos_problems)
            log.warning("%s: INT8 cannot be judged by ear", exc)
            self.dnsmos = None
        self._reference_scores = self._scores(self.references)
        self.reference_mos = self._mean(self._reference_scores)

    def _scores(self, clips: list[np.ndarray]) -> list[MosScores] | None:
        if self.dnsmos is None:
            return None
        return [self.dnsmos.score(clip, self.voice.sample_rate) for clip in clips]

    @staticmethod
    def _mean(scores: list[MosScores] | None) -> MosScores | None:
        return mean_scores(scores) if scores else None

    @staticmethod
    def mos_text(mos: MosScores | None) -> str:
        if mos is None:
            return "DNSMOS not installed"
        return f"P.808 {mos.p808:.2f} OVRL {mos.ovrl:.2f} SIG {mos.sig:.2f} BAK {mos.bak:.2f}"

    def mos_problems(self, mos: MosScores | None, count: int | None = None) -> list[str]:
        reference = self._reference_scores
        if reference is None or mos is None:
            return mos_problems(None, None)
        fp32 = mean_scores(reference[:count] if count else reference)
        return mos_problems(fp32.as_dict(), mos.as_dict())

    def candidate(self, decoder: ChunkedDecoder) -> CandidateScore:
        """A decoder's scores, heard as it is and through the expander (which gates the
        pause hiss but costs DNSMOS's OVRL ~0.05 on fp32 itself): the variant within the
        bounds, the better P.808 of two, is the candidate's. On the first
        EARLY_SENTENCES, and on the rest only if not far out of bounds there."""
        rate = self.voice.sample_rate
        outputs: dict[bool, list[np.ndarray]] = {False: [], True: []}
        distances: dict[bool, list[float]] = {False: [], True: []}
        scores: dict[bool, list[MosScores]] = {False: [], True: []}
        early = False
        for index, (zs, reference) in enumerate(
            zip(self.gate_latents, self.references, strict=True)
        ):
            raw = np.concatenate([decode_latent(decoder, z) for z in zs])
            for expanded, audio in ((False, raw), (True, Expander(rate)(raw))):
                outputs[expanded].append(audio)
                distances[expanded].append(log_mel_distance(reference, audio, rate))
                if self.dnsmos is not None:
                    scores[expanded].append(self.dnsmos.score(audio, rate))
            if index + 1 == EARLY_SENTENCES < len(self.references) and all(
                self._lost(distances[v], scores[v]) for v in (False, True)
            ):
                early = True
                break
        plain, gated = (
            self._variant(outputs[v], distances[v], scores[v], early, v) for v in (False, True)
        )
        if plain.good and gated.good:
            return plain if plain.mos is None or plain.mos.p808 >= gated.mos.p808 else gated
        return gated if gated.good or len(gated.problems) < len(plain.problems) else plain

    def _variant(
        self,
        outputs: list[np.ndarray],
        distances: list[float],
        scores: list[MosScores],
        early: bool,
        expander: bool,
    ) -> CandidateScore:
        rate = self.voice.sample_rate
        distance = statistics.mean(distances)
        floor = statistics.mean(pause_floor_dbfs(o, rate) for o in outputs)
        mos = self._mean(scores)
        problems = []
        if distance > MAX_LOG_MEL_DB:
            problems.append(f"log-mel over {MAX_LOG_MEL_DB} dB")
        if floor > MAX_PAUSE_FLOOR_DBFS:
            problems.append(f"pause floor over {MAX_PAUSE_FLOOR_DBFS} dBFS")
        problems += self.mos_problems(mos, len(outputs))
        return CandidateScore(distance, floor, mos, tuple(problems), early, expander)

    def _lost(self, distances: list[float], scores: list[MosScores]) -> bool:
        if statistics.mean(distances) > EARLY_LOG_MEL_DB:
            return True
        if not scores or self._reference_scores is None:
            return False
        fp32 = mean_scores(self._reference_scores[: len(scores)])
        return mean_scores(scores).p808 < fp32.p808 - EARLY_P808_DROP

    def path_mos(
        self, int8: ChunkedDecoder, int8_front: Latents, texts: tuple[str, ...], expander: bool
    ) -> MosScores | None:
        """DNSMOS of the whole INT8 path (its flow and decoder, the same seeded noise as
        the fp32 references' latents)."""
        options, rate = SynthesisOptions(), self.voice.sample_rate
        clips = []
        for text in texts:
            zs = int8_front(text, options, CALIBRATION_SEED)
            raw = np.concatenate([decode_latent(int8, z) for z in zs])
            clips.append(Expander(rate)(raw) if expander else raw)
        return self._mean(self._scores(clips))

    def drop_flow(self, split: SplitGraph, mos: MosScores | None) -> dict[str, Any]:
        """Take the INT8 flow back out: the whole path lost DNSMOS that the decoder alone
        did not."""
        remove_frontend(flow_path(split))
        return {
            "frontend": "fp32",
            "frontend_reason": f"INT8 flow + decoder: {self.mos_text(mos)}: "
            + "; ".join(self.mos_problems(mos))
            + ": flow kept fp32",
        }
