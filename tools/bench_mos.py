"""DNSMOS columns for `magpie-tts bench`: P.808 and P.835 OVRL of each system's audio.

Each worker speaks each text once more after the timed rounds (so scoring never touches
the timings or the worker's peak RSS) and leaves the clip in a file; the parent scores
the clips with engine/int8/mos.py once the workers are closed. DNSMOS is a proxy for
naturalness, good for comparing systems on the same sentences, not an absolute MOS.
A bench without DNSMOS (speechmos missing, a model that will not load) still prints
its speed table, the MOS cells "n/a" and the reason under it.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

Clips = dict[str, dict[str, tuple[Path, int]]]  # system → text → (.npy of float audio, rate)


def sentences(text: str) -> int:
    return max(1, len(re.findall(r"[.!?](?:\s|$)", text)))


@dataclass
class MosColumns:
    """(P.808, OVRL) per system and text; a cell without a score reads "n/a"."""

    scores: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # why cells are n/a

    def cells(self, system: str, text: str) -> tuple[str, str]:
        score = self.scores.get(system, {}).get(text)
        return (f"{score[0]:.2f}", f"{score[1]:.2f}") if score else ("n/a", "n/a")

    def header(self, texts: dict[str, str]) -> str:
        counts = ", ".join(f"{name} {sentences(text)}" for name, text in texts.items())
        return (
            "P.808 / OVRL: DNSMOS of one clip per row, the row's text spoken once by that "
            f"system after the timed runs (sentences per clip: {counts})"
        )

    def summary(self, systems: list[str], texts: dict[str, str]) -> list[str]:
        """Each system's mean over the texts, and its difference to piper's."""
        total = sum(sentences(t) for t in texts.values())
        lines = [
            "",
            f"DNSMOS mean over the {len(texts)} texts ({len(texts)} clips, {total} "
            "sentences) per system: P.808 / OVRL, and minus piper's",
        ]
        means = {
            system: tuple(statistics.fmean(s[i] for s in per_text.values()) for i in (0, 1))
            for system in systems
            if len(per_text := self.scores.get(system, {})) == len(texts)
        }
        base = means.get("piper")
        for system in systems:
            if system not in means:
                lines.append(f"{system:<15}  n/a")
                continue
            p808, ovrl = means[system]
            against = f"   {p808 - base[0]:+.2f} / {ovrl - base[1]:+.2f}" if base else ""
            lines.append(f"{system:<15} {p808:5.2f} / {ovrl:4.2f}{against}")
        return lines + [f"DNSMOS n/a: {problem}" for problem in self.problems]


def score_clips(clips: Clips, texts: list[str]) -> MosColumns:
    """Every clip scored once; what cannot be scored is named, never raised."""
    import numpy as np

    try:
        from magpie_tts.engine.int8.mos import Dnsmos

        dnsmos = Dnsmos()
    except Exception as exc:  # optional: the speed table stands without it
        return MosColumns(problems=[f"{type(exc).__name__}: {exc}"])
    columns = MosColumns()
    for system, per_text in clips.items():
        missing = [text for text in texts if text not in per_text]
        if missing:
            columns.problems.append(f"{system}: no clip of {', '.join(missing)}")
        for text, (path, rate) in per_text.items():
            try:
                score = dnsmos.score(np.load(path), rate)
            except ValueError as exc:  # no audio
                columns.problems.append(f"{system} {text}: {exc}")
                continue
            columns.scores.setdefault(system, {})[text] = (score.p808, score.ovrl)
    return columns
