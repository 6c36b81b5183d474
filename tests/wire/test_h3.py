"""HTTP/3 end to end: the lab serving QUIC on its TCP port's number, the probe's h3 client filling the same timeline,
Alt-Svc announcing it, and a target without HTTP/3 failing in the tls phase within its limit.

Without aioquic these tests skip, except under CI (``CI`` or ``LATSCOPE_REQUIRE_HTTP3`` set), where they fail: the
``test`` extra installs it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import ssl
import time
from pathlib import Path

import pytest

try:
    import aioquic  # noqa: F401
except ImportError:  # pragma: no cover - the test extra installs it
    _MESSAGE = "aioquic is not installed (pip install 'latscope[http3]')"
    if os.environ.get("CI") or os.environ.get("LATSCOPE_REQUIRE_HTTP3"):
        pytest.fail(_MESSAGE + "; CI must have it (the test extra)", pytrace=False)
    pytest.skip(_MESSAGE, allow_module_level=True)

from click.testing import CliRunner

from latscope.cli.main import cli
from latscope.dialects import get_dialect
from latscope.lab.app import Lab
from latscope.probe import probe
from latscope.timeline import EventKind, Phase, metrics
from latscope.timeline.model import ErrorKind
from latscope.wire import Timeouts
from latscope.wire.h3 import HTTP3, H3Client
from latscope.wire.target import Target

SPEC = get_dialect("openai.chat").build_request("lab-model", "Count to ten.", 12)


async def test_the_lab_serves_http3_and_a_request_fills_every_phase() -> None:
    async with Lab(tls=True, http3=True, truth=True) as lab, H3Client(ca_file=str(lab.cert_path)) as client:
        t = await client.request(SPEC, lab.url)
        accepted = (lab.http3_connections_accepted, lab.connections_accepted)
    assert t.ok, t.error
    info = t.connection
    assert info is not None and info.http_version == HTTP3 and info.alpn == "h3" and info.tls_version == "TLSv1.3"
    assert info.reused is False and info.remote_port == lab.port
    # connect is the UDP socket (no packet); the QUIC handshake is the tls phase, then send, head, stream
    assert t.connect_start_ns is not None and t.connect_end_ns is not None and t.tls_start_ns is not None
    assert t.connect_start_ns <= t.connect_end_ns <= t.tls_start_ns
    assert t.tls_end_ns is not None and t.tls_end_ns > t.tls_start_ns
    assert t.connection_ready_ns is not None and t.send_end_ns is not None and t.first_byte_ns is not None
    assert t.tls_end_ns <= t.connection_ready_ns <= t.send_end_ns <= t.first_byte_ns
    assert t.headers_received_ns is not None and t.first_token_ns is not None
    assert t.first_byte_ns <= t.headers_received_ns <= t.first_token_ns
    # every datagram is a read, every event decoded by the dialect's decoder and stamped with its read
    assert t.reads and all(r.nbytes > 0 for r in t.reads)
    assert [r.at_ns for r in t.reads] == sorted(r.at_ns for r in t.reads)
    tokens = [e for e in t.events if e.kind is EventKind.CONTENT]
    assert len(tokens) == 12
    assert all(t.reads[e.read_index].at_ns == e.at_ns for e in t.events)
    assert all(e.server_sent_ns is not None and e.server_sent_ns <= e.at_ns for e in tokens)  # the lab's truth
    ttft = metrics.ttft_ms(t)
    assert ttft is not None and ttft > 0
    assert metrics.tls_ms(t) is not None
    assert accepted == (1, 0)  # one QUIC connection, nothing over TCP


async def test_one_quic_connection_carries_the_requests_and_a_new_one_resumes_the_session() -> None:
    async with Lab(tls=True, http3=True) as lab, H3Client(ca_file=str(lab.cert_path)) as client:
        first = await client.request(SPEC, lab.url)
        second = await client.request(SPEC, lab.url)
        fresh = await client.request(SPEC, lab.url, new_connection=True)
        stats = client.stats()
    assert first.ok and second.ok and fresh.ok, (first.error, second.error, fresh.error)
    assert first.connection is not None and second.connection is not None and fresh.connection is not None
    assert second.connection.reused and second.connection.connection_id == first.connection.connection_id
    assert second.tls_start_ns is None  # a reused connection has no handshake
    assert first.connection.tls_session_offered is False and first.connection.tls_session_resumed is False
    assert fresh.connection.tls_session_offered is True and fresh.connection.tls_session_resumed is True
    (origin_stats,) = stats.values()
    assert (origin_stats.connections_opened, origin_stats.requests, origin_stats.reuses) == (2, 3, 1)
    assert (origin_stats.tls_sessions_offered, origin_stats.tls_sessions_resumed) == (1, 1)


async def test_the_tls_no_tickets_fault_stops_resumption_over_http3_too() -> None:
    async with Lab(tls=True, http3=True, faults=("tls-no-tickets",)) as lab, H3Client(ca_file=str(lab.cert_path)) as c:
        first = await c.request(SPEC, lab.url)
        fresh = await c.request(SPEC, lab.url, new_connection=True)
    assert first.ok and fresh.ok, (first.error, fresh.error)
    assert fresh.connection is not None and fresh.connection.tls_session_resumed is False


async def test_requests_sent_at_once_share_the_one_connection_being_opened() -> None:
    async with Lab(tls=True, http3=True) as lab:
        result = await probe(
            Target.resolve(lab.url, ca_file=str(lab.cert_path), http3=True),
            n=4,
            max_tokens=4,
            browser=True,
            scrape_metrics=False,
        )
        accepted = lab.http3_connections_accepted
    assert result.ok, [t.error for t in result.timelines]
    assert accepted == 1
    assert len({t.connection.connection_id for t in result.timelines if t.connection is not None}) == 1
    assert sum(1 for t in result.timelines if t.connection is not None and t.connection.reused) == 3


async def test_the_probe_over_http3_reports_handshake_ttft_and_the_alt_svc_fact() -> None:
    async with Lab(tls=True, http3=True) as lab:
        result = await probe(
            Target.resolve(lab.url, ca_file=str(lab.cert_path), http3=True),
            n=2,
            max_tokens=8,
            compare_tcp=True,
            scrape_metrics=False,
        )
    assert result.ok, [t.error for t in result.timelines + result.tcp_timelines]
    assert result.http3 and len(result.timelines) == 2 and len(result.tcp_timelines) == 2
    assert all(t.connection is not None and t.connection.http_version == HTTP3 for t in result.timelines)
    assert all(t.connection is not None and t.connection.http_version != HTTP3 for t in result.tcp_timelines)
    facts = result.facts()
    assert facts["http_version"] == HTTP3 and facts["alpn"] == "h3"
    # the model list and the comparison went over TCP, whose responses announce the UDP listener
    assert facts["h3_advertised"] == {"port": lab.port, "host": None, "max_age_s": 86400}
    data = result.to_dict()
    assert data["http3"] is True and len(data["tcp_comparison"]) == 2
    assert data["requests"][0]["metrics"]["tls_ms"] > 0 and data["requests"][0]["metrics"]["ttft_ms"] > 0


async def test_alt_svc_is_detected_over_tcp_and_only_with_http3_on() -> None:
    async with Lab(tls=True, http3=True) as lab:
        with_h3 = await probe(
            Target.resolve(lab.url, ca_file=str(lab.cert_path)), n=1, max_tokens=4, scrape_metrics=False
        )
    async with Lab(tls=True) as lab:
        without = await probe(
            Target.resolve(lab.url, ca_file=str(lab.cert_path)), n=1, max_tokens=4, scrape_metrics=False
        )
    assert with_h3.timelines[0].response_headers["alt-svc"] == f'h3=":{with_h3.facts()["remote_port"]}"; ma=86400'
    assert with_h3.facts()["h3_advertised"]["max_age_s"] == 86400
    assert without.facts()["h3_advertised"] is None


async def test_a_server_without_http3_fails_in_the_tls_phase_at_once_when_the_port_is_closed() -> None:
    async with Lab(tls=True) as lab, H3Client(ca_file=str(lab.cert_path), timeouts=Timeouts(tls_s=5.0)) as client:
        started = time.monotonic()
        t = await client.request(SPEC, lab.url)
        took_s = time.monotonic() - started
    assert t.error is not None and t.error.phase is Phase.TLS and t.error.kind is ErrorKind.REFUSED
    assert "nothing serves HTTP/3" in t.error.message
    assert took_s < 2.0  # the kernel's port unreachable, not the timeout


async def test_a_udp_port_that_never_answers_times_out_in_the_tls_phase() -> None:
    # something holds the UDP port and never answers: no ICMP, only silence
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    try:
        async with H3Client(verify=False, timeouts=Timeouts(tls_s=0.5)) as client:
            started = time.monotonic()
            t = await client.request(SPEC, f"https://127.0.0.1:{port}/v1")
            took_s = time.monotonic() - started
    finally:
        silent.close()
    assert t.error is not None and t.error.phase is Phase.TLS and t.error.kind is ErrorKind.TIMEOUT
    assert "QUIC handshake" in t.error.message
    assert 0.4 < took_s < 3.0


async def test_an_untrusted_certificate_fails_the_quic_handshake_as_cert_verify() -> None:
    async with Lab(tls=True, http3=True) as lab, H3Client() as client:
        t = await client.request(SPEC, lab.url)
    assert t.error is not None and t.error.phase is Phase.TLS and t.error.kind is ErrorKind.CERT_VERIFY


async def test_a_plain_http_url_is_refused_with_a_clear_error() -> None:
    async with H3Client() as client:
        t = await client.request(SPEC, "http://127.0.0.1:9/v1")
    assert t.error is not None and t.error.kind is ErrorKind.URL and "https" in t.error.message


async def test_the_lab_survives_garbage_datagrams_and_keeps_serving() -> None:
    async with Lab(tls=True, http3=True) as lab:
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for payload in (b"", b"\x00", b"\xff" * 1200, b"\xc0\x00\x00\x00\x01" + os.urandom(1300), os.urandom(50)):
                sender.sendto(payload, ("127.0.0.1", lab.port))
        finally:
            sender.close()
        await asyncio.sleep(0.05)
        async with H3Client(ca_file=str(lab.cert_path)) as client:
            t = await client.request(SPEC, lab.url)
    assert t.ok, t.error


async def test_http3_needs_tls_in_the_lab() -> None:
    with pytest.raises(ValueError, match="TLS"):
        async with Lab(http3=True):
            pass


def test_the_probe_command_refuses_http3_on_a_plain_url_and_compare_without_http3() -> None:
    runner = CliRunner()
    plain = runner.invoke(cli, ["probe", "http://127.0.0.1:9/v1", "--http3", "-m", "m"])
    assert plain.exit_code == 2 and "--http3 needs an https:// URL" in plain.output
    alone = runner.invoke(cli, ["probe", "https://127.0.0.1:9/v1", "--compare", "-m", "m"])
    assert alone.exit_code == 2 and "give --http3 too" in alone.output


def test_the_lab_command_refuses_http3_without_tls() -> None:
    result = CliRunner().invoke(cli, ["lab", "--http3", "--port", "0"])
    assert result.exit_code == 2 and "--http3 needs --tls" in result.output


async def test_the_lab_answers_431_and_413_over_http3_before_reading_the_rest() -> None:
    big = dataclasses.replace(SPEC, body=SPEC.body + b" " * 20_000)
    async with (
        Lab(tls=True, http3=True, max_header_bytes=4096, max_body_bytes=10_000) as lab,
        H3Client(ca_file=str(lab.cert_path)) as client,
    ):
        bloated = await client.request(SPEC, lab.url, headers=[("x-padding", "p" * 8000)])
        too_large = await client.request(big, lab.url)
        after = await client.request(SPEC, lab.url)
    assert bloated.status == 431 and too_large.status == 413
    assert after.ok, after.error  # the connection still carries requests


async def test_the_lab_closes_a_connection_that_breaks_http3_and_serves_the_next() -> None:
    from aioquic.asyncio.client import connect
    from aioquic.h3.connection import H3_ALPN
    from aioquic.quic.configuration import QuicConfiguration

    async with Lab(tls=True, http3=True) as lab:
        configuration = QuicConfiguration(is_client=True, alpn_protocols=list(H3_ALPN), verify_mode=ssl.CERT_NONE)
        async with connect("127.0.0.1", lab.port, configuration=configuration) as raw:
            _, writer = await raw.create_stream()
            writer.write(b"\x00\x3f" + os.urandom(64))  # a DATA frame before HEADERS, then noise (RFC 9114 §4.1)
            writer.write_eof()
            await asyncio.wait_for(raw.wait_closed(), 5.0)  # the lab closed the connection (H3_FRAME_UNEXPECTED)
        async with H3Client(ca_file=str(lab.cert_path)) as client:
            t = await client.request(SPEC, lab.url)
    assert t.ok, t.error


async def test_an_unreadable_ca_file_fails_as_tls_config(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-cert.pem"
    bad.write_text("garbage\n")
    async with H3Client(ca_file=str(bad)) as client:
        t = await client.request(SPEC, "https://127.0.0.1:9/v1")
    assert t.error is not None and t.error.phase is Phase.TLS and t.error.kind is ErrorKind.TLS_CONFIG
    assert str(bad) in t.error.message
