"""What each lab fault really costs, measured without going through the diagnosis: the ground truth its findings'
``cost_ms`` is held to.

Where the lab injects time itself (parsing, queueing) the truth comes from its per-request records. Where the cost is
the network's (Nagle, a buffering proxy) it comes from the lab's per-event send stamps (``truth=True``) against the
client's read stamps: how long the first token was held. Where the cost is a connection's setup (no reuse, no TLS
resumption, no HTTP/2) it is an independent measurement with a separate client.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
from typing import Any

from latscope.diagnose import Diagnosis
from latscope.diagnose.experiments.prefixcache import SUFFIX_TOKENS as PREFIX_SUFFIX_TOKENS
from latscope.diagnose.experiments.saturation import ROUNDS as SWEEP_ROUNDS
from latscope.dialects.base import RequestSpec
from latscope.dialects.openai import chat_request
from latscope.dialects.prompts import synthetic_prompt
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.lab.prefixcache import BLOCK_TOKENS
from latscope.lab.records import RequestRecord
from latscope.timeline import metrics
from latscope.timeline.model import TOKEN_KINDS, Timeline
from latscope.wire import Client

MB = 1024 * 1024
#: The lab's default engine made twice as fast at prefill (linear and attention alike, as a faster GPU is) and at a
#: token every 6 ms: an 8k-token prompt ≈ 170 ms, so every fault's cost stands out from noise and a quick diagnosis
#: takes a few seconds; the tuned attention keeps the default's shape (≈ 9 % of a 16k-token prefill).
TEST_COST = CostModel.default().with_overrides(
    prefill_per_token_ms=0.02, prefill_quadratic_ms=1.25e-7, decode_base_ms=6.0
)
#: Requests per independent measurement.
SAMPLES = 5
#: Short requests of the queueing experiment: a 16-token prompt (plus the chat template) and one token.
SHORT_PROMPT_MAX = 64
#: Records with a prompt at least this long are the queueing experiment's long requests.
LONG_PROMPT_MIN = 4096


def _client(lab: Lab, **options: Any) -> Client:
    ca = str(lab.cert_path) if lab.cert_path is not None else None
    return Client(ca_file=ca, **options)


def _spec(seed: int, max_tokens: int) -> RequestSpec:
    return chat_request("lab-model", synthetic_prompt(16, 10_000_000 + seed), max_tokens)


def _lower_quartile(values: list[float]) -> float:
    """A connection's own setup cost: a busy host only adds time (see checks.connection.SETUP_PERCENTILE)."""
    return statistics.quantiles(values, n=4, method="inclusive")[0]


def first_token_hold_ms(t: Timeline, one_way_ms: float = 0.0) -> float:
    """How long the first token waited between the lab writing it and the client reading it, beyond the path's
    one-way delay (``one_way_ms``: what a network path between them adds to every packet)."""
    first = next(e for e in t.events if e.kind in TOKEN_KINDS and e.server_sent_ns is not None)
    assert first.server_sent_ns is not None
    return (first.at_ns - first.server_sent_ns) / 1e6 - one_way_ms


async def nagle_hold_ms(lab: Lab, one_way_ms: float = 0.0) -> float:
    """Median first-token hold on reused connections with the kernel's default ACK behaviour."""
    async with _client(lab) as client:
        await client.request(_spec(0, 1), lab.url)
        holds = []
        for i in range(SAMPLES):
            t = await client.request(_spec(i + 1, 8), lab.url)
            assert t.ok and t.connection is not None and t.connection.reused
            holds.append(first_token_hold_ms(t, one_way_ms))
    return statistics.median(holds)


async def buffered_hold_ms(lab: Lab, max_tokens: int, one_way_ms: float = 0.0) -> float:
    """Median first-token hold of ``max_tokens``-token streams, the client ACKing at once (no Nagle)."""
    async with _client(lab, quickack=True) as client:
        holds = []
        for i in range(SAMPLES):
            t = await client.request(_spec(100 + i, max_tokens), lab.url)
            assert t.ok
            holds.append(first_token_hold_ms(t, one_way_ms))
    return statistics.median(holds)


