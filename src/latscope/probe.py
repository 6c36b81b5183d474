"""``latscope probe``, the Python API: a few streamed requests to one endpoint, each recorded as a full timeline.

The requests go one after another on one client, so the first shows the cold path (DNS, TCP, TLS) and the others
show what reuse saves. The model list is fetched with a separate client, so it does not warm the first request's
connection or TLS session; so are the server's Prometheus metrics, scraped before the first request and after the
last (:mod:`latscope.signals.scrape`).

After each request, what the server reported about it (Server-Timing, timing headers, llama.cpp ``timings`` and the
lab's ``latscope`` object from the final chunk) is joined onto its timeline
(:func:`~latscope.signals.join.join_server_signals`), and
:meth:`ProbeResult.ttft_splits` explains each TTFT as client-side, server-side and unattributed terms.

``import latscope; await latscope.probe(url)`` works too: this module is callable (see the end of the file).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from latscope import callable_module
from latscope.dialects import get_dialect
from latscope.dialects.base import RequestSpec
from latscope.signals.altsvc import h3_advertised
from latscope.signals.join import TtftSide, TtftSplit, join_server_signals, ttft_split
from latscope.signals.scrape import MetricsScraper, MetricsWindow, NotAvailable, metrics_url_for
from latscope.signals.serverspans import join_server_spans
from latscope.timeline import metrics
from latscope.timeline.model import Phase, Timeline
from latscope.timeline.serialize import timeline_to_dict
from latscope.units import NS_PER_MS
from latscope.wire import Client, ModelListError, Timeouts, WireError
from latscope.wire.models import OriginStats
from latscope.wire.pool import BROWSER_CONNECTIONS_PER_HOST
from latscope.wire.spanreceiver import SPAN_WAIT_S, SpanReceiver
from latscope.wire.target import Target

SCHEMA = "latscope.probe/1"

#: the prompt when neither ``prompt`` nor ``prompt_tokens`` is given: short, and it makes any model produce a steady
#: run of tokens, so the cadence numbers mean something
DEFAULT_PROMPT = "Count from one to one hundred in words, separated by spaces."

#: a failure in these phases means the target cannot be reached at all: the remaining requests are not sent
UNREACHABLE_PHASES = frozenset({Phase.DNS, Phase.CONNECT, Phase.TLS})

#: limits for the metrics scrapes, s: ``/metrics`` is a small local render, so a server that has not answered in a
#: few seconds will not, and a black-holed metrics URL must not hold the probe for the request timeouts (minutes)
METRICS_TIMEOUTS = Timeouts(connect_s=5.0, tls_s=5.0, send_s=5.0, headers_s=10.0, read_s=10.0, total_s=15.0)

#: TTFT terms measured by the client's marks (signals.join.TtftSplit)
CLIENT_TTFT_TERMS = frozenset({"connection", "send", "connection_send"})
#: TTFT terms neither side reports: the round trip from TCP_INFO and the remainder
UNATTRIBUTED_TTFT_TERMS = frozenset({"network", "other", "network_and_other"})


def ttft_side(term: str) -> TtftSide:
    """The side a :class:`~latscope.signals.join.TtftSplit` term belongs to (server phases are every other name:
    ``parse``, ``validate``, ``window_wait``, ``queue``, ``load``, ``slot_wait_templating``, ``prefill`` …)."""
    if term in CLIENT_TTFT_TERMS:
        return "client"
    if term in UNATTRIBUTED_TTFT_TERMS:
        return "unattributed"
    return "server"


@dataclass(frozen=True, slots=True)
class TtftSides:
    """A TTFT split summed per side, in integer ns: ``client_ns + server_ns + unattributed_ns == ttft_ns`` exactly.

    ``client_ns``: started → request written (pool wait, DNS, TCP, TLS, send), from the client's marks.
    ``server_ns``: the phases the server reported before the first token (parse … prefill).
    ``unattributed_ns``: the rest: one network round trip, and time nobody reported (HTTP handling, tokenising,
    the role chunk before the first token); negative when the server reports more than the client saw.
    """

    ttft_ns: int
    client_ns: int
    server_ns: int
    unattributed_ns: int

    @classmethod
    def of(cls, split: TtftSplit) -> TtftSides:
        """Sum the terms of ``split`` per :func:`ttft_side`."""
        sums = {"client": 0, "server": 0, "unattributed": 0}
        for part in split.parts:
            sums[ttft_side(part.name)] += part.ns
        return cls(split.ttft_ns, sums["client"], sums["server"], sums["unattributed"])

    @property
    def ttft_ms(self) -> float:
        """The TTFT, ms."""
        return self.ttft_ns / NS_PER_MS

    @property
    def client_ms(self) -> float:
        """Client-side time, ms."""
        return self.client_ns / NS_PER_MS

    @property
    def server_ms(self) -> float:
        """Server-reported time, ms."""
        return self.server_ns / NS_PER_MS

    @property
    def unattributed_ms(self) -> float:
        """Network round trip + unreported time, ms."""
        return self.unattributed_ns / NS_PER_MS


class ProbeError(Exception):
    """The probe could not start: no model to use, or the model list could not be read. The message says what to do;
    ``timeline`` is the model-list request's, when one was made."""

    def __init__(self, message: str, timeline: Timeline | None = None) -> None:
        super().__init__(message)
        self.timeline = timeline


