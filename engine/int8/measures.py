"""Audio measures of the INT8 gate: log-mel distance to the fp32 decoder and the noise
floor in pauses (hiss), and the decoders they are taken on.

INT8 audio is measured as it is played: through the expander (stream/expander.py),
which gates the hiss in pauses so more stages can be INT8.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..runtime import RuntimeConfig, choose_provider, make_session
from ..stream.decoder import ChunkedDecoder
from ..stream.expander import Expander
from ..voice import Voice


def log_mel(audio: np.ndarray, sample_rate: int, bands: int = 80) -> np.ndarray:
    """Log-mel power spectrogram in dB (1024-point STFT, hop 256), floored at -100 dB."""
    frame, hop = 1024, 256
    if len(audio) < frame:
        audio = np.pad(audio, (0, frame - len(audio)))
    count = 1 + (len(audio) - frame) // hop
    index = np.arange(frame)[None, :] + hop * np.arange(count)[:, None]
    spectrum = np.abs(np.fft.rfft(audio[index] * np.hanning(frame), axis=1)) ** 2
    mel_edges = np.linspace(_mel(0), _mel(sample_rate / 2), bands + 2)
    hz = 700 * (10 ** (mel_edges / 2595) - 1)
    bins = np.floor((frame + 1) * hz / sample_rate).astype(int)
    weights = np.zeros((bands, spectrum.shape[1]))
    for b in range(bands):
        lo, mid, hi = bins[b], bins[b + 1], max(bins[b + 2], bins[b + 1] + 1)
        weights[b, lo:mid] = np.linspace(0, 1, max(mid - lo, 1), endpoint=False)[: mid - lo]
        weights[b, mid:hi] = np.linspace(1, 0, max(hi - mid, 1), endpoint=False)[: hi - mid]
    return 10 * np.log10(np.maximum(spectrum @ weights.T, 1e-10))


def _mel(hz: float) -> float:
    return 2595 * np.log10(1 + hz / 700)


def log_mel_distance(reference: np.ndarray, test: np.ndarray, sample_rate: int) -> float:
    """Mean |Δ| in dB between log-mel spectrograms, both floored 80 dB below the peak."""
    a, b = log_mel(reference, sample_rate), log_mel(test[: len(reference)], sample_rate)
    rows = min(len(a), len(b))
    floor = a.max() - 80
    return float(np.mean(np.abs(np.maximum(a[:rows], floor) - np.maximum(b[:rows], floor))))


def pause_floor_dbfs(audio: np.ndarray, sample_rate: int) -> float:
    """Level of the quietest 5 % of 20 ms frames: the hiss a listener hears in pauses."""
    size = sample_rate // 50
    frames = audio[: len(audio) // size * size].reshape(-1, size)
    rms = np.sqrt(np.mean(frames.astype(np.float64) ** 2, axis=1)) + 1e-9
    return float(20 * np.log10(np.percentile(rms, 5)))


def load_decoder(path: Path, voice: Voice, disabled: tuple[str, ...] = ()) -> ChunkedDecoder:
    runtime = RuntimeConfig(provider="cpu", disabled_optimizers=disabled)
    session = make_session(path, runtime, choose_provider(runtime))
    decoder = ChunkedDecoder(session, "cpu", voice.hop_length)
    decoder.warm()
    return decoder


def decode_latent(decoder: ChunkedDecoder, z: np.ndarray) -> np.ndarray:
    return np.concatenate([chunk.copy() for chunk in decoder.stream(z)])


def heard_audio(
    decoder: ChunkedDecoder, zs: list[np.ndarray], sample_rate: int, expander: bool = True
) -> np.ndarray:
    """An INT8 decoder's audio for consecutive latents as the synthesizer plays it:
    through one expander (its pause hiss gated) where its gate chose one."""
    audio = np.concatenate([decode_latent(decoder, z) for z in zs])
    return Expander(sample_rate)(audio) if expander else audio
