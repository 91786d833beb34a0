"""DNSMOS (Microsoft; P.808 and P.835 SIG/BAK/OVRL) as the INT8 gate's ear.

The ONNX weights ship inside the `speechmos` wheel (a runtime dependency: 9.4 MB, no
dependencies of its own); only the files are used. speechmos's own code imports
librosa (with scipy, numba and llvmlite: ~100 MB installed) for one mel spectrogram;
that spectrogram is computed here with numpy instead (librosa's defaults: centred
STFT zero-padded, periodic Hann window, Slaney mel filters, `power_to_db(ref=max)` with
an 80 dB floor), so the gate works from the runtime install alone.

DNSMOS was trained to judge noise suppression: it is a proxy for naturalness, good to
compare systems on the same sentences (fp32 vs INT8), not an absolute MOS.
"""

from __future__ import annotations

import importlib.util
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

RATE = 16000
SEGMENT_S = 9.01  # the models' input: 9.01 s, shorter clips are tiled up to it
_FFT = 321
_HOP = 160
_MELS = 120
# P.835's raw outputs mapped to MOS (speechmos, non-personalized)
_POLY = {
    "sig": (-0.08397278, 1.22083953, 0.0052439),
    "bak": (-0.13166888, 1.60915514, -0.39604546),
    "ovrl": (-0.06766283, 1.11546468, 0.04602535),
}
MEASURES = ("p808", "ovrl", "sig", "bak")


def models_dir() -> Path | None:
    """speechmos's folder of DNSMOS models, or None where it is not installed."""
    spec = importlib.util.find_spec("speechmos")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "dnsmos_models"
    return folder if (folder / "model_v8.onnx").is_file() else None


def _slaney_mel(hz: np.ndarray) -> np.ndarray:
    linear = hz / (200.0 / 3)
    log = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(hz >= 1000.0, log, linear)


def _slaney_hz(mel: np.ndarray) -> np.ndarray:
    linear = mel * (200.0 / 3)
    log = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0))
    return np.where(mel >= 15.0, log, linear)


def _mel_filters() -> np.ndarray:
    """librosa.filters.mel(sr=16000, n_fft=321, n_mels=120): Slaney scale and area norm."""
    bins = np.fft.rfftfreq(_FFT, 1.0 / RATE)
    edges = _slaney_hz(
        np.linspace(_slaney_mel(np.array(0.0)), _slaney_mel(np.array(RATE / 2)), _MELS + 2)
    )
    widths = np.diff(edges)
    ramps = edges[:, None] - bins[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]


_FILTERS = _mel_filters()
_WINDOW = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(_FFT) / _FFT)).astype(np.float64)


def mel_input(audio: np.ndarray) -> np.ndarray:
    """The P.808 model's input for one segment: [frames, 120] log-mel, (dB + 40) / 40."""
    padded = np.pad(audio.astype(np.float64), _FFT // 2)
    count = 1 + (len(padded) - _FFT) // _HOP
    index = np.arange(_FFT)[None, :] + _HOP * np.arange(count)[:, None]
    power = np.abs(np.fft.rfft(padded[index] * _WINDOW, axis=1)) ** 2
    mel = power @ _FILTERS.T
    db = 10 * np.log10(np.maximum(mel, 1e-10))
    db -= 10 * np.log10(max(float(mel.max()), 1e-10))
    db = np.maximum(db, db.max() - 80.0)
    return ((db + 40.0) / 40.0).astype(np.float32)


@dataclass(frozen=True)
class MosScores:
    p808: float
    ovrl: float
    sig: float
    bak: float

    def as_dict(self, digits: int = 3) -> dict[str, float]:
        return {name: round(getattr(self, name), digits) for name in MEASURES}


def mean_scores(scores: list[MosScores]) -> MosScores:
    return MosScores(*(statistics.fmean(getattr(s, name) for s in scores) for name in MEASURES))


class Dnsmos:
    """DNSMOS on onnxruntime, one thread (it runs beside synthesis)."""

    def __init__(self, folder: Path | None = None) -> None:
        import onnxruntime as ort

        folder = folder or models_dir()
        if folder is None:
            raise FileNotFoundError("speechmos (the DNSMOS models) is not installed")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        self._p835 = ort.InferenceSession(
            str(folder / "sig_bak_ovr.onnx"), options, providers=providers
        )
        self._p808 = ort.InferenceSession(
            str(folder / "model_v8.onnx"), options, providers=providers
        )

    def score(self, audio: np.ndarray, sample_rate: int) -> MosScores:
        """Scores of one clip (float audio in [-1, 1] at any rate), as speechmos's
        `dnsmos.run` gives them: 9.01 s segments a second apart, their mean."""
        audio = np.asarray(audio, dtype=np.float32)
        if sample_rate != RATE:
            audio = soxr.resample(audio, sample_rate, RATE)
        audio = np.clip(audio, -1.0, 1.0)
        length = int(SEGMENT_S * RATE)
        if len(audio) == 0:
            raise ValueError("no audio to score")
        while len(audio) < length:
            audio = np.append(audio, audio)
        hops = int(np.floor(len(audio) / RATE) - SEGMENT_S) + 1
        results = []
        for hop in range(hops):
            segment = audio[hop * RATE : hop * RATE + length]
            if len(segment) < length:
                continue
            p808 = self._p808.run(None, {"input_1": mel_input(segment[:-_HOP])[None]})[0]
            raw = self._p835.run(None, {"input_1": segment[None].astype(np.float32)})[0][0]
            sig, bak, ovrl = (
                float(np.polyval(_POLY[name], float(value)))
                for name, value in zip(("sig", "bak", "ovrl"), raw, strict=True)
            )
            results.append(MosScores(float(p808[0][0]), float(ovrl), float(sig), float(bak)))
        return mean_scores(results)

    def score_all(self, clips: list[np.ndarray], sample_rate: int) -> MosScores:
        """The mean over clips (sentences): each judged alone."""
        return mean_scores([self.score(clip, sample_rate) for clip in clips])
