"""Join one request's client timeline with what the server reported about it.

:func:`apply_server_signals` reads every per-request signal (Server-Timing in headers and trailers, TGI / OpenAI /
Envoy timing headers, llama.cpp ``timings``, Ollama durations, SGLang ``meta_info``, vLLM's per-request ``metrics``,
the lab's ``latscope`` object)
into ``Timeline.server`` as :class:`~latscope.timeline.model.ServerMeasure` entries with normalised names:

==============  ==========================================================================================
``parse``       reading the request body (lab)
``validate``    validation and tokenising (TGI, lab)
``queue``       waiting for a batch slot (TGI, vLLM ``queue_time_ms``, lab, Server-Timing ``queue``)
``window_wait`` waiting for the batching window to close (lab)
``load``        Ollama's scheduler wait + model load
``prefill``     prompt processing (llama.cpp ``prompt_ms``, Ollama ``prompt_eval_duration``, vLLM's
                ``time_to_first_token_ms``, which starts at scheduling, lab)
``decode``      generation after the first token
``e2e``         the whole request inside the server
``processing``  ``openai-processing-ms``
``upstream``    ``x-envoy-upstream-service-time``
==============  ==========================================================================================

Other names are the server's own (Server-Timing metrics, TGI's ``inference`` and ``time_per_token``). Each measure's
``source`` says where it came from (``header:server-timing:queue``, ``trailer:server-timing:prefill``,
``header:x-queue-time``, ``body:timings.prompt_ms`` …). :func:`ttft_split` then explains the client's TTFT with
them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from latscope.signals.body import (
    OLLAMA_COUNT_FIELDS,
    OLLAMA_DURATION_FIELDS,
    body_measures,
    is_ollama_final,
    is_vllm_metrics,
    lab_measures,
    llamacpp_measures,
    looks_like_lab_object,
    parse_llamacpp_timings,
)
from latscope.signals.headers import HeaderInput, header_pairs, upstream_names
from latscope.signals.requestid import request_id
from latscope.signals.servertiming import ServerTimingMetric, parse_server_timing_value
from latscope.signals.timingheaders import timing_header_measures
from latscope.timeline.model import (
    PHASES_BEFORE_FIRST_TOKEN,
    VLLM_METRICS_FIELD,
    ServerMeasure,
    ServerPhase,
    Timeline,
)
from latscope.units import NS_PER_MS

# Server-Timing metric names (lower-cased) that mean one of the normalised phases; others keep their own name.
SERVER_TIMING_ALIASES: dict[str, ServerPhase] = {
    **{phase.value: phase for phase in ServerPhase},
    "validation": ServerPhase.VALIDATE,
    "total": ServerPhase.E2E,
}


#: Where a header section's Server-Timing metrics are read from, in order of preference (:func:`_server_timing`).
_SERVER_TIMING_NAMES = ("server-timing", *upstream_names("server-timing"))


def _server_timing(pairs: list[tuple[str, str]], warnings: list[str] | None) -> list[ServerTimingMetric]:
    """The Server-Timing metrics of a header section (``pairs`` as :func:`header_pairs` gives them): the server's
    own, else its upstream's as a gateway passed them on renamed (``llm_provider-server-timing``: a gateway that
    reports nothing itself forwards the model server's report, which then still says what the engine spent; what
    the gateway spent is in none of it)."""
    metrics: list[ServerTimingMetric] = []
    for name in _SERVER_TIMING_NAMES:
        for key, value in pairs:
            if key == name:
                metrics += parse_server_timing_value(value, warnings=warnings)
        if metrics:
            break
    return metrics


def _server_timing_measures(section: str, metrics: list[ServerTimingMetric]) -> list[ServerMeasure]:
    return [
        ServerMeasure(
            SERVER_TIMING_ALIASES.get(metric.name.lower(), metric.name),
            metric.dur_ms,
            f"{section}:server-timing:{metric.name}",
        )
        for metric in metrics
        if metric.dur_ms is not None
    ]


def server_measures(
    *,
    headers: HeaderInput = (),
    trailers: HeaderInput = (),
    timings: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    body: Mapping[str, Any] | None = None,
    warnings: list[str] | None = None,
) -> list[ServerMeasure]:
    """Every server measure in the given signals, headers first, then trailers, then body fields.

    ``timings`` is a llama.cpp ``timings`` object (``Chunk.timings``); ``extra`` a dialect's ``Chunk.extra`` of the
    final chunk (the lab's ``latscope`` object, itself or under a ``latscope`` key, or Ollama's durations); ``body``
    a whole JSON object (a non-streaming response, or the final chunk), searched for every known shape. A measure
    found twice with the same name and source is kept once.
    """
    header_list = header_pairs(headers)  # read more than once below, so an iterator must not be consumed
    header_timing = _server_timing(header_list, warnings)
    trailer_timing = _server_timing(header_pairs(trailers), warnings)
    return _measures(header_list, header_timing, trailer_timing, timings, extra, body, warnings)


def _measures(
    headers: list[tuple[str, str]],
    header_timing: list[ServerTimingMetric],
    trailer_timing: list[ServerTimingMetric],
    timings: Mapping[str, Any] | None,
    extra: Mapping[str, Any] | None,
    body: Mapping[str, Any] | None,
    warnings: list[str] | None,
) -> list[ServerMeasure]:
    """:func:`server_measures` with the Server-Timing metrics of both sections already parsed."""
    measures = _server_timing_measures("header", header_timing)
    measures += timing_header_measures(headers, warnings=warnings)
    measures += _server_timing_measures("trailer", trailer_timing)
    if timings is not None:
        measures += llamacpp_measures(parse_llamacpp_timings(timings, warnings=warnings))
    if extra is not None:
        measures += body_measures(extra, warnings=warnings)
        if "latscope" not in extra and looks_like_lab_object(extra):
            measures += lab_measures(extra, warnings=warnings)
    if body is not None:
        measures += body_measures(body, warnings=warnings)
    unique: list[ServerMeasure] = []
    seen: set[tuple[str, str]] = set()
    for measure in measures:
        if (measure.name, measure.source) not in seen:
            seen.add((measure.name, measure.source))
            unique.append(measure)
    return unique


def apply_server_signals(
    timeline: Timeline,
    *,
    headers: HeaderInput | None = None,
    trailers: HeaderInput = (),
    timings: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    body: Mapping[str, Any] | None = None,
) -> None:
    """Fill ``timeline.server`` (and ``server_fields``, ``warnings``) from the response's server signals.

    ``headers`` defaults to ``timeline.response_headers``. See :func:`server_measures` for the other arguments.
    Measures already on the timeline are kept; ones with the same name and source are not added twice. Raw objects
    are kept in ``server_fields``: ``server_timing`` (every metric, with or without ``dur``), ``timings``,
    ``latscope``, ``ollama``, ``meta_info``, ``vllm_metrics`` (vLLM's per-request ``metrics``) and ``request_id``
    (``{"header": …, "value": …}``).
    """
    warnings: list[str] = []
    header_list = header_pairs(timeline.response_headers if headers is None else headers)
    trailer_list = header_pairs(trailers)
    header_timing = _server_timing(header_list, warnings)
    trailer_timing = _server_timing(trailer_list, warnings)
    found = _measures(header_list, header_timing, trailer_timing, timings, extra, body, warnings)
    existing = {(measure.name, measure.source) for measure in timeline.server}
    timeline.server.extend(m for m in found if (m.name, m.source) not in existing)
    _keep_raw_fields(timeline, header_list, [*header_timing, *trailer_timing], timings, extra, body)
    timeline.warnings.extend(f"server signals: {w}" for w in warnings)


def _keep_raw_fields(
    timeline: Timeline,
    headers: HeaderInput,
    metrics: list[ServerTimingMetric],
    timings: Mapping[str, Any] | None,
    extra: Mapping[str, Any] | None,
    body: Mapping[str, Any] | None,
) -> None:
    fields = timeline.server_fields
    if metrics:
        fields["server_timing"] = [{"name": m.name, "dur_ms": m.dur_ms, "desc": m.desc} for m in metrics]
    rid = request_id(headers)
    if rid is not None:
        fields["request_id"] = {"header": rid.header, "value": rid.value}
    for source in (body, extra):
        if source is None:
            continue
        for key in ("timings", "latscope", "meta_info"):
            if isinstance(source.get(key), Mapping):
                fields[key] = dict(source[key])
        if is_vllm_metrics(source.get("metrics")):
            fields[VLLM_METRICS_FIELD] = dict(source["metrics"])
        if is_ollama_final(source):
            fields["ollama"] = {k: v for k, v in source.items() if k.endswith(("_duration", "_count"))}
    if extra is not None and "latscope" not in extra and looks_like_lab_object(extra):
        fields["latscope"] = dict(extra)
    if timings is not None:
        fields["timings"] = dict(timings)


#: The fields of Ollama's final message that a stream decoder keeps on the timeline (``server_fields``).
OLLAMA_FIELDS = frozenset(OLLAMA_DURATION_FIELDS + OLLAMA_COUNT_FIELDS)


def join_server_signals(timeline: Timeline) -> None:
    """Read what the server reported about this request onto ``timeline.server``: the response headers and trailers
    (Server-Timing, TGI / OpenAI / Envoy timing headers, request id) and the final chunk's fields the client kept in
    ``timeline.server_fields`` (llama.cpp ``timings``, the lab's ``latscope`` object, Ollama's durations, vLLM's
    per-request ``metrics``); see
    :func:`apply_server_signals`. The one join that ``probe``, ``diagnose`` and ``bench`` use. Safe to call again:
    a measure is never added twice. Malformed signals never cost the measurement: they become a warning."""
    fields = timeline.server_fields
    timings = fields.get("timings")
    extra = {key: value for key, value in fields.items() if key in OLLAMA_FIELDS}
    lab = fields.get("latscope")
    if isinstance(lab, Mapping):
        extra["latscope"] = lab
    vllm = fields.get(VLLM_METRICS_FIELD)
    if is_vllm_metrics(vllm):
        extra["metrics"] = vllm
    try:
        apply_server_signals(
            timeline,
            trailers=timeline.response_trailers,
            timings=timings if isinstance(timings, Mapping) else None,
            extra=extra or None,
        )
    except Exception as exc:  # a server's malformed signals must not cost the measurement
        timeline.warnings.append(f"server signals could not be read: {exc!r}")


TtftSide = Literal["client", "server", "unattributed"]
"""Who accounts for a TTFT term: the client's own marks (connection setup, sending), a phase the server reported,
or neither (the network round trip and whatever nobody reported)."""


@dataclass(frozen=True, slots=True)
class TtftPart:
    """One term of the TTFT split. ``ns`` is exact (all parts add up to ``TtftSplit.ttft_ns``)."""

    name: str
    ns: int
    source: str  #: the marks, measure source or estimate it came from

    @property
    def ms(self) -> float:
        """The term in milliseconds."""
        return self.ns / NS_PER_MS


@dataclass(frozen=True, slots=True)
class TtftSplit:
    """The client's TTFT (first token − started) explained term by term, in request order.

    Terms, each present only when its signal exists:

    ===================  =======================================================================================
    ``connection``       started → connection ready: pool wait + DNS + TCP connect + TLS (client marks)
    ``send``             connection ready → request written (client marks)
    ``connection_send``  started → request written, when the connection-ready mark is missing
    ``parse`` …          server-reported phases before the first token, in order: ``parse``, ``validate``,
    ``prefill``          ``window_wait``, ``queue``, ``load``, ``slot_wait_templating``, ``prefill`` (their
                         sources are the measures', e.g. ``header:server-timing:queue``). When both are
                         reported, ``queue`` is the queue time minus ``window_wait``, which it includes.
    ``network``          one round trip from the connection's TCP_INFO (``min_rtt`` when the kernel reports it,
                         else ``rtt``): the request's tail travelling out and the first token travelling back.
                         Capped at what is left, never below 0. Present only with TCP_INFO.
    ``other``            the remainder when ``network`` is present: gateway / API-server work nobody reported
                         (HTTP handling, tokenising, inter-process hops), the role chunk before the first token…
    ``network_and_other``  the remainder when no RTT is known: network + all of the above
    ===================  =======================================================================================

    The remainder is ``ttft − every other term`` in integer nanoseconds, so the parts add up to the TTFT exactly.
    It is negative when the server reports more time than the client saw between sending and the first token
    (overlapping phases, or a server clock that disagrees): ``consistent`` is False then.
    """

    ttft_ns: int
    parts: tuple[TtftPart, ...]

    @property
    def ttft_ms(self) -> float:
        """The client's TTFT in milliseconds."""
        return self.ttft_ns / NS_PER_MS

    def ms(self, name: str) -> float | None:
        """The term called ``name`` in ms, or None when the split has no such term."""
        for part in self.parts:
            if part.name == name:
                return part.ms
        return None

    @property
    def consistent(self) -> bool:
        """False when the remainder is negative (the server reports more than the client's window)."""
        return all(part.ns >= 0 for part in self.parts)


def _server_measure(timeline: Timeline, name: str) -> ServerMeasure | None:
    for measure in timeline.server:
        if measure.name == name:
            return measure
    return None


def ttft_split(timeline: Timeline) -> TtftSplit | None:
    """Split the client's TTFT into connection, send, server phases, network and the remainder (see
    :class:`TtftSplit`). None when the timeline has no first token."""
    if timeline.first_token_ns is None:
        return None
    ttft_ns = timeline.first_token_ns - timeline.started_ns
    parts: list[TtftPart] = []
    marks = [
        ("started", timeline.started_ns),
        ("connection_ready", timeline.connection_ready_ns),
        ("send_end", timeline.send_end_ns),
    ]
    present = [(name, at) for name, at in marks if at is not None and at <= timeline.first_token_ns]
    for (start_name, start), (end_name, end) in itertools.pairwise(present):
        term = {
            ("started", "connection_ready"): "connection",
            ("connection_ready", "send_end"): "send",
            ("started", "send_end"): "connection_send",
        }[(start_name, end_name)]
        parts.append(TtftPart(term, end - start, f"client:{start_name}→{end_name}"))
    # ``window_wait`` is part of ``queue`` (the lab's queue time includes the batching window: lab/engine.py), so
    # the split subtracts it
    window_wait = _server_measure(timeline, ServerPhase.WINDOW_WAIT)
    for phase in PHASES_BEFORE_FIRST_TOKEN:
        measure = _server_measure(timeline, phase)
        if measure is None:
            continue
        if phase is ServerPhase.QUEUE and window_wait is not None:
            queue_ns = round(measure.ms * NS_PER_MS) - round(window_wait.ms * NS_PER_MS)
            parts.append(TtftPart(phase, queue_ns, f"{measure.source} − {window_wait.source}"))
        else:
            parts.append(TtftPart(phase, round(measure.ms * NS_PER_MS), measure.source))
    remainder = ttft_ns - sum(part.ns for part in parts)
    rtt = _round_trip_ns(timeline)
    if rtt is not None:
        network = min(rtt[0], max(remainder, 0))
        parts.append(TtftPart("network", network, rtt[1]))
        parts.append(TtftPart("other", remainder - network, "remainder"))
    else:
        parts.append(TtftPart("network_and_other", remainder, "remainder"))
    return TtftSplit(ttft_ns, tuple(parts))


def _round_trip_ns(timeline: Timeline) -> tuple[int, str] | None:
    info = None if timeline.connection is None else timeline.connection.tcp_info_at_headers
    if info is None:
        return None
    if info.min_rtt_us is not None and info.min_rtt_us > 0:
        return info.min_rtt_us * 1000, "tcp_info:min_rtt_us"
    if info.rtt_us > 0:
        return info.rtt_us * 1000, "tcp_info:rtt_us"
    return None
