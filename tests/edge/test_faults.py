"""Each edge fault through a real nginx changes what the measuring client sees; the tuned edge does not.

Every test measures the faulty edge against a tuned control in the same test; timing assertions are generous
ratios. The origin is a tuned lab pacing a token every few ms, with ``truth=True`` so each event carries its send
stamp. Failure messages carry the stream's shape and nginx's error log.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import statistics
from pathlib import Path

import pytest

from latscope.dialects.openai import OpenAIStreamDecoder, chat_request
from latscope.lab.edge.lab import EdgeLab
from latscope.timeline.model import Timeline
from latscope.wire import Client
from tests.edge.support import content_events_per_read, delays_ms, describe, largest_read_bytes, needs_nginx, paced

pytestmark = needs_nginx

#: Token cadence of the origin, ms: paced like a real stream, short enough to keep the tests fast.
STEP_MS = 2.0
#: Tokens per stream: with the lab's truth stamps ~250 B per event, about 30 KB, past nginx's 16 KB TLS buffer.
TOKENS = 120


async def _stream(lab: EdgeLab, *, http2: bool = True, tokens: int = TOKENS) -> Timeline:
    """One streamed request on a client of its own."""
    async with Client(ca_file=str(lab.cert_path), http2=http2) as client:
        return await _request(client, lab, tokens=tokens)


async def _request(client: Client, lab: EdgeLab, *, new_connection: bool = False, tokens: int = TOKENS) -> Timeline:
    t = await client.request(
        chat_request("lab-model", "hello", tokens),
        lab.url,
        decoder=OpenAIStreamDecoder("chat"),
        new_connection=new_connection,
    )
    assert t.error is None, f"{describe(t)}\nnginx error log:\n{_log(lab)}"
    return t


def _log(lab: EdgeLab) -> str:
    return lab.edge.error_log_tail() if lab.edge is not None else "(nginx not running)"


def _edge_lab(*faults: str) -> EdgeLab:
    return EdgeLab(faults=faults, cost=paced(STEP_MS), truth=True)


# -- streaming ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("http2", [True, False], ids=["h2", "http1.1"])
async def test_the_tuned_edge_delivers_about_one_event_per_read(http2: bool) -> None:
    async with _edge_lab() as lab:
        t = await _stream(lab, http2=http2)
        log = _log(lab)
    per_read = content_events_per_read(t)
    assert sum(per_read) == TOKENS, describe(t)
    assert statistics.median(per_read) == 1, f"{describe(t)}\n{log}"
    assert len(per_read) > 0.7 * TOKENS, f"{describe(t)}\n{log}"  # a stray read may carry two events
    assert largest_read_bytes(t) < 4096, f"{describe(t)}\n{log}"


async def test_proxy_buffering_over_tls_delivers_the_stream_in_bursts() -> None:
    # HTTP/1.1 over TLS is where nginx 1.22 bursts (ssl_buffer_size); its HTTP/2 writes are not held the same way.
    async with _edge_lab() as tuned:
        control = await _stream(tuned, http2=False)
    async with _edge_lab("proxy-buffering") as lab:
        faulty = await _stream(lab, http2=False)
        log = _log(lab)
    message = f"tuned: {describe(control)}\nbuffered: {describe(faulty)}\nnginx error log:\n{log}"
    assert max(content_events_per_read(control)) <= 4, message
    assert largest_read_bytes(control) < 4096, message
    assert max(content_events_per_read(faulty)) >= 10, message  # 50+ measured (a 16 KB burst)
    assert largest_read_bytes(faulty) >= 4096, message  # 16 KB measured
    assert len(faulty.reads) < len(control.reads) / 5, message
    # Ground truth: events wait in nginx for tens of ms, against well under a millisecond tuned.
    assert statistics.median(delays_ms(faulty)) > 10 * max(statistics.median(delays_ms(control)), 0.5), message


async def test_nagle_at_the_edge_coalesces_events_and_delays_the_first_token() -> None:
    async with _edge_lab() as tuned:
        control = await _stream(tuned)
    async with _edge_lab("nagle") as lab:
        faulty = await _stream(lab)
        log = _log(lab)
    message = f"tuned: {describe(control)}\nnagle: {describe(faulty)}\nnginx error log:\n{log}"
    # The delayed-ACK hold (40 ms on Linux) gathers the 2 ms events behind an unacknowledged write.
    assert max(content_events_per_read(faulty)) >= 4, message
    assert max(content_events_per_read(faulty)) >= 2 * max(content_events_per_read(control)), message
    assert max(delays_ms(faulty)) > 20.0, message
    assert max(delays_ms(faulty)) > 4 * max(max(delays_ms(control)), 2.0), message


# -- connection --------------------------------------------------------------------------------------------------------
async def _fresh_connections(lab: EdgeLab) -> tuple[Timeline, Timeline]:
    """Two requests, each on a new connection; the second offers the first one's TLS session."""
    async with Client(ca_file=str(lab.cert_path)) as client:
        first = await _request(client, lab, new_connection=True, tokens=2)
        second = await _request(client, lab, new_connection=True, tokens=2)
    return first, second


