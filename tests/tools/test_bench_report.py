"""The in-process bench's table (tools/bench.py, tools/bench_mos.py): speed columns and
DNSMOS beside them, from made-up measurements (no workers), and the n/a case."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from magpie_tts.engine.int8 import mos
from magpie_tts.tools.bench import TEXTS, report
from magpie_tts.tools.bench_mos import MosColumns, score_clips


def _rounds(system: str, speed: float) -> list[dict]:
    """Two rounds; `speed` scales piper's made-up seconds (0.5: twice as fast)."""
    texts = {
        name: {"first_s": [0.1 * speed] * 3, "total_s": [0.2 * speed] * 3, "audio_s": 2.0}
        for name in TEXTS
    }
    return [{"system": system, "texts": texts, "peak_rss_mb": 300.0}] * 2


def _row(text: str, system: str, table: str) -> str:
    return next(line for line in table.splitlines() if line.split()[:2] == [text, system])


RUNS = {"piper": _rounds("piper", 1.0), "magpie-int8": _rounds("magpie-int8", 0.5)}


def test_mos_columns_beside_the_speed_ones() -> None:
    scores = {
        "piper": dict.fromkeys(TEXTS, (4.0, 3.3)),
        "magpie-int8": {"short": (3.8, 3.2), "medium": (4.0, 3.3), "long": (4.2, 3.4)},
    }
    table = report(RUNS, MosColumns(scores=scores))
    assert "sentences per clip: short 1, medium 1, long 5" in table
    header = next(line for line in table.splitlines() if line.startswith("text "))
    assert header.split()[-2:] == ["P.808", "OVRL"]
    short = _row("short", "magpie-int8", table).split()
    assert short[5:7] == ["0.500", "0.500"]  # first/piper, RTF/piper
    assert short[-2:] == ["3.80", "3.20"]
    assert _row("long", "piper", table).split()[-2:] == ["4.00", "3.30"]
    assert "3 clips, 7 sentences" in table
    mean = next(line for line in table.splitlines() if line.startswith("magpie-int8 "))
    assert mean.split() == ["magpie-int8", "4.00", "/", "3.30", "+0.00", "/", "+0.00"]
    assert "n/a" not in table


def test_mos_cells_read_na_with_the_reason() -> None:
    problem = "FileNotFoundError: speechmos (the DNSMOS models) is not installed"
    table = report(RUNS, MosColumns(problems=[problem]))
    for text in TEXTS:
        for system in RUNS:
            assert _row(text, system, table).split()[-2:] == ["n/a", "n/a"]
    assert f"DNSMOS n/a: {problem}" in table
    assert _row("short", "magpie-int8", table).split()[5] == "0.500"  # speed stands
    partial = MosColumns(scores={"piper": dict.fromkeys(TEXTS, (4.0, 3.3))})
    table = report(RUNS, partial)
    assert _row("medium", "magpie-int8", table).split()[-2:] == ["n/a", "n/a"]
    assert any(line.split() == ["magpie-int8", "n/a"] for line in table.splitlines())


def test_dnsmos_that_cannot_load_is_named_not_raised(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(mos, "models_dir", lambda: None)
    clip = tmp_path / "clip.npy"
    np.save(clip, np.zeros(1600, np.float32))
    columns = score_clips({"piper": {"short": (clip, 16000)}}, list(TEXTS))
    assert columns.scores == {}
    assert columns.problems == ["FileNotFoundError: speechmos (the DNSMOS models) is not installed"]


@pytest.mark.skipif(mos.models_dir() is None, reason="speechmos is not installed")
def test_each_clip_is_scored_and_a_missing_one_named(tmp_path: Path) -> None:
    clip = tmp_path / "clip.npy"
    t = np.arange(16000) / 16000
    np.save(clip, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32))
    empty = tmp_path / "empty.npy"
    np.save(empty, np.zeros(0, np.float32))
    clips = {"piper": {"short": (clip, 16000), "medium": (empty, 16000)}}
    columns = score_clips(clips, list(TEXTS))
    p808, ovrl = columns.scores["piper"]["short"]
    assert 1.0 <= p808 <= 5.0 and 0.0 < ovrl <= 5.0  # a sine: OVRL maps below 1
    assert "medium" not in columns.scores["piper"]
    assert columns.problems == ["piper: no clip of long", "piper medium: no audio to score"]