async def new_connection_ms(lab: Lab) -> float:
    """Lower quartile of dns + connect + tls of new connections (sessions offered, resumed where the lab allows)."""
    async with _client(lab) as client:
        costs = []
        for i in range(SAMPLES + 2):
            t = await client.request(_spec(200 + i, 1), lab.url, new_connection=True)
            assert t.ok
            costs.append(sum(v for v in (metrics.dns_ms(t), metrics.connect_ms(t), metrics.tls_ms(t)) if v))
    return _lower_quartile(costs[1:])  # the first one is not offered a session: like the diagnosis, skip it


async def full_handshake_ms(lab: Lab) -> float:
    """Lower quartile of the TLS handshakes of new connections that offer the saved session and are refused it (a
    client that tries to resume, as every diagnosis does)."""
    return await handshake_ms(lab, resumed=False)


async def handshake_ms(lab: Lab, *, resumed: bool) -> float:
    """Lower quartile of the TLS handshakes of new connections that offer the saved session, all resumed or all
    refused it as ``resumed`` says (asserted)."""
    async with _client(lab) as client:
        await client.request(_spec(299, 1), lab.url)  # saves a session to offer
        costs = []
        for i in range(2 * SAMPLES):
            t = await client.request(_spec(300 + i, 1), lab.url, new_connection=True)
            assert t.ok and t.connection is not None and t.connection.tls_session_offered
            assert t.connection.tls_session_resumed is resumed
            tls = metrics.tls_ms(t)
            assert tls is not None
            costs.append(tls)
    return _lower_quartile(costs)


async def first_wave_e2e_ms(lab: Lab, connections: int, max_tokens: int) -> float:
    """Median end-to-end time of ``connections`` requests sent at once on as many HTTP/1.1 connections — what a
    request queued behind them waits for a free connection — in the quietest of three bursts."""
    bursts = []
    for burst in range(3):
        async with _client(lab, max_connections_per_origin=connections) as client:
            timelines = await asyncio.gather(
                *(client.request(_spec(400 + 10 * burst + i, max_tokens), lab.url) for i in range(connections))
            )
        e2es = [metrics.e2e_ms(t) for t in timelines]
        bursts.append(statistics.median(v for v in e2es if v is not None))
    return min(bursts)


def parse_ms_per_mb(records: list[RequestRecord]) -> float:
    """Slope of the lab's own parse + validate time against body size (ms per MB), through the fastest request of
    each body size (a busy host only adds time; the lab's cost is the minimum)."""
    fastest: dict[int, float] = {}
    for r in records:
        if r.parse_ms is None or r.endpoint is None:
            continue
        size = round(r.body_bytes / (MB / 10))  # buckets of 0.1 MB: a padded size and its repeats
        ms = r.parse_ms + (r.validate_ms or 0.0)
        fastest[size] = min(fastest.get(size, ms), ms)
    xs = [size / 10 for size in fastest]
    ys = list(fastest.values())
    mean_x = statistics.fmean(xs)
    mean_y = statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx


def image_ms_per_mb(records: list[RequestRecord]) -> float:
    """Slope of the lab's own image time (decoding and preprocessing) against the image's size (ms per MB of image),
    over every request that carried an image."""
    points = [(r.image_bytes / MB, r.preprocess_ms) for r in records if r.image_bytes and r.preprocess_ms is not None]
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx


def queue_inflation_ms(records: list[RequestRecord]) -> float:
    """Server-side TTFT of short requests that arrived while a long one was in flight, minus that of short requests
    that arrived alone (medians)."""
    longs = [r for r in records if (r.prompt_tokens or 0) >= LONG_PROMPT_MIN and r.ttft_ms is not None]
    shorts = [
        r
        for r in records
        if r.prompt_tokens is not None
        and r.prompt_tokens <= SHORT_PROMPT_MAX
        and r.completion_tokens == 1
        and r.ttft_ms is not None
        and r.body_bytes < 10_000
    ]

    def in_flight(r: RequestRecord) -> bool:
        return any(
            long.received_ns <= r.received_ns <= long.received_ns + int((long.ttft_ms or 0.0) * 1e6) for long in longs
        )

    contended = [r.ttft_ms for r in shorts if in_flight(r) and r.ttft_ms is not None]
    alone = [r.ttft_ms for r in shorts if not in_flight(r) and r.ttft_ms is not None]
    assert contended and alone
    return statistics.median(contended) - statistics.median(alone)


