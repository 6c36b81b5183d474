"""The lab's Prometheus metrics, under its own names or under vLLM's.

Each :class:`LabMetrics` owns a private ``CollectorRegistry``, so several labs can run in one process. Two naming
schemes, chosen at construction:

======================================  ========================================  ======================================
meaning                                 ``names="lab"``                           ``names="vllm"``, label ``model_name``
======================================  ========================================  ======================================
queue: first scheduled − queued (s)     latscope_lab_request_queue_seconds        vllm:request_queue_time_seconds
prefill: first token − first scheduled  latscope_lab_request_prefill_seconds      vllm:request_prefill_time_seconds
decode: last token − first token (s)    latscope_lab_request_decode_seconds       vllm:request_decode_time_seconds
TTFT: first token − arrival (s)         latscope_lab_time_to_first_token_seconds  vllm:time_to_first_token_seconds
e2e: finish − arrival (s)               latscope_lab_e2e_request_latency_seconds  vllm:e2e_request_latency_seconds
request parsing in the gateway (s)      latscope_lab_request_parse_seconds        (none: vLLM has no such metric)
sequences running (gauge)               latscope_lab_requests_running             vllm:num_requests_running
requests waiting (gauge)                latscope_lab_requests_waiting             vllm:num_requests_waiting
KV-cache usage 0–1 (gauge)              latscope_lab_kv_cache_usage_ratio         vllm:kv_cache_usage_perc
tokens per engine step (histogram)      latscope_lab_iteration_tokens             vllm:iteration_tokens_total
preemptions (counter)                   latscope_lab_preemptions_total            vllm:num_preemptions_total
prompt tokens (counter)                 latscope_lab_prompt_tokens_total          vllm:prompt_tokens_total
generated tokens (counter)              latscope_lab_generation_tokens_total      vllm:generation_tokens_total
finished requests (counter)             latscope_lab_requests_total{..reason}     vllm:request_success_total{..reason}
======================================  ========================================  ======================================

prometheus-client appends ``_total`` to every counter's exposed name (and strips it from the name it is given), which
is also how vLLM's counters appear on the wire; names with ``:`` are valid Prometheus names and are exposed as is.
Arrival is the gateway's receipt of the request, as vLLM measures TTFT and e2e from its API front end.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

NamingScheme = Literal["lab", "vllm"]

# fmt: off
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 5.0,
    7.5, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 120.0, 240.0, 480.0,
)
# fmt: on
"""Latency buckets, s: 1 ms to 8 min, dense where TTFT and queueing live (10 ms – 2 s); vLLM's own TTFT buckets
span the same range."""

# fmt: off
PARSE_BUCKETS_S: tuple[float, ...] = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)
# fmt: on
"""Request-parsing buckets, s: 50 µs (a small body through a fast parser) to 5 s (megabytes through a slow one)."""

ITERATION_TOKEN_BUCKETS: tuple[float, ...] = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
"""Tokens per engine step; vLLM's buckets, extended to the longest unchunked prefill the lab runs."""

FinishedReason = Literal["length", "stop", "abort", "error"]


class _EngineStepMetrics:
    """The metrics updated on every engine step, kept as plain numbers and turned into samples at scrape time.

    A prometheus-client metric takes a lock and walks its buckets on every update; at tens of thousands of steps
    per second (the zero-cost lab) that alone would cap throughput. Here an update is an addition.
    """

    def __init__(self, names: _Names, label_names: tuple[str, ...], label_values: tuple[str, ...]) -> None:
        self.names = names
        self.label_names = label_names
        self.label_values = label_values
        self.bounds: list[float] = list(ITERATION_TOKEN_BUCKETS)
        self.bucket_counts = [0] * (len(self.bounds) + 1)  # last: above every bound (+Inf only)
        self.tokens_sum = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.created = time.time()

    def observe_iteration(self, tokens: int) -> None:
        # bisect_left: the first bound >= tokens is the bucket whose "le" includes it.
        self.bucket_counts[bisect.bisect_left(self.bounds, tokens)] += 1
        self.tokens_sum += tokens

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names are unique by construction; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        labels = dict(zip(self.label_names, self.label_values, strict=True))
        histogram = HistogramMetricFamily(self.names.iteration, self.names.iteration_doc, labels=self.label_names)
        cumulative = list(itertools.accumulate(self.bucket_counts))
        buckets = [(str(float(b)), float(c)) for b, c in zip(self.bounds, cumulative, strict=False)]
        buckets.append(("+Inf", float(cumulative[-1])))
        histogram.add_metric(self.label_values, buckets, float(self.tokens_sum))
        histogram.samples.append(Sample(self.names.iteration + "_created", labels, self.created, None, None))
        yield histogram
        for name, doc, value in (
            (self.names.preemptions, "Sequences preempted for lack of KV cache.", self.preemptions),
            (
                self.names.prompt_tokens,
                "Prompt tokens prefilled (first time only; recomputation not counted).",
                self.prompt_tokens,
            ),
            (self.names.generation_tokens, "Tokens generated.", self.generation_tokens),
        ):
            counter = CounterMetricFamily(name, doc, labels=self.label_names)
            counter.add_metric(self.label_values, float(value), created=self.created)
            yield counter


@dataclass(frozen=True)
class _Names:
    iteration: str
    iteration_doc: str
    preemptions: str
    prompt_tokens: str
    generation_tokens: str


