"""Every fault switch, seen from outside: each one changes what a client measures, and tuned does not.

Timing assertions compare the fault against a tuned control measured in the same test, with generous ratios.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import statistics
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from latscope.cli.lab import command as lab_command
from latscope.dialects.openai import chat_request
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.lab.faults import FAULTS, PROFILES, SHORT_KEEPALIVE_TIMEOUT_S, Stage, UnknownFaultError, resolve_faults
from latscope.lab.scheduler import Policy
from latscope.lab.settings import LabSettings
from latscope.timeline import metrics
from latscope.timeline.model import Timeline
from latscope.wire import Client
from tests.lab import rawhttp


#: Tokens every ``step_ms``; prefill nearly free. Keeps streams short and their cadence known.
def paced(step_ms: float) -> CostModel:
    return CostModel.default().with_overrides(
        prefill_base_ms=0.5, prefill_per_token_ms=0.0, decode_base_ms=step_ms, decode_per_seq_ms=0.0
    )


# -- the registry -----------------------------------------------------------------------------------------------------
def test_every_fault_names_the_finding_it_should_trigger() -> None:
    assert {name: fault.finding_id for name, fault in FAULTS.items()} == {
        "no-keepalive": "no-connection-reuse",
        "short-keepalive": "no-connection-reuse",
        "tls-no-tickets": "tls-no-resumption",
        "no-h2": "http2-not-negotiated",
        "drop-trace-context": "trace-context-dropped",
        "response-cache": "response-cached",
        "silent-response-cache": "response-cached",
        "header-scan": "request-header-bloat",
        "slow-parse": "slow-request-parsing",
        "slow-image-preprocessing": "multimodal-preprocessing",
        "queue-hol": "queue-head-of-line",
        "nagle": "stream-coalescing-nagle",
        "proxy-buffering": "stream-proxy-buffering",
        "batching-window": "batching-window",
        "naive-attention": "prefill-superlinear",
        "few-slots": "capacity-saturation",
        "small-kv-cache": "kv-cache-pressure",
        "slow-sampling": "decode-host-overhead",
        "rate-limit": "rate-limited",
        "gateway-queue": "gateway-queueing",
        "no-idempotency": "retry-amplification",
        "gateway-overhead": "gateway-overhead",
        "no-prefix-cache": "prefix-cache-miss",
    }
    assert all(isinstance(fault.stage, Stage) and fault.description for fault in FAULTS.values())


def test_profiles_tuned_has_none_and_naive_has_the_four_hidden_bottlenecks() -> None:
    assert PROFILES["tuned"] == frozenset()
    assert PROFILES["naive"] == {"short-keepalive", "slow-parse", "queue-hol", "nagle"}


def test_faults_toggle_on_top_of_a_profile() -> None:
    assert resolve_faults("naive", no_faults=["nagle"]) == {"short-keepalive", "slow-parse", "queue-hol"}
    assert resolve_faults("tuned", faults=["proxy-buffering"]) == {"proxy-buffering"}
    assert resolve_faults("tuned", faults=["nagle"], no_faults=["nagle"]) == frozenset()
    with pytest.raises(UnknownFaultError, match="known faults"):
        resolve_faults("tuned", faults=["gremlins"])
    with pytest.raises(UnknownFaultError, match="known profiles"):
        resolve_faults("chaotic")


def test_scheduler_faults_set_the_policy_and_window_unless_given() -> None:
    assert LabSettings().scheduler_config().policy is Policy.PRIORITY
    assert LabSettings(faults=("queue-hol",)).scheduler_config().policy is Policy.FIFO
    assert LabSettings(faults=("queue-hol",), policy=Policy.PRIORITY).scheduler_config().policy is Policy.PRIORITY
    window = LabSettings(faults=("batching-window",)).scheduler_config()
    assert (window.batch_window_ms, window.batch_trigger) == (50.0, 8)
    assert LabSettings(faults=("batching-window",), batch_window_ms=5.0).scheduler_config().batch_window_ms == 5.0
    assert LabSettings().scheduler_config().batch_window_ms == 0.0


def test_engine_faults_change_the_engine_costs_only() -> None:
    tuned = LabSettings().scheduler_config().cost
    naive = LabSettings(faults=("naive-attention",)).scheduler_config().cost
    assert naive.prefill_quadratic_ms == pytest.approx(40 * tuned.prefill_quadratic_ms)
    assert naive.prefill_per_token_ms == tuned.prefill_per_token_ms and naive.max_batch == tuned.max_batch
    few = LabSettings(faults=("few-slots",)).scheduler_config().cost
    assert few.max_batch == 4 and few.prefill_quadratic_ms == tuned.prefill_quadratic_ms
    small = LabSettings(faults=("small-kv-cache",)).scheduler_config().cost
    assert small.kv_capacity_tokens == 6144 and small.max_batch == tuned.max_batch


def test_list_faults_prints_each_fault_with_its_finding() -> None:
    result = CliRunner().invoke(lab_command, ["--list-faults"], env={"COLUMNS": "160"})
    assert result.exit_code == 0
    for fault in FAULTS.values():
        assert fault.name in result.output and fault.finding_id in result.output


def test_cli_rejects_unknown_faults() -> None:
    result = CliRunner().invoke(lab_command, ["--fault", "gremlins"])
    assert result.exit_code != 0 and "gremlins" in result.output


# -- connection --------------------------------------------------------------------------------------------------------
async def _sequential(lab: Lab, client: Client, count: int, max_tokens: int = 3) -> list[Timeline]:
    return [await client.request(chat_request("lab-model", "hello", max_tokens), lab.url) for _ in range(count)]


async def test_no_keepalive_makes_every_request_open_a_new_connection() -> None:
    async with Lab(cost=paced(1.0)) as tuned, Client() as client:
        control = await _sequential(tuned, client, 3)
        assert tuned.connections_accepted == 1
    async with Lab(cost=paced(1.0), faults=("no-keepalive",)) as lab, Client() as client:
        faulty = await _sequential(lab, client, 3)
        assert lab.connections_accepted == 3
    assert [t.connection.reused for t in control if t.connection] == [False, True, True]
    assert [t.connection.reused for t in faulty if t.connection] == [False, False, False]
    assert all(t.response_headers.get("connection") == "close" for t in faulty)
    assert all(t.error is None for t in faulty)


async def test_short_keepalive_reuses_back_to_back_but_not_after_a_pause() -> None:
    # The control is the same lab and client: back to back the connection is reused; after a pause longer than the
    # fault's idle timeout (but far shorter than any stock keep-alive timeout) the next request needs a new one.
    pause_s = 4 * SHORT_KEEPALIVE_TIMEOUT_S
    async with Lab(cost=paced(1.0), faults=("short-keepalive",)) as lab, Client() as client:
        back_to_back = await _sequential(lab, client, 2)
        await asyncio.sleep(pause_s)
        after_pause = await client.request(chat_request("lab-model", "hello", 3), lab.url)
        accepted = lab.connections_accepted
    async with Lab(cost=paced(1.0)) as tuned, Client() as client:
        await _sequential(tuned, client, 1)
        await asyncio.sleep(pause_s)
        control = await client.request(chat_request("lab-model", "hello", 3), tuned.url)
    assert [t.connection.reused for t in back_to_back if t.connection] == [False, True]
    assert after_pause.error is None and after_pause.connection is not None
    assert not after_pause.connection.reused
    assert accepted == 2
    assert control.connection is not None and control.connection.reused


async def test_no_keepalive_over_http2_sends_goaway_after_each_response() -> None:
    async with (
        Lab(cost=paced(1.0), tls=True, faults=("no-keepalive",)) as lab,
        Client(ca_file=str(lab.cert_path)) as client,
    ):
        faulty = await _sequential(lab, client, 2)
        accepted = lab.connections_accepted
    assert all(t.error is None for t in faulty)
    assert all(t.connection is not None and t.connection.http_version == "HTTP/2" for t in faulty)
    assert accepted == 2


def _tls_handshakes(port: int, cafile: Path, version: ssl.TLSVersion) -> tuple[bool, bool]:
    """Two connections with one client context; the second offers the first one's session. (reused?, reused?)"""
    context = ssl.create_default_context(cafile=str(cafile))
    context.minimum_version = context.maximum_version = version
    context.set_alpn_protocols(["http/1.1"])
    session = None
    reused = []
    for _ in range(2):
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="localhost", session=session) as tls,
        ):
            tls.sendall(rawhttp.get("/health"))
            tls.recv(65536)  # application data first: a TLS 1.3 ticket arrives after the handshake
            reused.append(tls.session_reused)
            session = tls.session
    return reused[0], reused[1]


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
async def test_tls_no_tickets_makes_resumption_fail(version: ssl.TLSVersion) -> None:
    async with Lab(tls=True) as tuned:
        assert tuned.cert_path is not None
        control = await asyncio.to_thread(_tls_handshakes, tuned.port, tuned.cert_path, version)
    async with Lab(tls=True, faults=("tls-no-tickets",)) as lab:
        assert lab.cert_path is not None
        faulty = await asyncio.to_thread(_tls_handshakes, lab.port, lab.cert_path, version)
        records = list(lab.records)
    assert control == (False, True)
    assert faulty == (False, False)
    assert [r.tls_resumed for r in records] == [False, False]


