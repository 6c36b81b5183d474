"""``probe(browser=True)`` / ``latscope probe --browser``: the requests go at once through a browser's pool of 6
connections per host. Over HTTP/1.1 the requests beyond 6 wait for one of the first six to finish (their ``pool``
phase); over HTTP/2 one connection carries all of them and none waits."""

from __future__ import annotations

from latscope.lab.app import Lab
from latscope.probe import probe
from latscope.timeline.metrics import e2e_ms, pool_ms
from latscope.wire.pool import BROWSER_CONNECTIONS_PER_HOST
from latscope.wire.target import Target
from tests.diagnose.truth import TEST_COST


async def test_over_http11_the_requests_beyond_six_wait_for_a_connection() -> None:
    async with Lab(profile="tuned", cost=TEST_COST) as lab:
        result = await probe(lab.url, n=12, max_tokens=8, browser=True, scrape_metrics=False)
    assert result.ok and result.browser
    (stats,) = result.pool.values()
    assert stats.connections_opened == BROWSER_CONNECTIONS_PER_HOST and stats.requests == 12
    waits = sorted(pool_ms(t) or 0.0 for t in result.timelines)
    # the control: how long one request holds its connection (the quickest of the batch, end to end)
    held = min(e2e_ms(t) or float("inf") for t in result.timelines)
    assert all(w < 0.25 * held for w in waits[:6]), (waits, held)  # the first six had a connection at once
    assert all(w > 0.5 * held for w in waits[6:]), (waits, held)  # the other six waited for one to come free


async def test_over_http2_one_connection_carries_them_all() -> None:
    async with Lab(profile="tuned", tls=True, cost=TEST_COST) as lab:
        assert lab.cert_path is not None
        result = await probe(
            Target.resolve(lab.url, ca_file=str(lab.cert_path)), n=12, max_tokens=8, browser=True, scrape_metrics=False
        )
    assert result.ok
    (stats,) = result.pool.values()
    assert stats.connections_opened == 1 and stats.requests == 12
    assert {t.connection.http_version for t in result.timelines if t.connection is not None} == {"HTTP/2"}
