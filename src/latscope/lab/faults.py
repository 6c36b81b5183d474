"""The lab's fault switches: one per catalogued bottleneck, and the profiles that bundle them.

Each :class:`Fault` names the finding id (reference/bottlenecks.md) that ``latscope diagnose`` should report when the
fault is on, and the stage of the lab that injects it, so a test can switch one fault on and check that exactly that
finding comes back.

Profiles:

- ``tuned`` — no faults: keep-alive, TLS session tickets, HTTP/2 over ALPN, orjson with one validation pass,
  shortest-prompt-first scheduling with chunked prefill, prefix caching, TCP_NODELAY and one write per event, no
  buffering.
- ``naive`` — the four hidden bottlenecks, one per layer: connection (``short-keepalive``), parsing
  (``slow-parse``), queue (``queue-hol``) and streaming (``nagle``). ``nagle`` stands for the streaming layer because
  it lives in the server itself; ``proxy-buffering`` is what a reverse proxy in front adds, so it is left to
  ``--fault``. The connection fault is the short idle timeout rather than ``no-keepalive`` because Nagle's coalescing
  shows only on *reused* connections (reference/network-timing.md): with ``Connection: close`` on every response the
  streaming fault would be masked, while a keep-alive that dies between a client's requests is just as common in
  production (idle timeouts of a second or less behind a client that thinks for several) and leaves back-to-back
  requests reusing the connection.

A fault is an object with one hook per stage (:mod:`latscope.lab.stageknobs`): each takes the stage's knobs and
returns them as the fault leaves them, and only the hooks of the stage a fault acts in differ from the identity. The
lab folds the active faults (:class:`FaultSet`, in registry order) over the tuned knobs. A new fault is one
subclass of :class:`Fault` here and its entry in :data:`FAULTS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeVar

from latscope.lab.costmodel import CostModel
from latscope.lab.ratelimit import LimitMode
from latscope.lab.stageknobs import EdgeKnobs, FrontKnobs, GatewayKnobs, SchedulerKnobs, WriterKnobs


class Stage(StrEnum):
    """Where on the lab's request path a fault is injected (DESIGN.md, the lab's stages)."""

    EDGE = "edge"  #: connection handling: keep-alive, TLS, ALPN, socket options, buffering on the way out
    #: body parsing and validation, rate limiting, and a response cache the lab process puts in front of it
    #: (lab/front.py); behind a real nginx edge these stay in the origin lab
    GATEWAY = "gateway"
    SCHEDULER = "scheduler"  #: queueing and batching policy
    ENGINE = "engine"  #: the simulated GPU's costs and capacity


@dataclass(frozen=True, slots=True)
class Fault:
    """One switchable bottleneck, and what it does to the stages of the lab.

    ``name`` is what ``--fault`` takes; ``finding_id`` is the id diagnose should report for it; ``description`` says
    what the lab does differently when it is on. A subclass overrides the hooks of the stage it acts in; the others
    hand the knobs back unchanged.
    """

    name: str
    description: str
    finding_id: str
    stage: Stage

    def edge(self, knobs: EdgeKnobs) -> EdgeKnobs:
        """Connection handling (:mod:`latscope.lab.http`)."""
        return knobs

    def front(self, knobs: FrontKnobs) -> FrontKnobs:
        """What sits in front of the service (:mod:`latscope.lab.front`)."""
        return knobs

    def gateway(self, knobs: GatewayKnobs) -> GatewayKnobs:
        """Parsing, limiting and idempotency (:mod:`latscope.lab.gateway`); a hop in front (:mod:`latscope.lab.hop`)."""
        return knobs

    def scheduler(self, knobs: SchedulerKnobs) -> SchedulerKnobs:
        """Queueing and batching policy (:mod:`latscope.lab.scheduler`)."""
        return knobs

    def engine(self, cost: CostModel) -> CostModel:
        """The simulated GPU's costs and capacity (:mod:`latscope.lab.engine`)."""
        return cost

    def writer(self, knobs: WriterKnobs) -> WriterKnobs:
        """The stream writer (:mod:`latscope.lab.writer`)."""
        return knobs