class LabMetrics:
    """The lab's metrics; the scheduler updates them, the HTTP layer serves :meth:`render` at ``GET /metrics``."""

    def __init__(self, names: NamingScheme = "lab", model_name: str = "lab-model") -> None:
        if names not in ("lab", "vllm"):
            raise ValueError(f"unknown metric naming scheme {names!r}: expected 'lab' or 'vllm'")
        self.names: NamingScheme = names
        self.model_name = model_name
        self.registry = CollectorRegistry(auto_describe=True)
        vllm = names == "vllm"
        labels: tuple[str, ...] = ("model_name",) if vllm else ()
        values: tuple[str, ...] = (model_name,) if vllm else ()
        self._label_values = values
        r = self.registry

        def name(lab: str, vllm_name: str) -> str:
            return vllm_name if vllm else lab

        def hist(lab: str, vllm_name: str, doc: str) -> Histogram:
            metric = Histogram(name(lab, vllm_name), doc, labels, buckets=LATENCY_BUCKETS_S, registry=r)
            return metric.labels(*values) if vllm else metric  # bound once: no label lookup per observation

        self._queue = hist(
            "latscope_lab_request_queue_seconds",
            "vllm:request_queue_time_seconds",
            "Time in the scheduler queue: first scheduled - queued, seconds.",
        )
        self._prefill = hist(
            "latscope_lab_request_prefill_seconds",
            "vllm:request_prefill_time_seconds",
            "Prefill phase: first token - first scheduled (includes preemption), seconds.",
        )
        self._decode = hist(
            "latscope_lab_request_decode_seconds",
            "vllm:request_decode_time_seconds",
            "Decode phase: last token - first token, seconds.",
        )
        self._ttft = hist(
            "latscope_lab_time_to_first_token_seconds",
            "vllm:time_to_first_token_seconds",
            "Time to first token from arrival at the front end, seconds.",
        )
        self._e2e = hist(
            "latscope_lab_e2e_request_latency_seconds",
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency from arrival at the front end, seconds.",
        )
        self._parse: Histogram | None = None
        if not vllm:
            self._parse = Histogram(
                "latscope_lab_request_parse_seconds",
                "Request body parsing and validation in the gateway, seconds.",
                buckets=PARSE_BUCKETS_S,
                registry=r,
            )

        def gauge(lab: str, vllm_name: str, doc: str) -> Gauge:
            metric = Gauge(name(lab, vllm_name), doc, labels, registry=r)
            return metric.labels(*values) if vllm else metric

        self._running = gauge(
            "latscope_lab_requests_running", "vllm:num_requests_running", "Sequences running (prefilling or decoding)."
        )
        self._waiting = gauge(
            "latscope_lab_requests_waiting",
            "vllm:num_requests_waiting",
            "Requests waiting to be scheduled (including those held by the batching window).",
        )
        self._kv = gauge("latscope_lab_kv_cache_usage_ratio", "vllm:kv_cache_usage_perc", "KV-cache usage, 1 = full.")

        self._steps = _EngineStepMetrics(
            _Names(
                iteration=name("latscope_lab_iteration_tokens", "vllm:iteration_tokens_total"),
                iteration_doc="Tokens (prompt + generated) processed per engine step.",
                preemptions=name("latscope_lab_preemptions_total", "vllm:num_preemptions"),
                prompt_tokens=name("latscope_lab_prompt_tokens_total", "vllm:prompt_tokens"),
                generation_tokens=name("latscope_lab_generation_tokens_total", "vllm:generation_tokens"),
            ),
            labels,
            values,
        )
        r.register(self._steps)
        self._requests = Counter(
            name("latscope_lab_requests_total", "vllm:request_success"),
            "Finished requests by finish reason.",
            (*labels, "finished_reason"),
            registry=r,
        )

    # -- engine state (gauges) -------------------------------------------------------------------------------------

    def set_state(self, running: int, waiting: int, kv_usage: float) -> None:
        """Current sequences running, requests waiting and KV-cache usage (0–1)."""
        self._running.set(running)
        self._waiting.set(waiting)
        self._kv.set(kv_usage)

    # -- engine events ---------------------------------------------------------------------------------------------

    def observe_iteration(self, tokens: int) -> None:
        """One engine step processed ``tokens`` tokens (prompt chunk tokens + one per decoding sequence)."""
        self._steps.observe_iteration(tokens)

    def add_preemptions(self, count: int = 1) -> None:
        """``count`` sequences were preempted."""
        self._steps.preemptions += count

    def add_prompt_tokens(self, tokens: int) -> None:
        """``tokens`` prompt tokens were prefilled for the first time."""
        self._steps.prompt_tokens += tokens

    def add_generation_tokens(self, tokens: int) -> None:
        """``tokens`` tokens were generated."""
        self._steps.generation_tokens += tokens

    def observe_request(
        self,
        *,
        finished_reason: FinishedReason,
        queue_s: float | None = None,
        prefill_s: float | None = None,
        decode_s: float | None = None,
        ttft_s: float | None = None,
        e2e_s: float | None = None,
    ) -> None:
        """A request finished. Its phase durations (seconds) are observed when known; the finished-request counter
        counts it under ``finished_reason``."""
        if queue_s is not None:
            self._queue.observe(queue_s)
        if prefill_s is not None:
            self._prefill.observe(prefill_s)
        if decode_s is not None:
            self._decode.observe(decode_s)
        if ttft_s is not None:
            self._ttft.observe(ttft_s)
        if e2e_s is not None:
            self._e2e.observe(e2e_s)
        self._requests.labels(*self._label_values, finished_reason).inc()

    # -- gateway events --------------------------------------------------------------------------------------------

    def observe_parse(self, seconds: float) -> None:
        """The gateway spent ``seconds`` parsing and validating one request body. Not exposed under the vLLM
        scheme, which shows only what vLLM itself exposes."""
        if self._parse is not None:
            self._parse.observe(seconds)

    # -- exposition ------------------------------------------------------------------------------------------------

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition (format 0.0.4) and its ``Content-Type``, for ``GET /metrics``."""
        return generate_latest(self.registry), CONTENT_TYPE_PLAIN_0_0_4
