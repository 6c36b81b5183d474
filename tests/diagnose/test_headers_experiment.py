"""The header-size experiment: padding is its own headers only; the client's credentials reach the server byte for
byte, on every request; a refusal of a padded head ends the sweep."""

from __future__ import annotations

from latscope.checks.headers import BROWSER_BYTES
from latscope.diagnose import diagnose
from latscope.diagnose.context import REQUEST_TIMEOUTS
from latscope.diagnose.experiments.headers import PAD_BYTES_QUICK, PAD_CHUNK_BYTES, header_bytes, padding
from latscope.findings import Clear, Finding
from latscope.lab.app import Lab
from latscope.wire.target import Target
from tests.diagnose import truth
from tests.diagnose.truth import TEST_COST
from tests.support.stream_server import Received, Reply, StreamServer, models_handler, paced_stream

#: Requests of a quick sweep: each size on a new connection, then on a reused one.
SWEEP = 2 * len(PAD_BYTES_QUICK)

#: A long signed-looking token: its exact bytes must arrive, never shortened, never replaced.
TOKEN = "Bearer eyJhbGciOiJSUzI1NiJ9." + "QmxvYXRlZENsYWltcw" * 600 + ".c2lnbmF0dXJl"
COOKIE = "session=" + "c" * 3000


def test_padding_headers_total_the_size_asked_for_in_chunks_a_proxy_accepts() -> None:
    pad = padding(24 * 1024)
    assert abs(header_bytes(pad) - 24 * 1024) <= 8
    assert all(len(name) + len(value) + 4 <= PAD_CHUNK_BYTES for name, value in pad)
    assert all(name.lower().startswith("x-latscope-pad-") for name, _ in pad)
    assert padding(0) == []


async def test_the_credentials_on_the_wire_are_exactly_the_callers_on_every_request() -> None:
    async with StreamServer(models_handler(paced_stream(2))) as server:
        result = await diagnose(
            Target.resolve(
                server.base_url, headers=[("Authorization", TOKEN), ("Cookie", COOKIE)], timeouts=REQUEST_TIMEOUTS
            ),
            quick=True,
            only="request-header-bloat",
        )
    posts = [r for r in server.requests if r.method == "POST"]
    sweep = posts[-SWEEP:]  # the experiment's, after the baseline's: each size on a new connection, then a reused one
    assert len(posts) > SWEEP and result.outcome("request-header-bloat") is not None
    for request in posts:
        assert [v for k, v in request.headers if k == "authorization"] == [TOKEN]
        assert [v for k, v in request.headers if k == "cookie"] == [COOKIE]
    padded = [sum(len(v) for k, v in r.headers if k.startswith("x-latscope-pad-")) for r in sweep]
    assert padded[0] == padded[1] == 0
    assert all(padded[i] == padded[i + 1] < padded[i + 2] for i in range(0, SWEEP - 2, 2)), padded


async def test_each_size_goes_on_a_new_connection_and_then_on_a_reused_one() -> None:
    async with StreamServer(models_handler(paced_stream(2))) as server:
        result = await diagnose(server.base_url, quick=True, only="request-header-bloat")
    sweep = [r for r in server.requests if r.method == "POST"][-SWEEP:]
    fresh, reused = sweep[0::2], sweep[1::2]
    earlier = {r.connection_index for r in server.requests[: len(server.requests) - SWEEP]}
    fresh_connections = [r.connection_index for r in fresh]
    assert len(set(fresh_connections)) == SWEEP // 2 and not set(fresh_connections) & earlier  # each its own
    assert all(r.connection_index in fresh_connections[: i + 1] for i, r in enumerate(reused))  # one already open
    outcome = result.outcome("request-header-bloat")
    assert isinstance(outcome, Clear) and outcome.evidence["priced_on"] == "reused connections"
    assert set(outcome.evidence["new_connections"]["wait_ms_by_pad_kb"]) == {f"{b // 1024}" for b in PAD_BYTES_QUICK}


async def test_a_server_that_closes_every_connection_is_priced_on_new_connections() -> None:
    async with StreamServer(models_handler(paced_stream(2)), keep_alive=False) as server:
        result = await diagnose(server.base_url, quick=True, only="request-header-bloat")
    outcome = result.outcome("request-header-bloat")
    assert isinstance(outcome, Clear) and outcome.evidence["priced_on"] == "new connections", outcome


async def test_a_server_that_refuses_big_heads_ends_the_sweep_with_the_size() -> None:
    async def small_heads(request: Received, reply: Reply) -> None:
        if sum(len(k) + len(v) for k, v in request.headers) > 16 * 1024:
            await reply.send_json(431, {"error": {"message": "Request Header Fields Too Large"}})
            return
        await paced_stream(2)(request, reply)

    async with StreamServer(models_handler(small_heads)) as server:
        result = await diagnose(server.base_url, quick=True, only="request-header-bloat")
    outcome = result.outcome("request-header-bloat")
    assert isinstance(outcome, Clear) and outcome.evidence["refused_at_pad_bytes"] == 24 * 1024


async def test_the_header_scan_fault_is_priced_at_a_bloated_clients_size_and_at_a_browsers_for_a_lean_one() -> None:
    async with Lab(profile="tuned", faults=["header-scan"], cost=TEST_COST) as lab:
        bloated = await diagnose(
            Target.resolve(lab.url, headers=[("Authorization", TOKEN)], timeouts=REQUEST_TIMEOUTS),
            quick=True,
            only="request-header-bloat",
        )
        lean = await diagnose(lab.url, quick=True, only="request-header-bloat")
        held_per_kb = truth.header_scan_ms_per_kb(lab)  # what the scan really held per KB, from its records
    finding = bloated.outcome("request-header-bloat")
    assert isinstance(finding, Finding), finding
    assert abs(finding.evidence["ms_per_kb"] - held_per_kb) <= 0.25 * held_per_kb, (held_per_kb, finding.evidence)
    # latscope's own headers are a few hundred bytes: priced at a browser's 4 KB of cookies and token instead
    browser = lean.outcome("request-header-bloat")
    assert isinstance(browser, Finding) and browser.confidence.value == "medium", browser
    real = held_per_kb * BROWSER_BYTES / 1024
    assert abs(browser.cost_ms - real) <= 0.25 * real, (browser.cost_ms, real, browser.evidence)
    assert "browser" in browser.cost_basis


async def test_a_lean_client_of_a_server_that_spends_nothing_per_byte_is_clear_at_browser_sizes() -> None:
    async with Lab(profile="tuned", cost=TEST_COST) as lab:
        result = await diagnose(lab.url, quick=True, only="request-header-bloat")
    outcome = result.outcome("request-header-bloat")
    assert isinstance(outcome, Clear), outcome
    assert outcome.evidence["browser_sizes"]["cost_ms_by_kb"]["4"] < 1.0, outcome.evidence
