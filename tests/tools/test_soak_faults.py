"""A short faulted soak (the minutes-long run is `magpie-tts soak`): MQTT, Wyoming and HTTP
at once against a voice that really fails, clients that vanish and a broker restart;
every request has exactly one outcome and the daemon lives."""

import pytest
from magpie_tts.tools.soak_faults import FaultSoak, slope_mb_per_hour, table

pytestmark = pytest.mark.slow  # soaks a daemon


def test_every_request_has_one_outcome_through_faults(tmp_path, prepared_state) -> None:
    soak = FaultSoak(tmp_path, prepared_state, probe_s=4)
    try:
        result = soak.run(10, warmup_s=2)
    finally:
        soak.close()
    assert result["alive"], table(result)
    for name, row in result["frontends"].items():
        assert row["requests"] > 0, name
        assert row["one_outcome_each"], table(result)
        assert not row["daemon_outcomes"]["error"], table(result)
    assert result["faults"]["broker restart"] == 2
    assert result["faults"]["engine failures (retried on the fallback)"]["retried"] > 0


def test_the_slope_is_a_least_squares_fit() -> None:
    samples = [(t, 1000 + 2 * t) for t in range(0, 60, 5)]  # 2 kB/s
    assert slope_mb_per_hour(samples) == pytest.approx(2 * 3600 / 1024)
    assert slope_mb_per_hour(samples[:2]) == 0.0