NO_KEEPALIVE = "no-keepalive"
SHORT_KEEPALIVE = "short-keepalive"
TLS_NO_TICKETS = "tls-no-tickets"
NO_H2 = "no-h2"
SLOW_PARSE = "slow-parse"
SLOW_IMAGE_PREPROCESSING = "slow-image-preprocessing"
QUEUE_HOL = "queue-hol"
NAGLE = "nagle"
PROXY_BUFFERING = "proxy-buffering"
BATCHING_WINDOW = "batching-window"
NAIVE_ATTENTION = "naive-attention"
FEW_SLOTS = "few-slots"
SMALL_KV_CACHE = "small-kv-cache"
SLOW_SAMPLING = "slow-sampling"
DROP_TRACE_CONTEXT = "drop-trace-context"
RESPONSE_CACHE = "response-cache"
SILENT_RESPONSE_CACHE = "silent-response-cache"
HEADER_SCAN = "header-scan"
RATE_LIMIT = "rate-limit"
GATEWAY_QUEUE = "gateway-queue"
NO_IDEMPOTENCY = "no-idempotency"
GATEWAY_OVERHEAD = "gateway-overhead"
NO_PREFIX_CACHE = "no-prefix-cache"

#: The idle keep-alive timeout of the ``short-keepalive`` fault, s: far below any client's pause between requests
#: (people read answers for seconds), yet long enough that requests sent back to back still share the connection.
SHORT_KEEPALIVE_TIMEOUT_S = 0.2

#: What the ``batching-window`` fault sets when the caller does not choose a window itself.
BATCHING_WINDOW_MS = 50.0  # long enough to dominate a small prompt's TTFT, short enough to look like a "tuning" value
BATCHING_TRIGGER = 8  # a typical "wait for a full batch" size

#: What ``naive-attention`` multiplies the cost model's per-token² prefill cost by: the tuned default's attention
#: is 5 % of an 8k-token prefill; forty times it is two thirds (what a kernel that materialises the attention matrix
#: costs next to FlashAttention at that length).
NAIVE_ATTENTION_FACTOR = 40.0
#: The engine's batch under ``few-slots``: llama.cpp's ``--parallel 4``, a small vLLM ``max_num_seqs``.
FEW_SLOTS_MAX_BATCH = 4

#: The KV cache under ``small-kv-cache``, blocks of 16 tokens: 6144 tokens, what an engine left with a sliver of
#: GPU memory after its weights keeps (a 7B model on a 16 GB card at a high ``gpu_memory_utilization``).
SMALL_KV_CACHE_BLOCKS = 384

#: The host's cost per decode step under ``slow-sampling``, ms: a sort and softmax over a 128k-token vocabulary,
#: penalties over the generated tokens and the logprobs, in Python and off the GPU's stream.
SLOW_SAMPLING_MS = 5.0

#: What ``header-scan`` costs per KB of request headers, ms: a WAF's rule set run over every header value, a few
#: MB/s (a 16 KB token and its cookies cost 8 ms, as much as a short prompt's prefill).
HEADER_SCAN_MS_PER_KB = 0.5
#: What ``slow-image-preprocessing`` spends per MB of image, ms: a slow image processor (PIL resize and numpy
#: normalisation in the request's path), 25 MB/s, where a compiled one needs a few ms per MB.
SLOW_IMAGE_MS_PER_MB = 40.0
#: The ``rate-limit`` fault's limit, requests per minute: a diagnosis's first contact and baseline fit in a full
#: bucket, the experiments after them run into the limit; a refused request waits up to 3 s for the next one.
RATE_LIMIT_REQUESTS_PER_MIN = 20
#: The ``gateway-queue`` fault's rate, requests per minute (10 per second: a request each 100 ms, several times a
#: short request's service time, so a client sending faster queues), its burst, and the longest a request queues (s).
GATEWAY_QUEUE_REQUESTS_PER_MIN = 600
GATEWAY_QUEUE_BURST = 3
GATEWAY_QUEUE_MAX_WAIT_S = 2.0
#: What the ``gateway-overhead`` hop spends converting each request, ms: the source article's HTTP→gRPC gateway
#: (24.7 ms through it against 8.2 ms natively), and per streamed chunk of the answer, ms: marshalling one small
#: message into a JSON event, well under a decode step, so the stream is delayed, not slowed.
GATEWAY_HOP_MS = 16.5
GATEWAY_CHUNK_MS = 1.0

#: The buffering threshold of the ``proxy-buffering`` fault: nginx's default ``ssl_buffer_size`` (16 KB), the burst
#: size measured through a real nginx (reference/network-timing.md).
PROXY_BUFFER_BYTES = 16 * 1024


# -- edge -----------------------------------------------------------------------------------------------------------
class NoKeepalive(Fault):
    def edge(self, knobs: EdgeKnobs) -> EdgeKnobs:
        return replace(knobs, keep_alive=False)


class ShortKeepalive(Fault):
    def edge(self, knobs: EdgeKnobs) -> EdgeKnobs:
        return replace(knobs, idle_timeout_s=min(knobs.idle_timeout_s, SHORT_KEEPALIVE_TIMEOUT_S))