def _openssl_resumes(port: int, directory: Path) -> bool:
    """Does OpenSSL's own client resume a TLS 1.2 session (by session id: the server-side cache path)?"""
    session_file = directory / "session.pem"
    common = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-tls1_2", "-servername", "localhost"]
    subprocess.run([*common, "-sess_out", str(session_file)], input=b"", capture_output=True, timeout=20, check=False)
    out = subprocess.run(
        [*common, "-sess_in", str(session_file)], input=b"", capture_output=True, timeout=20, check=False
    ).stdout
    return b"Reused, TLSv1.2" in out


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command-line tool")
async def test_tls_no_tickets_also_defeats_the_session_id_cache(tmp_path: Path) -> None:
    async with Lab(tls=True) as tuned:
        control = await asyncio.to_thread(_openssl_resumes, tuned.port, tmp_path)
    async with Lab(tls=True, faults=("tls-no-tickets",)) as lab:
        faulty = await asyncio.to_thread(_openssl_resumes, lab.port, tmp_path)
    assert control is True
    assert faulty is False


async def test_no_h2_makes_alpn_pick_http11() -> None:
    async with Lab(cost=paced(1.0), tls=True) as tuned, Client(ca_file=str(tuned.cert_path)) as client:
        control = await client.request(chat_request("lab-model", "hello", 2), tuned.url)
    async with Lab(cost=paced(1.0), tls=True, faults=("no-h2",)) as lab, Client(ca_file=str(lab.cert_path)) as client:
        faulty = await client.request(chat_request("lab-model", "hello", 2), lab.url)
    assert control.connection is not None and control.connection.alpn == "h2"
    assert faulty.connection is not None and faulty.connection.alpn == "http/1.1"
    assert faulty.error is None


