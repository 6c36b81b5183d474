"""TLS through wrap_bio: versions, session resumption on a fresh connection, ALPN, HTTP/2 streaming, and the TLS
context built outside every request's clock."""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

from latscope import wire
from latscope.dialects.openai import OpenAIStreamDecoder
from latscope.timeline import EventKind, Phase, metrics
from latscope.wire import Client
from latscope.wire.tls import make_ssl_context
from tests.support.stream_server import StreamServer, models_handler, paced_stream
from tests.support.tls_certs import LocalPKI
from tests.wire.conftest import chat_spec

VERSIONS = [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
async def test_a_fresh_connection_resumes_the_saved_session(pki: LocalPKI, version: ssl.TLSVersion) -> None:
    ctx = pki.server_context(version=version)
    async with StreamServer(paced_stream(2), ssl_context=ctx) as server, Client(ca_file=pki.ca_file) as client:
        first = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        second = await client.request(
            chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"), new_connection=True
        )
    assert first.ok and second.ok, (first.error, second.error)
    assert first.connection is not None and second.connection is not None
    assert first.connection.tls_version == version.name.replace("v1_", "v1.")
    assert first.connection.tls_session_offered is False and first.connection.tls_session_resumed is False
    assert second.connection.tls_session_offered is True
    assert second.connection.tls_session_resumed is True
    assert first.tls_start_ns is not None and second.tls_start_ns is not None
    assert first.connection.tls_cipher


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
async def test_a_server_without_session_state_is_not_resumed(pki: LocalPKI, version: ssl.TLSVersion) -> None:
    def fresh_context() -> ssl.SSLContext:
        return pki.server_context(version=version, resumption=False)

    async with (
        StreamServer(paced_stream(2), ssl_factory=fresh_context) as server,
        Client(ca_file=pki.ca_file) as client,
    ):
        await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        second = await client.request(
            chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"), new_connection=True
        )
    assert second.ok, second.error
    assert second.connection is not None
    assert second.connection.tls_session_offered is True
    assert second.connection.tls_session_resumed is False


async def test_forgetting_sessions_means_a_full_handshake(pki: LocalPKI) -> None:
    ctx = pki.server_context()
    async with StreamServer(paced_stream(1), ssl_context=ctx) as server, Client(ca_file=pki.ca_file) as client:
        await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        client.forget_tls_sessions()
        second = await client.request(
            chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"), new_connection=True
        )
    assert second.connection is not None
    assert second.connection.tls_session_offered is False and second.connection.tls_session_resumed is False


async def test_alpn_selects_h2_and_the_stream_is_recorded(pki: LocalPKI) -> None:
    ctx = pki.server_context(alpn=("h2", "http/1.1"))
    async with StreamServer(paced_stream(20, 0.001), ssl_context=ctx) as server, Client(ca_file=pki.ca_file) as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.ok, t.error
    assert t.connection is not None
    assert t.connection.alpn == "h2" and t.connection.http_version == "HTTP/2"
    assert server.requests[0].http_version == "HTTP/2"
    assert [e.kind for e in t.events].count(EventKind.CONTENT) == 20
    assert t.events[-1].kind is EventKind.DONE
    assert all(t.reads[e.read_index].at_ns == e.at_ns for e in t.events)
    assert all(e.server_sent_ns is not None and e.at_ns >= e.server_sent_ns for e in t.events[:-1])
    assert t.first_byte_ns is not None and t.first_token_ns is not None and t.first_byte_ns <= t.first_token_ns
    assert t.status == 200 and t.response_headers["content-type"] == "text/event-stream"


async def test_alpn_falls_back_to_http11_when_the_server_has_no_h2(pki: LocalPKI) -> None:
    ctx = pki.server_context(alpn=("http/1.1",))
    async with StreamServer(paced_stream(2), ssl_context=ctx) as server, Client(ca_file=pki.ca_file) as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.ok and t.connection is not None
    assert t.connection.alpn == "http/1.1" and t.connection.http_version == "HTTP/1.1"


async def test_http1_only_client_does_not_offer_h2(pki: LocalPKI) -> None:
    ctx = pki.server_context(alpn=("h2", "http/1.1"))
    async with StreamServer(paced_stream(2), ssl_context=ctx) as server, Client(ca_file=pki.ca_file, http2=False) as c:
        t = await c.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.ok and t.connection is not None
    assert t.connection.alpn == "http/1.1"


async def test_http2_multiplexes_concurrent_requests_on_one_connection(pki: LocalPKI) -> None:
    ctx = pki.server_context(alpn=("h2", "http/1.1"))
    async with StreamServer(paced_stream(10, 0.002), ssl_context=ctx) as server, Client(ca_file=pki.ca_file) as client:
        timelines = await asyncio.gather(
            *(client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat")) for _ in range(4))
        )
    assert all(t.ok for t in timelines), [t.error for t in timelines]
    ids = {t.connection.connection_id for t in timelines if t.connection is not None}
    assert len(ids) == 1
    assert server.connections == 1
    assert sum(1 for t in timelines if t.connection is not None and t.connection.reused) == 3
    for t in timelines:
        assert [e.kind for e in t.events].count(EventKind.CONTENT) == 10


async def test_get_over_http2_returns_the_body(pki: LocalPKI) -> None:
    ctx = pki.server_context(alpn=("h2", "http/1.1"))
    handler = models_handler(paced_stream(1), models=("m1", "m2"))
    async with StreamServer(handler, ssl_context=ctx) as server, Client(ca_file=pki.ca_file) as client:
        response = await client.get(server.base_url + "/models")
    assert response.status == 200
    assert [m["id"] for m in response.json()["data"]] == ["m1", "m2"]
    assert response.timeline.connection is not None and response.timeline.connection.http_version == "HTTP/2"


def test_tls_resumption_and_http2_on_uvloop(pki: LocalPKI) -> None:
    async def scenario() -> tuple[bool | None, str | None, int]:
        ctx = pki.server_context(alpn=("h2", "http/1.1"))
        async with StreamServer(paced_stream(5), ssl_context=ctx) as server, Client(ca_file=pki.ca_file) as client:
            await client.request(chat_spec(), server.base_url)
            t = await client.request(chat_spec(), server.base_url, new_connection=True)
        assert t.ok, t.error
        assert t.connection is not None
        content = [e for e in t.events if e.kind is EventKind.CONTENT]
        return t.connection.tls_session_resumed, t.connection.alpn, len(content)

    assert wire.run(scenario()) == (True, "h2", 5)


async def test_the_tls_context_is_built_before_the_first_requests_clock_starts(
    pki: LocalPKI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loading the system trust store takes 20-30 ms; stand in for it with a deliberately slow build, so that time
    # would show up as pool wait if it were spent after `started_ns`.
    built_at_ns: list[int] = []

    def slow_context(**options: Any) -> ssl.SSLContext:
        time.sleep(0.05)
        built_at_ns.append(time.monotonic_ns())
        return make_ssl_context(**options)

    monkeypatch.setattr("latscope.wire.client.make_ssl_context", slow_context)
    ctx = pki.server_context()
    async with StreamServer(paced_stream(1), ssl_context=ctx) as server, Client(ca_file=pki.ca_file) as client:
        first = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        second = await client.request(chat_spec(), server.base_url, new_connection=True)
    assert first.ok and second.ok, (first.error, second.error)
    assert len(built_at_ns) == 1  # one context for the client's life
    assert built_at_ns[0] < first.started_ns
    pool = metrics.pool_ms(first)
    assert pool is not None and pool < 25.0, metrics.phases_ms(first)


async def test_a_plain_http_client_never_builds_a_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**options: Any) -> ssl.SSLContext:
        raise AssertionError("a TLS context was built for plain http")

    monkeypatch.setattr("latscope.wire.client.make_ssl_context", refuse)
    async with StreamServer(paced_stream(1)) as server, Client() as client:
        t = await client.request(chat_spec(), server.base_url)
    assert t.ok, t.error


async def test_an_unreadable_ca_file_is_recorded_in_the_tls_phase(tmp_path: Path) -> None:
    async with Client(ca_file=str(tmp_path / "missing.pem")) as client:
        t = await client.request(chat_spec(), "https://127.0.0.1:9/v1")
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.TLS, "tls-config")
    assert "missing.pem" in t.error.message
