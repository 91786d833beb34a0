"""The gRPC bench's pieces and table (tools/bench_grpc.py), from made-up measurements (no
daemon)."""

from __future__ import annotations

from magpie_tts.tools.bench import TEXTS
from magpie_tts.tools.bench_grpc import PIECES, pieces, report


def test_pieces_put_the_text_back_together() -> None:
    cut = pieces(TEXTS["medium"])
    assert len(cut) == PIECES and "".join(cut) == TEXTS["medium"]


def test_report_rows_against_piper() -> None:
    results = {
        "online first": [0.10, 0.12, 0.11],
        "online whole": [1.0, 1.1, 1.2],
        "synthesize": [0.9, 0.9, 0.9],
        "piper": [0.5, 0.5, 0.5],
        "N online first": [0.3] * 10,
        "N online whole": [2.0] * 10,
        "N piper": [1.5] * 10,
        "N refused": [0, 2, 1],
    }
    text = report(results, rounds=3, clients=10)
    assert "online first                   110.0   0.220" in text
    assert "N=10 at once" in text and "refused as busy: 3 of 30" in text
    assert "N online first                 300.0   300.0   0.600    0.200" in text
    del results["N piper"]  # piper's HTTP server could not run (no flask)
    assert "N online first                 300.0   300.0   0.600        -" in report(results, 3, 10)
