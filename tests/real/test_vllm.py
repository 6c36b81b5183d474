"""latscope against real vLLM (its CPU build, tiny random Llama), as a new user runs it: default engine settings plus
``--enable-per-request-metrics``, so every request carries vLLM's own account of its queue, prefill and decode.

- ``probe``: every generated token is counted (most of this model's events carry no text), vLLM's per-request
  metrics become the request's server phases, and the TTFT split adds up.
- ``bench``: a short closed-loop run whose token counts are vLLM's own.
- ``diagnose``: vLLM schedules first come, first served, so a short prompt waits behind long ones — a true finding,
  confirmed by vLLM's own per-request accounts and told in vLLM's own knobs (chunked prefill is already on). Its
  prefix cache (on by default) serves a repeated prefix: no prefix-cache miss, and no cached response either.

One server for the module (start-up is ~40 s); the engine-configuration cases are in test_vllm_engine.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from latscope.checks import prefill as prefill_check
from latscope.diagnose import diagnose
from latscope.dialects import openai
from latscope.findings import Clear, Finding
from latscope.load import BenchConfig, ClosedLoop, Workload, bench_async, parse_length
from latscope.probe import probe
from latscope.signals.join import ttft_split
from latscope.timeline import metrics
from latscope.timeline.model import ServerPhase, Timeline
from latscope.wire import Client
from latscope.wire.target import Target
from tests.real.conftest import LlamaServer, free_port
from tests.real.vllm_server import running_vllm, vllm_prefill_ms
from tests.support.diagnosis import explain

pytestmark = pytest.mark.timeout(600)


#: Where vLLM exports its spans in this module (a free port chosen once; the span test listens there).
SPAN_PORT = free_port()


@pytest.fixture(scope="module")
def vllm(vllm_model: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    python, model_dir = vllm_model
    workdir = tmp_path_factory.mktemp("vllm")
    flags = ("--enable-per-request-metrics", "--otlp-traces-endpoint", f"http://127.0.0.1:{SPAN_PORT}/v1/traces")
    # OTLP over HTTP (vLLM's default is gRPC), exported every 100 ms instead of the SDK's 5 s
    env = (("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"), ("OTEL_BSP_SCHEDULE_DELAY", "100"))
    with running_vllm(python, model_dir, workdir, *flags, env=env) as server:
        yield server


async def test_probe_joins_vllms_own_span_of_every_request(vllm: LlamaServer) -> None:
    result = await probe(vllm.base_url, max_tokens=16, n=3, prompt_tokens=64, server_spans=("127.0.0.1", SPAN_PORT))
    assert result.ok, [t.error for t in result.timelines] + [vllm.log_tail()]
    assert result.server_spans is not None and result.server_spans.startswith("3 of 3"), result.server_spans
    for t in result.timelines:
        span = t.server_fields["server_span"]
        assert isinstance(span, dict) and span["name"] == "llm_request" and span["trace_id"] == t.trace_id
        assert span["parent_span_id"] == t.span_id  # vLLM's span is a child of the request's own
        sources = {m.source for m in t.server}
        assert {"span:gen_ai.latency.time_in_queue", "span:gen_ai.latency.time_in_model_prefill"} <= sources
        split = ttft_split(t)
        assert split is not None and sum(p.ns for p in split.parts) == split.ttft_ns
        ingest = split.ms("ingest")
        assert ingest is not None and ingest >= 0, split
        # vLLM's time to first token (arrival in its API server → its first output handled) lies inside the client's
        # (started → first token read); the split's remainder may still dip below 0 by the client's own stamping
        # delay after a write on a loaded machine (measured once in CI: 4 ms)
        vllm_ttft = sum(
            m.ms for m in t.server if m.name in ("ingest", "queue", "prefill") and m.source.startswith("span:")
        )
        assert vllm_ttft <= split.ttft_ms, (vllm_ttft, split)


#: Probe runs sent at most until :data:`PACED_WANTED` streams reached the client at their pace (see :func:`_paced`).
PACED_TRIES = 6
PACED_WANTED = 3


def _paced(t: Timeline) -> bool:
    """The stream's tokens reached the client in at least half as many reads as tokens: the client saw its pace. A
    loaded two-core host sometimes leaves vLLM's API server behind its engine, and it then writes a whole short
    stream at once, which shows nothing of the decode to compare."""
    reads = {e.read_index for e in t.events if e.tokens}
    return 2 * len(reads) >= metrics.output_tokens(t)


async def test_probe_counts_every_generated_token_and_joins_vllms_own_phases(vllm: LlamaServer) -> None:
    probed: list[Timeline] = []
    for _ in range(PACED_TRIES):
        result = await probe(vllm.base_url, max_tokens=24, n=3, prompt_tokens=32)
        assert result.ok, [t.error for t in result.timelines] + [vllm.log_tail()]
        probed += result.timelines
        if sum(_paced(t) for t in probed) >= PACED_WANTED:
            break
    paced = [t for t in probed if _paced(t)]
    assert len(paced) >= PACED_WANTED, f"{len(probed) - len(paced)} of {len(probed)} probes met a stream sent at once"
    for t in probed:
        assert t.usage is not None and t.usage.completion_tokens == 24
        # the events themselves carry every token (empty-text ones and the finish chunk's included)
        assert sum(e.tokens for e in t.events) == 24
        assert metrics.token_count_source(t) == "usage"
        phases = {m.name: m for m in t.server}
        for phase in (ServerPhase.QUEUE, ServerPhase.PREFILL, ServerPhase.DECODE):
            assert phases[phase].source.startswith("body:metrics."), t.server
        split = ttft_split(t)
        assert split is not None and sum(part.ns for part in split.parts) == split.ttft_ns
        assert split.consistent, split  # vLLM's queue + prefill fit inside the client's TTFT
    for t in paced:
        # vLLM's decode (first → last token in the engine) and the client's first → last token cover the same steps
        phases = {m.name: m for m in t.server}
        client_decode = (t.last_token_ns - t.first_token_ns) / 1e6  # type: ignore[operator]
        assert 0.5 < phases[ServerPhase.DECODE].ms / client_decode < 2.0, (phases, client_decode)


async def test_return_token_ids_counts_the_ids_and_says_so(vllm: LlamaServer) -> None:
    ids = {"return_token_ids": True}
    spec = openai.chat_request(vllm.model, "the water is long", 12, include_usage=False, extra=ids)
    async with Client() as client:
        t = await client.request(spec, vllm.base_url)
    assert t.ok, (t.error, vllm.log_tail())
    assert t.usage is None  # no usage asked for: the ids are the only count
    assert metrics.token_count_source(t) == "token_ids" and metrics.output_tokens(t) == 12


async def test_short_bench_counts_vllms_tokens(vllm: LlamaServer, tmp_path: Path) -> None:
    config = BenchConfig(
        target=Target.resolve(vllm.base_url),
        steps=(ClosedLoop(2),),
        workload=Workload.single(parse_length("32"), parse_length("16")),
        requests=8,
        warmup_requests=1,
        workers=1,
    )
    result = await bench_async(config, tmp_path / "run")
    step = result.steps[0]
    assert step.overall.requests == 8 and step.overall.errors == 0, vllm.log_tail()
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    measured = requests[~requests["warmup"]]
    assert (measured["output_tokens"] == 16).all(), measured["output_tokens"]


async def test_diagnose_names_fcfs_head_of_line_in_vllms_own_knobs_at_vllms_own_cost(vllm: LlamaServer) -> None:
    result = await diagnose(vllm.base_url, quick=True, only="queue-head-of-line", server_spans=("127.0.0.1", SPAN_PORT))
    assert result.target["engine"] == "vllm"
    outcome = result.outcome("queue-head-of-line")
    assert isinstance(outcome, Finding), explain(result) + "\n" + vllm.log_tail()
    assert "--long-prefill-token-threshold" in outcome.fix and "chunked prefill" not in outcome.fix.split(".")[0]
    # vLLM's own account of the short requests sent beside the long ones, from each one's span: its time to first
    # token from arrival in vLLM's API server (ingest + queue + prefill) grew by what the client saw. The per-request
    # metrics alone see less: the engine stamps a request queued when its busy loop takes it from the API server,
    # between two steps, so the step running when it came (a long prefill) is only in the span's ingest.
    alone, contended = _vllm_ttfts(result.timelines)
    assert len(alone) >= 2 and len(contended) >= 2, (result.server_spans, [t.label for t in result.timelines])
    vllm_inflation = _median(contended) - min(alone)
    assert 0.75 * vllm_inflation <= outcome.cost_ms <= 1.25 * vllm_inflation, (outcome.cost_ms, alone, contended)


def _vllm_ttfts(timelines: list[Timeline]) -> tuple[list[float], list[float]]:
    """vLLM's time to first token (arrival in its API server → first token: its span's ingest + queue + prefill) of
    the experiment's short requests sent alone and beside the long ones."""
    alone: list[float] = []
    contended: list[float] = []
    for t in timelines:
        label = t.label or ""
        spans = {m.name: m.ms for m in t.server if m.source.startswith("span:")}
        if not {ServerPhase.INGEST, ServerPhase.QUEUE, ServerPhase.PREFILL} <= spans.keys():
            continue
        ttft = spans[ServerPhase.INGEST] + spans[ServerPhase.QUEUE] + spans[ServerPhase.PREFILL]
        if label.startswith("short alone"):
            alone.append(ttft)
        elif label.startswith("round") and label.endswith(" short"):
            contended.append(ttft)
    return alone, contended


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