async def lone_window_wait_ms(lab: Lab) -> float:
    """Median time the lab's batching window held a lone short request (its records' ``window_wait_ms``), each sent
    with nothing else in flight."""
    async with _client(lab) as client:
        before = len(lab.records)
        for i in range(SAMPLES):
            t = await client.request(_spec(500 + i, 1), lab.url)
            assert t.ok
    waits = [r.window_wait_ms for r in list(lab.records)[before:] if r.window_wait_ms is not None]
    assert len(waits) == SAMPLES
    return statistics.median(waits)


def quadratic_prefill_ms(lab: Lab, records: list[RequestRecord], sent_tokens: int) -> float:
    """What the engine's per-token² prefill term cost the prompt sent as about ``sent_tokens`` tokens: c·n² with the
    lab's own cost model and the lab's own count of the answered prompt nearest that size."""
    counts = [r.prompt_tokens for r in records if r.status == 200 and r.prompt_tokens]
    n = min(counts, key=lambda c: abs(c - sent_tokens))
    return lab.settings.engine_cost.prefill_quadratic_ms * n * n


#: Requests a saturation level sends on each of its connections: one burst opening them, then its measured rounds
#: (latscope.diagnose.experiments.saturation).
SWEEP_REQUESTS_PER_CONNECTION = 1 + SWEEP_ROUNDS
#: Requests of one burst reach the lab within this of each other (ms).
BURST_SPREAD_MS = 20.0


def sweep_queue_ms(records: list[RequestRecord], concurrency: int) -> float:
    """Mean time the lab's scheduler kept the diagnosis's own measured bursts of ``concurrency`` requests waiting for
    a slot (records' ``queue_ms``, the batching window's share excluded), in the quieter burst: the very requests the
    finding timed, found in the lab's records as the ``concurrency`` connections that each carried a level's
    requests, the measured rounds being their 2nd, 3rd… request, sent together."""
    by_connection: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.endpoint is not None:
            by_connection.setdefault(r.connection_id, []).append(r)
    level = [rs for rs in by_connection.values() if len(rs) == SWEEP_REQUESTS_PER_CONNECTION]
    bursts: list[list[RequestRecord]] = []
    for index in range(2, SWEEP_REQUESTS_PER_CONNECTION + 1):
        round_records = sorted(
            (r for rs in level for r in rs if r.index_on_connection == index), key=lambda r: r.received_ns
        )
        cluster: list[RequestRecord] = []
        for r in round_records:
            if cluster and (r.received_ns - cluster[0].received_ns) / 1e6 > BURST_SPREAD_MS:
                bursts.append(cluster)
                cluster = []
            cluster.append(r)
        if cluster:
            bursts.append(cluster)
    measured = [b for b in bursts if len(b) == concurrency]
    assert len(measured) == SWEEP_ROUNDS, [len(b) for b in bursts]
    return min(statistics.fmean((r.queue_ms or 0.0) - (r.window_wait_ms or 0.0) for r in b) for b in measured)


def kv_burst(result: Diagnosis) -> list[Timeline]:
    """A diagnosis's own KV-cache burst (run with ``keep_timelines``): the streams its ``kv-cache-pressure`` finding
    timed."""
    finding = result.finding("kv-cache-pressure")
    assert finding is not None
    burst = [t for t in result.timelines if t.label and t.label.startswith("long stream") and "at once" in t.label]
    assert len(burst) == finding.evidence["concurrency"], [t.label for t in result.timelines]
    return burst


