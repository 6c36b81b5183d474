"""gateway-overhead: the gateway against its upstream in pairs; a finding only for a material difference the pairs
agree on; not tested without ``--direct`` or with two URLs for one server."""

from __future__ import annotations

from latscope.checks.overhead import (
    MATERIAL_FLOOR_MS,
    GatewayOverheadEvidence,
    check_gateway_overhead,
    chunk_delay_ms,
    gap_growth_ms,
    median_interval,
)
from latscope.checks.samples import RequestSample
from latscope.findings import Clear, Finding, Inconclusive, NotTested, Severity
from tests.checks.builders import REF, failed, ok

GATEWAY = "http://gw.example:8080/v1"
DIRECT = "http://10.0.0.7:8000/v1"


def _request(head_ms: float, chunk_ms: float = 0.0, *, gap_ms: float = 12.0, tokens: int = 8) -> RequestSample:
    """A streamed request on a kept-alive connection: its head after ``head_ms``, the first token ``chunk_ms``
    and 3 ms after that, then one token every ``gap_ms``."""
    ttft = head_ms + 3.0 + chunk_ms
    gaps = (gap_ms,) * (tokens - 1)
    return ok(ttfb_ms=head_ms, ttft_after_setup_ms=ttft, e2e_after_setup_ms=ttft + sum(gaps) + 1.0, itl_ms=gaps)


def _evidence(
    pairs: list[tuple[RequestSample, RequestSample]],
    *,
    direct_url: str | None = DIRECT,
    warmup: tuple[RequestSample, RequestSample] | None = None,
    direct_address: str = "10.0.0.7:8000",
) -> GatewayOverheadEvidence:
    return GatewayOverheadEvidence(
        GATEWAY,
        direct_url,
        gateway_address="10.0.0.2:8080",
        direct_address=direct_address,
        warmup=warmup or (_request(20.0), _request(5.0)),
        pairs=tuple(pairs),
    )


#: The upstream's own time to the head, pair by pair: a drift and some jitter, the same on both sides of a pair.
UPSTREAM_MS = [5.0, 5.4, 4.8, 6.1, 5.2, 5.6]


def _hop(request_ms: float, chunk_ms: float, jitter: list[float] | None = None) -> GatewayOverheadEvidence:
    jitter = jitter or [0.0] * len(UPSTREAM_MS)
    return _evidence(
        [(_request(up + request_ms + j, chunk_ms), _request(up)) for up, j in zip(UPSTREAM_MS, jitter, strict=True)]
    )


def test_a_converting_gateway_is_a_finding_with_its_cost_per_request_and_per_chunk() -> None:
    outcome = check_gateway_overhead(_hop(16.5, 1.0, [0.3, -0.2, 0.1, 0.4, -0.3, 0.0]), REF)
    assert isinstance(outcome, Finding) and outcome.id == "gateway-overhead"
    assert abs(outcome.cost_ms - 17.55) < 0.5  # the request's conversion and the first token chunk's
    assert outcome.severity is Severity.HIGH  # 17.5 ms on a typical TTFT of 10 ms
    ev = outcome.evidence
    assert abs(ev["head_difference"]["median_ms"] - 16.55) < 0.5
    assert abs(ev["chunk_delay"]["median_ms"] - 1.0) < 0.01 and abs(ev["gap_growth"]["median_ms"]) < 0.01
    low, high = ev["ttft_difference"]["interval_ms"]
    assert 0 < low <= outcome.cost_ms <= high and ev["pairs"] == 6
    assert "--direct" not in outcome.rule and "interval" in outcome.rule


def test_a_thin_proxy_is_clear() -> None:
    outcome = check_gateway_overhead(_hop(0.3, 0.0, [0.1, -0.1, 0.2, 0.0, -0.2, 0.1]), REF)
    assert isinstance(outcome, Clear), outcome
    assert outcome.evidence["threshold_ms"] == MATERIAL_FLOOR_MS and "below" in outcome.reason


def test_a_material_median_the_pairs_disagree_on_is_inconclusive() -> None:
    outcome = check_gateway_overhead(_hop(4.0, 0.0, [-5.0, 1.0, 0.0, 0.5, -0.5, 9.0]), REF)
    assert isinstance(outcome, Inconclusive) and "disagree" in outcome.reason


def test_without_direct_it_is_not_tested_and_says_to_pass_it() -> None:
    outcome = check_gateway_overhead(GatewayOverheadEvidence(GATEWAY), REF)
    assert isinstance(outcome, NotTested) and "--direct UPSTREAM_URL" in outcome.reason


def test_the_target_itself_as_direct_is_not_tested() -> None:
    outcome = check_gateway_overhead(GatewayOverheadEvidence(GATEWAY, GATEWAY), REF)
    assert isinstance(outcome, NotTested) and "the target itself" in outcome.reason


def test_two_urls_that_reach_one_server_are_not_tested() -> None:
    outcome = check_gateway_overhead(_evidence([], direct_address="10.0.0.2:8080"), REF)
    assert isinstance(outcome, NotTested) and "same server" in outcome.reason


def test_an_upstream_that_does_not_answer_is_not_tested_with_its_error() -> None:
    down = failed(status=None, kind="connect", phase="connect", message="connection refused")
    outcome = check_gateway_overhead(_evidence([], warmup=(_request(20.0), down)), REF)
    assert isinstance(outcome, NotTested)
    assert "the direct upstream did not answer" in outcome.reason and "connection refused" in outcome.reason


def test_too_few_complete_pairs_are_not_tested() -> None:
    pairs = [(_request(20.0), _request(5.0))] * 3 + [(failed(), _request(5.0))] * 3
    outcome = check_gateway_overhead(_evidence(pairs), REF)
    assert isinstance(outcome, NotTested)


def test_the_chunk_delay_is_beyond_the_heads_and_the_gap_growth_is_per_gap() -> None:
    direct = _request(5.0)
    delayed = _request(20.0, 2.0)  # 15 ms more for the head, 2 ms more for each chunk
    slowed = ok(ttfb_ms=5.0, ttft_after_setup_ms=8.0, itl_ms=(14.0,) * 7)  # every gap 2 ms longer
    assert chunk_delay_ms(delayed, direct) == 2.0 and gap_growth_ms(delayed, direct) == 0.0
    assert gap_growth_ms(slowed, direct) == 2.0


def test_the_median_interval_widens_to_the_coverage_it_promises() -> None:
    assert median_interval([]) is None
    assert median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == (1.0, 6.0)  # six: only the extremes cover 90 %
    assert median_interval([float(v) for v in range(1, 11)]) == (2.0, 9.0)  # ten: the second from each end