# -- gateway -----------------------------------------------------------------------------------------------------------
async def _server_ms(lab: Lab, client: Client, padding: int) -> float:
    """Best of three: time from the last request byte sent to the first response byte, with ``user`` padding."""
    best = None
    for _ in range(3):
        t = await client.request(chat_request("lab-model", "hello", 1, extra={"user": "x" * padding}), lab.url)
        assert t.error is None and t.first_byte_ns is not None and t.send_end_ns is not None
        elapsed = (t.first_byte_ns - t.send_end_ns) / 1e6
        best = elapsed if best is None else min(best, elapsed)
    assert best is not None
    return best


async def test_slow_parse_makes_server_time_grow_with_body_size() -> None:
    small, large = 1_000, 2_000_000
    async with Lab() as tuned, Client() as client:
        tuned_growth = await _server_ms(tuned, client, large) - await _server_ms(tuned, client, small)
    async with Lab(faults=("slow-parse",)) as lab, Client() as client:
        faulty_growth = await _server_ms(lab, client, large) - await _server_ms(lab, client, small)
        record = max(lab.records, key=lambda r: r.body_bytes)
    assert faulty_growth > 5 * max(tuned_growth, 1.0)
    assert faulty_growth > 20.0  # tens of ms per MB, at least
    assert record.parse_ms is not None and record.validate_ms is not None
    assert record.parse_ms + record.validate_ms > faulty_growth / 2  # Server-Timing accounts for it