def preempted_hold_ms(records: list[RequestRecord], timelines: list[Timeline]) -> float:
    """The time the lab kept the preempted streams of ``timelines`` from decoding, per preemption it counted (ms),
    by its own send stamps (``truth=True``): each stream the lab's ``records`` say it preempted *k* times held *k*
    times, its *k* longest gaps between tokens beyond its own median gap; summed over the streams, divided by the
    preemptions. No threshold: a victim readmitted at once counts with the short hold it had. Given a diagnosis's
    own burst (``keep_timelines``), the very streams its finding timed, under the very load it ran with (a re-run
    burst stalls for a different time: how long a victim waits depends on when the others finish)."""
    by_id = {r.request_id: r for r in records if r.request_id}
    held = 0.0
    preemptions = 0
    for gaps, record in _preempted_gaps_of(records, timelines, by_id):
        cadence = statistics.median(gaps)
        held += sum(sorted((max(0.0, g - cadence) for g in gaps), reverse=True)[: record.preemptions])
        preemptions += record.preemptions
    assert preemptions, "the lab preempted no stream of these"
    return held / preemptions


def sampling_cost_ms(lab: Lab, stream_tokens: int) -> float:
    """What the lab's host-side sampling adds to a sampled stream of ``stream_tokens`` tokens decoded alone: its
    per-step cost on every decode step after the first token (the prefill step emits that one)."""
    return lab.settings.engine_cost.sampling_ms * (stream_tokens - 1)


def _preempted_gaps_of(
    records: list[RequestRecord], timelines: list[Timeline], by_id: dict[str, RequestRecord]
) -> list[tuple[list[float], RequestRecord]]:
    """Each preempted stream's gaps (ms, by the lab's send stamps) with its record."""
    out = []
    for t in timelines:
        record = by_id.get(t.response_headers.get("x-request-id", ""))
        if record is None or record.preemptions == 0:
            continue
        sent = [e.server_sent_ns for e in t.events if e.kind in TOKEN_KINDS and e.server_sent_ns is not None]
        gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(sent)]
        if gaps:
            out.append((gaps, record))
    return out


def retry_after_ms(records: list[RequestRecord]) -> float:
    """Median wait the lab's rate limiter asked of the requests it refused (records' ``retry_after_ms``: the time
    until its token bucket held a request again, from its own clock)."""
    waits = [r.retry_after_ms for r in records if r.status == 429 and r.retry_after_ms is not None]
    assert waits, "the lab refused nothing"
    return statistics.median(waits)


def gateway_wait_ms(records: list[RequestRecord], request_ids: list[str]) -> float:
    """Mean time the lab's gateway held the requests ``request_ids`` (the burst a finding timed, by the request ids
    the lab gave them) before its scheduler (records' ``gateway_wait_ms``, the limiter's own clock)."""
    waits = [r.gateway_wait_ms or 0.0 for r in records if r.request_id in set(request_ids)]
    assert len(waits) == len(request_ids), (len(waits), len(request_ids))
    return statistics.fmean(waits)


def prefix_recompute_ms(lab: Lab, records: list[RequestRecord], prefix_tokens: int) -> float:
    """What a prefix-cache hit would save a prompt that repeats a ``prefix_tokens``-token prefix, with the lab's own
    cost model: its whole prefill (a + b·n + c·n²) less the prefill of its part after the prefix's full blocks (the
    cache's blocks of :data:`latscope.lab.prefixcache.BLOCK_TOKENS`), for the answered prompt nearest the
    experiment's size (prefix and suffix, by the lab's own count)."""
    cost = lab.settings.engine_cost
    sent = prefix_tokens + PREFIX_SUFFIX_TOKENS
    n = min((r.prompt_tokens for r in records if r.status == 200 and r.prompt_tokens), key=lambda c: abs(c - sent))
    cached = prefix_tokens // BLOCK_TOKENS * BLOCK_TOKENS
    return cost.prefill_ms(n) - (cost.prefill_base_ms + cost.prefill_chunk_ms(cached, n - cached))


def header_scan_ms_per_kb(lab: Lab) -> float:
    """What the lab's ``header-scan`` fault really held a request per KB of its head (ms): the slope of the held
    times it recorded against the heads' sizes (its nominal 0.5 ms per KB comes out higher, as the loop's timers
    round each sleep up)."""
    held = lab.header_scan_held
    assert len({size for size, _ in held}) >= 2, held
    slope, _ = statistics.linear_regression([size / 1024 for size, _ in held], [ms for _, ms in held])
    return slope