class TlsNoTickets(Fault):
    def edge(self, knobs: EdgeKnobs) -> EdgeKnobs:
        return replace(knobs, tls_resumption=False)


class NoHttp2(Fault):
    def edge(self, knobs: EdgeKnobs) -> EdgeKnobs:
        return replace(knobs, http2=False)


class Nagle(Fault):
    def edge(self, knobs: EdgeKnobs) -> EdgeKnobs:
        return replace(knobs, nodelay=False)


class ProxyBuffering(Fault):
    def writer(self, knobs: WriterKnobs) -> WriterKnobs:
        return replace(knobs, buffer_bytes=PROXY_BUFFER_BYTES)


# -- in front of the service ----------------------------------------------------------------------------------------
class DropTraceContext(Fault):
    def front(self, knobs: FrontKnobs) -> FrontKnobs:
        return replace(knobs, drop_trace_context=True)


class ResponseCache(Fault):
    def front(self, knobs: FrontKnobs) -> FrontKnobs:
        return replace(knobs, response_cache="headers")


class SilentResponseCache(Fault):
    def front(self, knobs: FrontKnobs) -> FrontKnobs:
        # a cache that announces itself wins when both are on
        return knobs if knobs.response_cache is not None else replace(knobs, response_cache="silent")


class HeaderScan(Fault):
    def front(self, knobs: FrontKnobs) -> FrontKnobs:
        return replace(knobs, header_scan_ms_per_kb=HEADER_SCAN_MS_PER_KB)


# -- gateway --------------------------------------------------------------------------------------------------------
class SlowParse(Fault):
    def gateway(self, knobs: GatewayKnobs) -> GatewayKnobs:
        return replace(knobs, slow_parse=True)


class SlowImagePreprocessing(Fault):
    def gateway(self, knobs: GatewayKnobs) -> GatewayKnobs:
        return replace(knobs, image_ms_per_mb=SLOW_IMAGE_MS_PER_MB)


class RateLimit(Fault):
    def gateway(self, knobs: GatewayKnobs) -> GatewayKnobs:
        if knobs.limit_mode is LimitMode.QUEUE:  # gateway-queue wins when both are on
            return knobs
        return replace(knobs, limit_mode=LimitMode.REJECT, limit_requests_per_min=RATE_LIMIT_REQUESTS_PER_MIN)


class GatewayQueue(Fault):
    def gateway(self, knobs: GatewayKnobs) -> GatewayKnobs:
        return replace(
            knobs,
            limit_mode=LimitMode.QUEUE,
            limit_requests_per_min=GATEWAY_QUEUE_REQUESTS_PER_MIN,
            limit_burst=GATEWAY_QUEUE_BURST,
            limit_max_wait_s=GATEWAY_QUEUE_MAX_WAIT_S,
        )


class NoIdempotency(Fault):
    def gateway(self, knobs: GatewayKnobs) -> GatewayKnobs:
        return replace(knobs, idempotency=False)


class GatewayOverhead(Fault):
    def gateway(self, knobs: GatewayKnobs) -> GatewayKnobs:
        return replace(knobs, hop=(GATEWAY_HOP_MS, GATEWAY_CHUNK_MS))


# -- scheduler ------------------------------------------------------------------------------------------------------
class QueueHol(Fault):
    def scheduler(self, knobs: SchedulerKnobs) -> SchedulerKnobs:
        return replace(knobs, fifo=True)


class BatchingWindow(Fault):
    def scheduler(self, knobs: SchedulerKnobs) -> SchedulerKnobs:
        return replace(knobs, batch_window_ms=BATCHING_WINDOW_MS, batch_trigger=BATCHING_TRIGGER)


# -- engine ---------------------------------------------------------------------------------------------------------
class NaiveAttention(Fault):
    def engine(self, cost: CostModel) -> CostModel:
        return cost.with_overrides(prefill_quadratic_ms=cost.prefill_quadratic_ms * NAIVE_ATTENTION_FACTOR)


class FewSlots(Fault):
    def engine(self, cost: CostModel) -> CostModel:
        return cost.with_overrides(max_batch=min(cost.max_batch, FEW_SLOTS_MAX_BATCH))


class SmallKvCache(Fault):
    def engine(self, cost: CostModel) -> CostModel:
        return cost.with_overrides(kv_blocks=min(cost.kv_blocks, SMALL_KV_CACHE_BLOCKS))