# -- scheduler ---------------------------------------------------------------------------------------------------------
async def _short_ttft_behind_a_long_prompt(lab: Lab) -> float:
    async with Client() as client:
        long_request = asyncio.ensure_future(client.request(chat_request("lab-model", "word " * 8000, 1), lab.url))
        await asyncio.sleep(0.03)  # the long prefill is under way
        short = await client.request(chat_request("lab-model", "hi", 1), lab.url)
        await long_request
    assert short.first_token_ns is not None and short.send_end_ns is not None
    return (short.first_token_ns - short.send_end_ns) / 1e6


async def test_queue_hol_makes_short_prompts_wait_for_long_prefills() -> None:
    # Chunks of 512 prompt tokens (~22 ms) keep the tuned control well clear of the FIFO case.
    cost = CostModel.default().with_overrides(chunk_tokens=512)
    async with Lab(cost=cost) as tuned:
        control = await _short_ttft_behind_a_long_prompt(tuned)
    async with Lab(cost=cost, faults=("queue-hol",)) as lab:
        faulty = await _short_ttft_behind_a_long_prompt(lab)
        queue_ms = min(lab.records, key=lambda r: r.prompt_tokens or 0).queue_ms  # the short one
    assert faulty > 3 * control
    assert queue_ms is not None and queue_ms > 100.0  # most of the ~340 ms prefill of 8000 tokens


async def test_batching_window_puts_a_floor_under_ttft_at_idle() -> None:
    async with Lab(cost=paced(1.0)) as tuned, Client() as client:
        control = await client.request(chat_request("lab-model", "hi", 1), tuned.url)
    async with Lab(cost=paced(1.0), faults=("batching-window",)) as lab, Client() as client:
        faulty = await client.request(chat_request("lab-model", "hi", 1), lab.url)
        window_ms = lab.records[-1].window_wait_ms
    assert control.first_token_ns and control.send_end_ns and faulty.first_token_ns and faulty.send_end_ns
    control_ms = (control.first_token_ns - control.send_end_ns) / 1e6
    faulty_ms = (faulty.first_token_ns - faulty.send_end_ns) / 1e6
    assert faulty_ms > control_ms + 30.0  # the 50 ms window, minus generous slack
    assert window_ms is not None and window_ms >= 40.0


async def test_few_slots_make_a_fifth_concurrent_request_wait_for_one_to_finish() -> None:
    async with Lab(cost=paced(2.0), faults=("few-slots",)) as lab, Client() as client:
        await asyncio.gather(*(client.request(chat_request("lab-model", f"hi {i}", 20), lab.url) for i in range(5)))
        waits = sorted(r.queue_ms or 0.0 for r in lab.records)
    assert waits[-1] > 20.0 and waits[-1] > 10 * max(waits[0], 0.5)  # one waited about a 20-token stream


