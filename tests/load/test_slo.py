"""SLO parsing and which requests count as good."""

from __future__ import annotations

import numpy as np
import pytest

from latscope.load.slo import SloSpecError, parse_bound_ms, parse_slo


def test_units_convert_to_ms() -> None:
    assert parse_bound_ms("500ms") == 500.0
    assert parse_bound_ms("10s") == 10_000.0
    assert parse_bound_ms("250us") == 0.25
    assert parse_bound_ms("40") == 40.0


def test_parse_slo_keeps_every_bound() -> None:
    slo = parse_slo("ttft=500ms,tpot=50ms,e2e=10s")
    assert slo.to_dict() == {"ttft": 500.0, "tpot": 50.0, "e2e": 10_000.0}


@pytest.mark.parametrize("text", ["", "ttft", "latency=5ms", "ttft=fast"])
def test_bad_slo_specs_raise(text: str) -> None:
    with pytest.raises(SloSpecError):
        parse_slo(text)


def test_a_request_is_good_only_when_ok_and_every_bound_holds() -> None:
    slo = parse_slo("ttft=100ms,tpot=10ms")
    columns = {
        "ttft_ms": np.array([50.0, 150.0, 50.0, 50.0, np.nan]),
        "tpot_ms": np.array([5.0, 5.0, 20.0, np.nan, np.nan]),
    }
    ok = np.array([True, True, True, True, False])
    # 0 good; 1 TTFT too slow; 2 TPOT too slow; 3 one-token answer (no TPOT) is fine; 4 failed
    assert slo.met(columns, ok).tolist() == [True, False, False, True, False]


def test_missing_ttft_fails_the_request() -> None:
    slo = parse_slo("ttft=100ms")
    assert slo.met({"ttft_ms": np.array([np.nan])}, np.array([True])).tolist() == [False]