async def test_what_diagnose_names_on_default_vllm_vllms_own_spans_confirm(vllm: LlamaServer) -> None:
    """Default vLLM, as a new user runs it: prefill that grows faster than the prompt (attention on a CPU) and a
    per-token cost of sampling parameters. Each is confirmed by vLLM's own per-request spans of the same requests:
    its prefill per prompt token grows with the prompt, and its own decode time per token is longer for the sampled
    streams than for the greedy ones of the same prompt."""
    ids = "prefill-superlinear,decode-host-overhead"
    result = await diagnose(vllm.base_url, quick=True, only=ids, server_spans=("127.0.0.1", SPAN_PORT))
    prefill = result.outcome("prefill-superlinear")
    if isinstance(prefill, Finding):
        per_token = _span_prefill_per_token(result.timelines)
        # vLLM's own: with prefill a + b*n + c*n^2, the time per token grows by c per token, so the quadratic part
        # at the longest prompt L (c*L^2) is the growth per token between the shortest S and L, times L^2/(L - S):
        # the finding's claim is that this part is material (MATERIAL_SHARE of the longest's prefill)
        shortest, longest = min(per_token), max(per_token)
        slope = (per_token[longest] - per_token[shortest]) / (longest - shortest)
        quadratic_share = slope * longest / per_token[longest]
        assert quadratic_share >= prefill_check.MATERIAL_SHARE, (quadratic_share, per_token)
    decode = result.outcome("decode-host-overhead")
    if isinstance(decode, Finding):
        greedy, sampled = _span_tpots(result.timelines)
        assert len(greedy) >= 3 and len(sampled) >= 3, result.server_spans
        vllm_added = _median(sampled) - _median(greedy)
        assert vllm_added > 0.5 * decode.evidence["added_ms_per_token"], (vllm_added, decode.evidence)
        # each group named costly apart, by vLLM's own decode time for that group's streams against their greedy pairs
        for name, group in decode.evidence.get("by_parameter", {}).items():
            if group["verdict"] == "costs":
                g, s = _span_tpots(result.timelines, f"{name} apart: ")
                assert _median(s) - _median(g) > 0.5 * group["added_ms_per_token"], (name, g, s, group)
    # Whether each is named at all is the accuracy benchmark's question, not this test's: in three runs here
    # prefill-superlinear was named twice (inconclusive once) and decode-host-overhead twice (clear once, while
    # vLLM's own decode was 1.0 ms per token slower sampled)