async def test_naive_attention_makes_long_prefills_grow_with_the_square_of_the_prompt() -> None:
    async def prefill_ms(lab: Lab, words: int) -> float:
        async with Client() as client:
            await client.request(chat_request("lab-model", " ".join(["word"] * words), 1), lab.url)
        value = lab.records[-1].prefill_ms
        assert value is not None
        return value

    async with Lab(faults=("naive-attention",)) as lab:
        short, long = await prefill_ms(lab, 1000), await prefill_ms(lab, 4000)
    async with Lab() as tuned:
        tuned_short, tuned_long = await prefill_ms(tuned, 1000), await prefill_ms(tuned, 4000)
    # 4x the prompt: about 4x the prefill when attention is cheap, far more when it is not
    assert tuned_long / tuned_short < 5.0 < long / short


async def test_slow_sampling_taxes_every_token_of_a_sampled_stream_only() -> None:
    async def tpot_ms(lab: Lab, extra: dict[str, object]) -> float:
        async with Client() as client:
            t = await client.request(chat_request("lab-model", "hi", 20, extra=extra), lab.url)
        return statistics.median(metrics.itl_ms(t))

    async with Lab(cost=paced(2.0), faults=("slow-sampling",)) as lab:
        greedy = await tpot_ms(lab, {"temperature": 0})
        sampled = await tpot_ms(lab, {"top_p": 0.9, "logprobs": True})
        plain_temperature = await tpot_ms(lab, {"temperature": 0.7})
    assert sampled > greedy + 3.0  # the 5 ms host cost per step, less generous slack
    assert plain_temperature < greedy + 2.0  # plain temperature stays on the fast path


# -- streaming ---------------------------------------------------------------------------------------------------------
def _max_events_per_read_at_start(t: Timeline, window_ms: float) -> int:
    start = t.events[0].at_ns
    per_read: dict[int, int] = {}
    for event in t.events:
        if event.at_ns - start <= window_ms * 1e6:
            per_read[event.read_index] = per_read.get(event.read_index, 0) + 1
    return max(per_read.values())


async def _second_stream_coalescing(lab: Lab) -> int:
    async with Client() as client:
        _, second = await _sequential(lab, client, 2, max_tokens=30)
    assert second.connection is not None and second.connection.reused  # Nagle shows on reused connections
    assert second.error is None
    return _max_events_per_read_at_start(second, 80.0)


async def test_nagle_coalesces_events_at_stream_start_on_a_reused_connection() -> None:
    async with Lab(cost=paced(5.0)) as tuned:
        control = await _second_stream_coalescing(tuned)
    async with Lab(cost=paced(5.0), faults=("nagle",)) as lab:
        faulty = await _second_stream_coalescing(lab)
        assert all(not r.nodelay for r in lab.records)
    # Tuned: at most the role chunk and the first token share a read. Nagle: the delayed-ACK hold (~40 ms) gathers
    # the 5 ms events behind the first one (4–6 per read measured, reference/network-timing.md).
    assert faulty >= 4
    assert faulty >= 2 * control


async def _stream(lab: Lab, max_tokens: int) -> Timeline:
    async with Client() as client:
        t = await client.request(chat_request("lab-model", "hello", max_tokens), lab.url)
    assert t.error is None
    return t


async def test_proxy_buffering_delivers_the_stream_in_16_kb_bursts() -> None:
    async with Lab(cost=paced(1.0)) as tuned:
        control = await _stream(tuned, 300)
    async with Lab(cost=paced(1.0), faults=("proxy-buffering",)) as lab:
        faulty = await _stream(lab, 300)
        record = lab.records[-1]
    assert max(r.nbytes for r in control.reads) < 16 * 1024
    assert len(control.reads) > len(control.events) / 3  # about one read per event
    assert max(r.nbytes for r in faulty.reads) >= 16 * 1024
    assert len(faulty.reads) < len(faulty.events) / 10
    assert len(faulty.events) == len(control.events)  # everything arrives, only later and in lumps
    assert control.response_headers.get("x-accel-buffering") == "no"
    assert "x-accel-buffering" not in faulty.response_headers
    assert record.events_written > 10 * record.write_calls
