"""The key, its lockout, the speech budget and the refusal log that HTTP and gRPC share
(daemon/frontends/access.py); each frontend's own statuses are tested end to end
(test_http_guard.py, test_grpc.py)."""

from __future__ import annotations

import logging

import pytest
from magpie_tts.daemon.frontends.access import (
    AUTH_FAILURES_PER_MINUTE,
    Access,
    Refusal,
    RefusalLog,
)


def test_no_key_configured_lets_everyone_in() -> None:
    Access(None, 5).authenticate("10.0.0.1", [])


def test_wrong_keys_lock_the_address_out_before_the_key_is_looked_at() -> None:
    access = Access("sesame", 5)
    access.authenticate("10.0.0.1", ["nope", " sesame "])  # any offered one, trimmed
    for _ in range(AUTH_FAILURES_PER_MINUTE):
        with pytest.raises(Refusal) as refused:
            access.authenticate("10.0.0.1", ["nope"])
        assert refused.value.kind == "auth"
    with pytest.raises(Refusal) as locked:
        access.authenticate("10.0.0.1", ["sesame"])  # the right key, unchecked now
    assert locked.value.kind == "auth_locked" and 0 < locked.value.retry_after <= 60
    assert "10.0.0.1" in locked.value.message and "sesame" not in locked.value.message
    access.authenticate("10.0.0.2", ["sesame"])  # another address is not locked


def test_the_budget_counts_only_what_was_spent() -> None:
    access = Access(None, 2)
    for _ in range(5):  # checked, then refused elsewhere: not counted
        access.check_budget("10.0.0.1", "calls")
    access.spend("10.0.0.1")
    access.spend("10.0.0.1")
    with pytest.raises(Refusal) as busy:
        access.check_budget("10.0.0.1", "calls")
    assert busy.value.kind == "busy" and "2 calls per minute" in busy.value.message
    access.check_budget("10.0.0.2", "calls")


def test_refusals_warn_once_a_minute_per_address_and_kind(caplog) -> None:
    log = RefusalLog(logging.getLogger("test.access"))
    with caplog.at_level(logging.DEBUG, logger="test.access"):
        for _ in range(5):
            log.note("10.0.0.1", "auth", "refused 10.0.0.1: auth")
        log.note("10.0.0.1", "busy", "refused 10.0.0.1: busy")
        log.note("10.0.0.2", "auth", "refused 10.0.0.2: auth")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "refused 10.0.0.1: auth",
        "refused 10.0.0.1: busy",
        "refused 10.0.0.2: auth",
    ]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 4
    log._warned[("10.0.0.1", "auth")][0] -= 61  # a minute later: warned again, with the count
    with caplog.at_level(logging.DEBUG, logger="test.access"):
        log.note("10.0.0.1", "auth", "refused 10.0.0.1: auth")
    assert caplog.records[-1].getMessage().endswith("(4 more like it since the last warning)")