def _span_prefill_per_token(timelines: list[Timeline]) -> dict[int, float]:
    """vLLM's own prefill time per prompt token (ms), by the prompt's size as vLLM counted it, fastest of each size."""
    out: dict[int, float] = {}
    for t in timelines:
        if not (t.label or "").startswith(("sweep ", "prefill ")) or t.usage is None or not t.usage.prompt_tokens:
            continue
        spans = {m.name: m.ms for m in t.server if m.source.startswith("span:")}
        if ServerPhase.PREFILL in spans and t.usage.prompt_tokens >= 400:  # past the fixed cost of a step
            size = t.usage.prompt_tokens
            out[size] = min(out.get(size, float("inf")), spans[ServerPhase.PREFILL] / size)
    return out


def _span_tpots(timelines: list[Timeline], group: str = "") -> tuple[list[float], list[float]]:
    """vLLM's own decode time per token (ms) of the greedy and the sampled streams (of one parameter group priced
    apart: ``group`` is its labels' prefix)."""
    greedy: list[float] = []
    sampled: list[float] = []
    for t in timelines:
        label = t.label or ""
        if not label.startswith(group):
            continue
        label = label.removeprefix(group)
        spans = {m.name: m.ms for m in t.server if m.source.startswith("span:")}
        tokens = t.usage.completion_tokens if t.usage is not None else None
        if ServerPhase.DECODE not in spans or not tokens or tokens < 2:
            continue
        tpot = spans[ServerPhase.DECODE] / (tokens - 1)
        if label.startswith("greedy"):
            greedy.append(tpot)
        elif label.startswith("sampled") or (group and label.startswith(group.split(" ")[0])):
            sampled.append(tpot)
    return greedy, sampled


async def test_default_vllm_serves_a_repeated_prefix_from_its_cache_and_is_told_no_response_cache(
    vllm: LlamaServer,
) -> None:
    """vLLM caches prefixes by default: the repeat of a 2,048-token prefix is clear, as vLLM's own per-request prefill
    of the same requests confirms, and a prefix hit is never called a cached response (the text is generated)."""
    ids = "prefix-cache-miss,response-cached"
    result = await diagnose(vllm.base_url, quick=True, only=ids, keep_timelines=True)
    outcome = result.outcome("prefix-cache-miss")
    assert isinstance(outcome, Clear), explain(result) + "\n" + vllm.log_tail()
    warm, fresh = vllm_prefill_ms(result.timelines, "prefix warm"), vllm_prefill_ms(result.timelines, "prefix fresh")
    assert warm and fresh and min(warm) < 0.5 * min(fresh), (warm, fresh)  # vLLM's own: the repeat hit its cache
    assert not isinstance(result.outcome("response-cached"), Finding), explain(result)