class NoPrefixCache(Fault):
    def engine(self, cost: CostModel) -> CostModel:
        return cost.with_overrides(prefix_cache_blocks=0)


class SlowSampling(Fault):
    def engine(self, cost: CostModel) -> CostModel:
        return cost.with_overrides(sampling_ms=cost.sampling_ms + SLOW_SAMPLING_MS)


#: Every fault, by name, in request-path order.
FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        NoKeepalive(
            NO_KEEPALIVE,
            "answers every response with 'Connection: close' (HTTP/2: GOAWAY) and closes the connection",
            "no-connection-reuse",
            Stage.EDGE,
        ),
        ShortKeepalive(
            SHORT_KEEPALIVE,
            "closes a connection after 200 ms idle: back-to-back requests reuse it, a client that pauses reconnects",
            "no-connection-reuse",
            Stage.EDGE,
        ),
        TlsNoTickets(
            TLS_NO_TICKETS,
            "TLS without session tickets or a session cache: every handshake is a full one",
            "tls-no-resumption",
            Stage.EDGE,
        ),
        NoHttp2(
            NO_H2,
            "ALPN offers only http/1.1 (no HTTP/2, also no cleartext h2 prior knowledge)",
            "http2-not-negotiated",
            Stage.EDGE,
        ),
        DropTraceContext(
            DROP_TRACE_CONTEXT,
            "the edge strips the incoming W3C traceparent, so the lab starts a new trace (its traceresponse names a "
            "trace id the client never sent)",
            "trace-context-dropped",
            Stage.EDGE,
        ),
        ResponseCache(
            RESPONSE_CACHE,
            "a cache in front keyed on the request body: a repeated request is replayed from storage at once, with "
            "'Age' and 'X-Cache: HIT', and nothing is generated for it",
            "response-cached",
            Stage.GATEWAY,
        ),
        SilentResponseCache(
            SILENT_RESPONSE_CACHE,
            "the same cache without a word about it (no 'Age', no 'X-Cache'): only the replay's speed and its "
            "identical text give it away",
            "response-cached",
            Stage.GATEWAY,
        ),
        HeaderScan(
            HEADER_SCAN,
            "a gateway that scans every request header before handling it (a WAF rule set over each value): "
            "0.5 ms per KB of request headers",
            "request-header-bloat",
            Stage.GATEWAY,
        ),
        SlowParse(
            SLOW_PARSE,
            "stdlib json, a naive validation walk over the whole document and a regex safety filter over every string",
            "slow-request-parsing",
            Stage.GATEWAY,
        ),
        SlowImagePreprocessing(
            SLOW_IMAGE_PREPROCESSING,
            "image parts are preprocessed on the request path at 40 ms per MB of image (a processor that resizes and "
            "normalises in Python): a few MB of image hold the first token for a tenth of a second and more",
            "multimodal-preprocessing",
            Stage.GATEWAY,
        ),
        RateLimit(
            RATE_LIMIT,
            "a token bucket of 20 requests per minute per API key that refuses what does not fit: 429 with "
            "Retry-After, OpenAI's x-ratelimit-* and the IETF RateLimit headers",
            "rate-limited",
            Stage.GATEWAY,
        ),
        GatewayQueue(
            GATEWAY_QUEUE,
            "a token bucket of 10 requests per second (a burst of 3) per API key that holds what does not fit, up to "
            "2 s, before the scheduler: requests beyond the rate wait quietly for their first byte",
            "gateway-queueing",
            Stage.GATEWAY,
        ),
        NoIdempotency(
            NO_IDEMPOTENCY,
            "the gateway ignores 'Idempotency-Key': a retried or duplicated request is generated again, with a new "
            "id and new text, instead of getting the first one's answer",
            "retry-amplification",
            Stage.GATEWAY,
        ),
        GatewayOverhead(
            GATEWAY_OVERHEAD,
            "a protocol-converting gateway in front (the lab proxies to a second lab, its upstream, which serves "
            "directly too): 16.5 ms per request and 1 ms per streamed chunk for the conversion",
            "gateway-overhead",
            Stage.GATEWAY,
        ),
        QueueHol(
            QUEUE_HOL,
            "FIFO scheduling without chunked prefill: short prompts wait behind long prefills",
            "queue-head-of-line",
            Stage.SCHEDULER,
        ),
        Nagle(
            NAGLE,
            "TCP_NODELAY off on the streaming socket: small event writes wait for the client's delayed ACK",
            "stream-coalescing-nagle",
            Stage.EDGE,
        ),
        ProxyBuffering(
            PROXY_BUFFERING,
            "holds the stream body until 16 KB have accumulated or it ends, like a buffering reverse proxy",
            "stream-proxy-buffering",
            Stage.EDGE,
        ),
        BatchingWindow(
            BATCHING_WINDOW,
            "the batcher waits up to 50 ms for 8 requests before it schedules anything",
            "batching-window",
            Stage.SCHEDULER,
        ),
        NaiveAttention(
            NAIVE_ATTENTION,
            "attention without an efficient kernel: the prefill's per-token² cost 40× the tuned one, so long prompts "
            "pay mostly for attention",
            "prefill-superlinear",
            Stage.ENGINE,
        ),
        FewSlots(
            FEW_SLOTS,
            "the engine runs at most 4 sequences at once (a small max_num_seqs / --parallel): further requests wait "
            "for one to finish",
            "capacity-saturation",
            Stage.ENGINE,
        ),
        NoPrefixCache(
            NO_PREFIX_CACHE,
            "no prefix caching: a prompt that starts with a prefix the engine computed moments ago (a system prompt, "
            "the conversation so far) is prefilled whole again",
            "prefix-cache-miss",
            Stage.ENGINE,
        ),
        SmallKvCache(
            SMALL_KV_CACHE,
            "a KV cache of 6144 tokens (384 blocks): a few long streams fill it, and decoding sequences are preempted "
            "and recomputed mid-stream",
            "kv-cache-pressure",
            Stage.ENGINE,
        ),
        SlowSampling(
            SLOW_SAMPLING,
            "sampling on the host: every decode step whose batch holds a request with top-p, top-k, penalties or "
            "logprobs costs 5 ms more (greedy requests alone keep the fast path)",
            "decode-host-overhead",
            Stage.ENGINE,
        ),
    )
}

