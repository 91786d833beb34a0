"""A short soak (the 10,000-utterance run is `python -m magpie_tts.tools.soak`)."""

from __future__ import annotations

import pytest
from magpie_tts.tools.soak import Soak

pytestmark = pytest.mark.slow  # soaks a daemon


def test_300_utterances_without_errors_or_memory_growth(tmp_path, prepared_state) -> None:
    soak = Soak(tmp_path, prepared_state)
    try:
        result = soak.run(count=350, warmup=50, progress=False)
    finally:
        soak.close()
    assert result["alive"], result
    assert result["errors"] == 0 and result["finished"] == 350, result
    assert result["rss_growth_pct"] < 5.0, result