async def test_tls_no_tickets_makes_every_fresh_connection_a_full_handshake() -> None:
    async with _edge_lab() as tuned:
        control = await _fresh_connections(tuned)
    async with _edge_lab("tls-no-tickets") as lab:
        faulty = await _fresh_connections(lab)
    assert [t.connection.tls_session_resumed for t in control if t.connection] == [False, True]
    assert [t.connection.tls_session_offered for t in faulty if t.connection] == [False, True]
    assert [t.connection.tls_session_resumed for t in faulty if t.connection] == [False, False]


def _handshakes(port: int, cafile: Path, version: ssl.TLSVersion) -> tuple[bool | None, bool | None]:
    """Two raw TLS connections pinned to ``version``; the second offers the first one's session (ticket and id)."""
    context = ssl.create_default_context(cafile=str(cafile))
    context.minimum_version = context.maximum_version = version
    session = None
    resumed = []
    for _ in range(2):
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="localhost", session=session) as tls,
        ):
            tls.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            while tls.recv(65536):  # read application data: a TLS 1.3 ticket arrives after the handshake
                pass
            resumed.append(tls.session_reused)
            session = tls.session
    return resumed[0], resumed[1]


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["tls1.2", "tls1.3"])
async def test_tls_no_tickets_defeats_both_tickets_and_the_session_cache(version: ssl.TLSVersion) -> None:
    async with _edge_lab() as tuned:
        assert tuned.cert_path is not None
        control = await asyncio.to_thread(_handshakes, tuned.port, tuned.cert_path, version)
    async with _edge_lab("tls-no-tickets") as lab:
        assert lab.cert_path is not None
        faulty = await asyncio.to_thread(_handshakes, lab.port, lab.cert_path, version)
    assert control == (False, True)
    assert faulty == (False, False)


async def test_no_h2_makes_alpn_pick_http11() -> None:
    async with _edge_lab() as tuned:
        control = await _stream(tuned, tokens=2)
    async with _edge_lab("no-h2") as lab:
        faulty = await _stream(lab, tokens=2)
    assert control.connection is not None and control.connection.alpn == "h2"
    assert faulty.connection is not None and faulty.connection.alpn == "http/1.1"
    assert faulty.connection.http_version == "HTTP/1.1"


async def _sequential(lab: EdgeLab, *, http2: bool) -> list[Timeline]:
    async with Client(ca_file=str(lab.cert_path), http2=http2) as client:
        return [await _request(client, lab, tokens=2) for _ in range(3)]


async def test_no_keepalive_makes_every_request_open_a_new_connection() -> None:
    async with _edge_lab() as tuned:
        control = await _sequential(tuned, http2=False)
    async with _edge_lab("no-keepalive") as lab:
        faulty = await _sequential(lab, http2=False)
    assert [t.connection.reused for t in control if t.connection] == [False, True, True]
    assert [t.connection.reused for t in faulty if t.connection] == [False, False, False]
    assert all(t.response_headers.get("connection") == "close" for t in faulty)


async def test_tuned_http2_reuses_one_connection() -> None:
    async with _edge_lab() as tuned:
        control = await _sequential(tuned, http2=True)
    assert [t.connection.reused for t in control if t.connection] == [False, True, True]
    assert all(t.connection.http_version == "HTTP/2" for t in control if t.connection)


async def test_no_keepalive_over_http2_answers_each_request_then_closes() -> None:
    async with _edge_lab("no-keepalive") as lab:
        faulty = await _sequential(lab, http2=True)
    assert [t.connection.reused for t in faulty if t.connection] == [False, False, False]
