"""A limiter that refuses without saying when to come back (a bare 429, as nginx's ``limit_req`` and gateways' routers
answer): the probe measures the wait itself, so the refusal is priced instead of ranked low at 0 ms."""

from __future__ import annotations

import time

from latscope.diagnose import diagnose
from latscope.diagnose.context import REQUEST_TIMEOUTS
from latscope.findings import Finding
from latscope.wire.target import Target
from tests.support.load_sse_server import Script, ScriptedServer

#: The limiter admits one generation request per this many seconds and answers the others 429 with no header.
INTERVAL_S = 1.0


class BareLimiter:
    """One request per :data:`INTERVAL_S`, the rest refused with a bare 429; it keeps what it decided (the truth)."""

    def __init__(self) -> None:
        self.admitted: list[float] = []
        self.refused = 0

    def __call__(self, n: int) -> int | None:
        now = time.monotonic()
        if self.admitted and now - self.admitted[-1] < INTERVAL_S:
            self.refused += 1
            return 429
        self.admitted.append(now)
        return None


async def test_a_bare_429_is_priced_by_the_wait_the_probe_measured() -> None:
    limiter = BareLimiter()
    async with ScriptedServer(Script(status=limiter, tokens=1)) as server:
        target = Target.resolve(server.url, timeouts=REQUEST_TIMEOUTS)
        result = await diagnose(target, model="m", quick=True, only="rate-limited")
    finding = result.finding("rate-limited")
    assert isinstance(finding, Finding), result.to_dict()
    assert limiter.refused > 0 and len(limiter.admitted) >= 2  # the limiter did refuse, and let a retry through
    measured = finding.evidence["measured_wait_ms"]
    # the limiter held a refused client at most one interval; doubling retries overshoot that by at most one step
    assert measured["at_most"] is not None and 0.2 * INTERVAL_S * 1000 <= measured["at_most"] <= 2.5 * INTERVAL_S * 1000
    assert measured["at_least"] < INTERVAL_S * 1000  # a retry refused was still inside the interval
    assert finding.cost_ms > 0 and "measured" in finding.cost_basis