#: Profile name → the faults it switches on.
PROFILES: dict[str, frozenset[str]] = {
    "tuned": frozenset(),
    "naive": frozenset({SHORT_KEEPALIVE, SLOW_PARSE, QUEUE_HOL, NAGLE}),
}


_Knobs = TypeVar("_Knobs")


@dataclass(frozen=True, slots=True)
class FaultSet:
    """The active faults composed: each hook folds the faults' hooks of its stage, in registry order, over the
    knobs it is given (the tuned ones)."""

    faults: tuple[Fault, ...]

    @classmethod
    def of(cls, names: Iterable[str]) -> FaultSet:
        """The faults named (known names only: see :func:`resolve_faults`), in registry order."""
        wanted = frozenset(names)
        return cls(tuple(fault for name, fault in FAULTS.items() if name in wanted))

    def _fold(self, hook: Callable[[Fault, _Knobs], _Knobs], knobs: _Knobs) -> _Knobs:
        """``knobs`` through ``hook`` of every fault, in registry order."""
        for fault in self.faults:
            knobs = hook(fault, knobs)
        return knobs

    def edge(self, knobs: EdgeKnobs) -> EdgeKnobs:
        return self._fold(lambda fault, value: fault.edge(value), knobs)

    def front(self, knobs: FrontKnobs) -> FrontKnobs:
        return self._fold(lambda fault, value: fault.front(value), knobs)

    def gateway(self, knobs: GatewayKnobs) -> GatewayKnobs:
        return self._fold(lambda fault, value: fault.gateway(value), knobs)

    def scheduler(self, knobs: SchedulerKnobs) -> SchedulerKnobs:
        return self._fold(lambda fault, value: fault.scheduler(value), knobs)

    def engine(self, cost: CostModel) -> CostModel:
        return self._fold(lambda fault, value: fault.engine(value), cost)

    def writer(self, knobs: WriterKnobs) -> WriterKnobs:
        return self._fold(lambda fault, value: fault.writer(value), knobs)


class UnknownFaultError(ValueError):
    """A fault or profile name that the lab does not know; the message lists the known ones."""


def resolve_faults(profile: str, faults: Iterable[str] = (), no_faults: Iterable[str] = ()) -> frozenset[str]:
    """The faults that are on: the profile's, plus ``faults``, minus ``no_faults`` (removal wins).

    Raises :class:`UnknownFaultError` for a name that is neither a profile nor a fault.
    """
    if profile not in PROFILES:
        raise UnknownFaultError(f"unknown profile {profile!r}; known profiles: {', '.join(PROFILES)}")
    added = frozenset(faults)
    removed = frozenset(no_faults)
    unknown = sorted((added | removed) - FAULTS.keys())
    if unknown:
        raise UnknownFaultError(f"unknown fault {', '.join(unknown)}; known faults: {', '.join(FAULTS)}")
    return (PROFILES[profile] | added) - removed
