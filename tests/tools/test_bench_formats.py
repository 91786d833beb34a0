"""The formats bench's table (tools/bench_formats.py): every format and rate against
wav, the sockets and the CPU rows, from made-up measurements (no daemon)."""

from __future__ import annotations

from magpie_tts.tools.bench_formats import FORMATS, RATES, report


def test_report_rows() -> None:
    firsts = {
        (fmt, rate): [0.1 + 0.01 * i, 0.2, 0.3] for i, fmt in enumerate(FORMATS) for rate in RATES
    }
    sockets = {"wav": [(0.2, 1.0)] * 10, "mp3": [(0.25, 1.1)] * 10}
    costs = dict.fromkeys(FORMATS, 1.0)
    text = report(firsts, sockets, costs, rounds=3, clients=10, audio_s=20.0)
    lines = text.splitlines()
    table = [line for line in lines if line.startswith("mp3 ") and "first audio" not in line]
    assert len(table) == len(RATES)
    mp3 = next(line for line in lines if line.startswith("mp3 ") and "voice" in line)
    assert "+20.0" in mp3  # 0.12 s against wav's 0.10 s, in each round
    assert "10 WebSocket clients" in text
    assert "first audio   250.0" in text and "mp3 1.00" in text