#: Called as each request of a probe starts: its 1-based index, the number of requests, and the timeline it fills.
RequestStarted = Callable[[int, int, Timeline], None]


@dataclass
class ProbeResult:
    """What a probe found: the target facts and one timeline per request, in the order sent."""

    #: the target the requests went to, as resolved (its settings are in ``to_dict()``'s ``target.settings``)
    target: Target
    model: str
    models: list[str] = field(default_factory=list)  #: the ids the model list gave (empty when model was given)
    timelines: list[Timeline] = field(default_factory=list)
    pool: dict[str, OriginStats] = field(default_factory=dict)  #: the probe client's pool statistics per origin
    models_timeline: Timeline | None = None  #: the ``GET /models`` request, when one was made
    #: the server's Prometheus metrics over the probe (scraped before the first request and after the last);
    #: NotAvailable says why there are none; None when scraping was turned off
    server_metrics: MetricsWindow | NotAvailable | None = None
    #: the requests went at once through a browser's pool (:data:`~latscope.wire.pool.BROWSER_CONNECTIONS_PER_HOST`
    #: connections per host), not one after another
    browser: bool = False
    #: with ``http3`` and ``compare_tcp``: the same requests sent again over TCP+TLS afterwards, for comparison
    tcp_timelines: list[Timeline] = field(default_factory=list)
    #: Ctrl-C (or a cancellation) stopped the probe: ``timelines`` holds the requests sent so far, the one in flight
    #: with a "cancelled" error
    interrupted: bool = False
    #: with ``server_spans``: how the server's own spans were joined (a sentence: how many requests got theirs, where
    #: they were received, what was refused); None when no receiver ran
    server_spans: str | None = None

    @property
    def base_url(self) -> str:
        """The target's base URL, normalised for its dialect."""
        return self.target.base_url

    @property
    def dialect(self) -> str:
        """The dialect spoken, e.g. "openai.chat" (:data:`latscope.dialects.DIALECTS`)."""
        return self.target.dialect.name

    @property
    def http3(self) -> bool:
        """The requests went over HTTP/3 (QUIC, :class:`~latscope.wire.h3.H3Client`); their handshake is the tls
        phase."""
        return self.target.http3

    @property
    def ok(self) -> bool:
        """True when every request completed without error."""
        return bool(self.timelines) and all(t.ok for t in self.timelines)

    @property
    def reachable(self) -> bool:
        """False when no request got a response (all failed before the response head)."""
        return any(t.status is not None for t in self.timelines)

    def ttft_splits(self) -> list[TtftSplit | None]:
        """Each request's TTFT split into terms (see :class:`~latscope.signals.join.TtftSplit`), in the order sent;
        None for a request without a first token."""
        return [ttft_split(t) for t in self.timelines]

    def ttft_sides(self) -> list[TtftSides | None]:
        """Each request's TTFT as client-side, server-side and unattributed sums (:class:`TtftSides`)."""
        return [None if split is None else TtftSides.of(split) for split in self.ttft_splits()]

    def facts(self) -> dict[str, Any]:
        """Target facts from the first request that got a connection: protocol, TLS, address, server header."""
        facts: dict[str, Any] = {
            "base_url": self.base_url,
            "model": self.model,
            "dialect": self.dialect,
            "mode": get_dialect(self.dialect).mode,
        }
        for t in self.timelines:
            info = t.connection
            if info is None:
                continue
            facts.update(info.facts(), server=t.response_headers.get("server"))
            break
        h3 = self.h3_advertised()
        if h3 is not False:
            facts["h3_advertised"] = h3
        return facts

    def h3_advertised(self) -> dict[str, Any] | Literal[False] | None:
        """Whether the target announces HTTP/3 (``Alt-Svc``, RFC 7838) on its TCP responses: the first ``h3``
        alternative as ``{"port", "host", "max_age_s"}`` (:func:`~latscope.signals.altsvc.h3_advertised`), None
        when the TCP responses announce none, False when no response came over TCP (nothing to tell by)."""
        over_tcp = [self.models_timeline, *self.timelines, *self.tcp_timelines]
        for t in over_tcp:
            if t is None or t.status is None or t.connection is None or t.connection.http_version == "HTTP/3":
                continue
            return h3_advertised(t.response_headers)
        return False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (schema ``latscope.probe/1``): target facts, per request its serialised timeline
        (``latscope.timeline/2``) with the derived metrics (ms) and its TTFT split (``ttft_split``: ``ttft_ms`` and
        ``parts`` with ``name``, ``ms``, ``source``, ``side``; null without a first token), and ``server_metrics``
        (``url``, ``available``, ``why`` or the window's ``stats``; null when scraping was off)."""
        return {
            "schema": SCHEMA,
            "target": {
                **self.facts(),
                "models": list(self.models),
                "settings": self.target.to_dict(),
            },
            "pool": {origin: asdict(stats) for origin, stats in self.pool.items()},
            "requests": [
                {"timeline": timeline_to_dict(t), "metrics": metrics.summary(t), "ttft_split": _split_dict(split)}
                for t, split in zip(self.timelines, self.ttft_splits(), strict=True)
            ],
            "server_metrics": _metrics_dict(self.server_metrics),
            "browser": self.browser,
            "http3": self.http3,
            "tcp_comparison": [
                {"timeline": timeline_to_dict(t), "metrics": metrics.summary(t)} for t in self.tcp_timelines
            ],
            "interrupted": self.interrupted,
            "server_spans": self.server_spans,
        }


def _split_dict(split: TtftSplit | None) -> dict[str, Any] | None:
    if split is None:
        return None
    parts = [{"name": p.name, "ms": p.ms, "source": p.source, "side": ttft_side(p.name)} for p in split.parts]
    return {"ttft_ms": split.ttft_ms, "parts": parts}


def _metrics_dict(window: MetricsWindow | NotAvailable | None) -> dict[str, Any] | None:
    if window is None:
        return None
    if isinstance(window, NotAvailable):
        return {"url": window.url, "available": False, "why": window.why}
    return {
        "url": window.url,
        "available": True,
        "interval_s": window.interval_s,
        "family": window.family,
        "stats": None if window.stats is None else asdict(window.stats),
        "warnings": list(window.warnings),
    }


async def list_models(target: Target) -> tuple[list[str], Timeline]:
    """The model ids ``target`` lists (see :meth:`latscope.wire.Client.list_models`), and that request's timeline,
    fetched on a client of its own (it warms nothing the probe's requests use). Raises
    :class:`~latscope.wire.WireError` when the server cannot be reached, :class:`ProbeError` for a bad answer."""
    async with target.replace(http3=False).client() as client:
        try:
            return await client.list_models(target.base_url, target.dialect)
        except ModelListError as exc:
            raise ProbeError(f"{exc}; pass a model name", exc.timeline) from None


async def probe(
    target: Target | str,
    *,
    model: str | None = None,
    prompt: str | None = None,
    prompt_tokens: int | None = None,
    max_tokens: int = 64,
    n: int = 3,
    quickack: bool = False,
    metrics_url: str | None = None,
    scrape_metrics: bool = True,
    on_request: RequestStarted | None = None,
    browser: bool = False,
    compare_tcp: bool = False,
    server_spans: tuple[str, int] | None = None,
    span_wait_s: float = SPAN_WAIT_S,
) -> ProbeResult:
    """Send ``n`` streamed requests to ``target`` one after another on one client and return their timelines.

    ``target`` is a resolved :class:`~latscope.wire.target.Target` (its URL, dialect, credential headers, TLS
    settings, timeouts, stamps and protocols), or a base URL, resolved with every default (OpenAI chat, ``/v1``
    added to a URL without a path). ``model`` defaults to the first id the server's model list names. The prompt is
    ``prompt``, else a synthetic prompt of about ``prompt_tokens`` tokens, else :data:`DEFAULT_PROMPT`. Failures of a
    request are in its timeline; a failure that shows the target is unreachable (dns, connect, tls) stops the probe
    early. Raises :class:`~latscope.wire.WireError` when the model list cannot be fetched and :class:`ProbeError`
    when there is no model to use.

    Each timeline gets the server's own report joined on (:func:`~latscope.signals.join.join_server_signals`).
    ``scrape_metrics`` scrapes ``metrics_url`` (default: the target's origin + ``/metrics``) before the first request
    and after the last, into ``ProbeResult.server_metrics``; a missing endpoint is a NotAvailable there, never a
    failure. ``quickack`` sets TCP_QUICKACK around every read and write. ``on_request`` is told as each request
    starts (for progress). Cancelled (Ctrl-C), the probe returns what it measured with ``interrupted`` set.

    ``browser`` sends the ``n`` requests at once through a pool of
    :data:`~latscope.wire.pool.BROWSER_CONNECTIONS_PER_HOST` connections per host, as a web page's requests go: over
    HTTP/1.1 those beyond it wait for a connection (each timeline's ``pool`` phase), over HTTP/2 one connection
    carries them all.

    A target with ``http3`` gets the requests over HTTP/3 (QUIC over UDP, to the same host and port; needs aioquic):
    one QUIC connection carries them, and each timeline's ``tls`` phase is the QUIC handshake (``connect`` only opens
    the UDP socket; see :mod:`latscope.wire.h3`). ``compare_tcp`` then sends the same ``n`` requests over TCP+TLS on
    a client of their own, into ``ProbeResult.tcp_timelines``. Whether the target announces HTTP/3 (``Alt-Svc``) is
    a fact of every probe that got a response over TCP (:meth:`ProbeResult.h3_advertised`).

    ``server_spans`` (host, port) receives the server's own trace spans over OTLP/HTTP for the probe
    (:class:`~latscope.wire.spanreceiver.SpanReceiver`; the requests then carry a ``traceparent``): after the last
    request it waits up to ``span_wait_s`` s for every completed request's span, joins each one's measures (vLLM's
    queue, prefill, decode and the ``ingest`` before its engine queue) to its timeline
    (:func:`~latscope.signals.serverspans.join_server_spans`) and says how it went in ``ProbeResult.server_spans``.
    """
    target = Target.resolve(target) if isinstance(target, str) else target
    if server_spans is not None:
        receiver = SpanReceiver(*server_spans)
        await receiver.start()
        try:
            result = await probe(
                target.replace(trace_context=True),
                model=model,
                prompt=prompt,
                prompt_tokens=prompt_tokens,
                max_tokens=max_tokens,
                n=n,
                quickack=quickack,
                metrics_url=metrics_url,
                scrape_metrics=scrape_metrics,
                on_request=on_request,
                browser=browser,
                compare_tcp=compare_tcp,
            )
            if not result.interrupted:
                result.server_spans = await _join_spans(receiver, result.timelines, span_wait_s)
        finally:
            await receiver.stop()
        return result
    if n < 1:
        raise ValueError("n must be at least 1")
    if compare_tcp and not target.http3:
        raise ValueError("compare_tcp compares HTTP/3 with TCP: it needs http3")
    if target.http3:
        _require_http3()
    models: list[str] = []
    models_timeline: Timeline | None = None
    if model is None:
        models, models_timeline = await list_models(target)
        model = models[0]
    # the streamed request a probe sends (usage asked for, so token counts come from the server when it can)
    spec = target.dialect.build_request(model, _prompt(prompt, prompt_tokens), max_tokens)
    result = ProbeResult(target, model, models=models, models_timeline=models_timeline, browser=browser)
    scraper: MetricsScraper | None = None
    metrics_client: Client | None = None
    if scrape_metrics:
        url = metrics_url if metrics_url is not None else metrics_url_for(target.base_url)
        metrics_client = _metrics_client(target, url)
        # before and after only: a periodic GET would run beside the measured requests and disturb them
        scraper = MetricsScraper(metrics_client.fetch, url, interval_s=None)
    try:
        if scraper is not None:
            await scraper.start()
        pool = BROWSER_CONNECTIONS_PER_HOST if browser else target.max_connections_per_origin
        async with target.client(quickack=quickack, max_connections_per_origin=pool) as client:
            try:
                if browser:
                    await _all_at_once(client, spec, target.base_url, n, result.timelines, on_request)
                else:
                    await _one_after_another(client, spec, target.base_url, n, result.timelines, on_request, "probe")
            except asyncio.CancelledError:
                result.interrupted = True  # the request in flight keeps its marks and a "cancelled" error
            result.pool = client.stats()
        if compare_tcp and not result.interrupted:
            async with target.replace(http3=False).client(quickack=quickack) as tcp_client:
                try:
                    await _one_after_another(
                        tcp_client, spec, target.base_url, n, result.tcp_timelines, on_request, "probe tcp"
                    )
                except asyncio.CancelledError:
                    result.interrupted = True
        if scraper is not None and not result.interrupted:
            result.server_metrics = await scraper.stop()
    finally:
        if metrics_client is not None:
            await metrics_client.aclose()
    return result


async def _join_spans(receiver: SpanReceiver, timelines: list[Timeline], wait_s: float) -> str:
    """Wait for the spans of the completed requests, join them, and say how it went."""
    wanted = [t.trace_id for t in timelines if t.ok and t.trace_id]
    await receiver.wait_for(wanted, wait_s)
    joined = join_server_spans(timelines, receiver.spans)
    said = f"{joined} of {len(wanted)} request(s) joined to the server's own spans, received at {receiver.url}"
    if not receiver.spans:
        said = (
            f"no span arrived at {receiver.url} within {wait_s:g} s of the last request: is the server exporting "
            "there? (vLLM: --otlp-traces-endpoint with OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf)"
        )
    if receiver.warnings:
        said += "; " + "; ".join(receiver.warnings[:3])
    return said


def _metrics_client(target: Target, url: str) -> Client:
    """The client that scrapes ``url``: over TCP, with short limits (:data:`METRICS_TIMEOUTS`), no trace context, and
    the probe's own headers (the API key among them) only when ``url`` is on the target's origin, never another."""
    return target.replace(http3=False).client(
        headers=target.headers if _origin(url) == _origin(target.base_url) else (),
        timeouts=METRICS_TIMEOUTS,
        trace_context=False,
    )


def _prompt(prompt: str | None, prompt_tokens: int | None) -> str:
    """``prompt``, else a synthetic prompt of about ``prompt_tokens`` tokens, else :data:`DEFAULT_PROMPT`."""
    if prompt is not None:
        return prompt
    if prompt_tokens is not None:
        from latscope.dialects.prompts import synthetic_prompt

        return synthetic_prompt(prompt_tokens, seed=0)
    return DEFAULT_PROMPT


async def _one_after_another(
    client: Client,
    spec: RequestSpec,
    base_url: str,
    n: int,
    timelines: list[Timeline],
    on_request: RequestStarted | None,
    label: str,
) -> None:
    """``n`` requests one after another on ``client`` (labelled ``"{label} i/n"``), their timelines appended to
    ``timelines`` as each starts; stops early when one shows the target unreachable."""
    for index in range(n):
        t = Timeline()
        timelines.append(t)
        await _send(client, spec, base_url, (index, n, t), on_request, label)
        if t.error is not None and t.error.phase in UNREACHABLE_PHASES:
            break


async def _all_at_once(
    client: Client,
    spec: RequestSpec,
    base_url: str,
    n: int,
    timelines: list[Timeline],
    on_request: RequestStarted | None,
) -> None:
    """``n`` requests sent at once on ``client``, their timelines appended to ``timelines`` in the order sent."""
    batch = [Timeline() for _ in range(n)]
    timelines.extend(batch)
    await asyncio.gather(*(_send(client, spec, base_url, (i, n, t), on_request, "probe") for i, t in enumerate(batch)))


async def _send(
    client: Client,
    spec: RequestSpec,
    base_url: str,
    which: tuple[int, int, Timeline],
    on_request: RequestStarted | None,
    label: str,
) -> None:
    """Send request ``which`` (0-based index, count, the timeline to fill) labelled ``"{label} i/n"``, telling
    ``on_request`` as it starts, and join the server's signals onto its timeline."""
    index, n, t = which
    if on_request is not None:
        on_request(index + 1, n, t)
    await client.request(spec, base_url, label=f"{label} {index + 1}/{n}", timeline=t)
    join_server_signals(t)


def _require_http3() -> None:
    """Raise :class:`ProbeError` when aioquic, which HTTP/3 needs, is not installed (it is optional)."""
    try:
        import latscope.wire.h3  # noqa: F401
    except ImportError as exc:
        raise ProbeError(f"HTTP/3 needs aioquic ({exc}): pip install 'latscope[http3]'") from None


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


callable_module(__name__, probe)

__all__ = [
    "ProbeError",
    "ProbeResult",
    "TtftSides",
    "WireError",
    "list_models",
    "probe",
    "ttft_side",
]
