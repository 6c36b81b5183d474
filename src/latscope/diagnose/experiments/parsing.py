"""The parsing experiment: the same short prompt, its body padded to several sizes with text the model never sees.

The padding is OpenAI's ``user`` field (an end-user id: sent to the server, never tokenised), or — when the server
refuses it — JSON whitespace before the first key. ``max_tokens`` is 1 and quickack is on, so what varies between the
requests is only the body the server must read, parse and validate. Every request goes on a new connection, so every
body starts its upload from the same TCP state (on a remote server a MB takes several round trips to arrive, and a
connection warmed up by the previous body delivers the next one sooner). The server-side time of each is its
``wait_ms`` (first response byte − request fully written), and with the control below, the time from the start of
the upload.

Controls: next to each padded request (after it, or before it on every other repeat), the same body with its first
byte replaced (``!``: no JSON document starts
with it), which the server receives whole and rejects at once — its ``wait_ms`` is the cost of receiving the body
without parsing it; and ``orjson.loads`` of the padded bodies, timed here.
"""

from __future__ import annotations

import time

import orjson

from latscope.checks import failures
from latscope.checks.parsing import ParsePoint, ParsingEvidence
from latscope.checks.samples import RequestSample
from latscope.checks.stats import median
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.dialects.base import RequestSpec
from latscope.timeline.model import ServerPhase
from latscope.units import BYTES_PER_MB
from latscope.wire import Client

#: Padding sizes (MB): from none to a few MB, past any real prompt, so the per-MB cost stands out from noise.
SIZES_MB = (0.0, 0.5, 1.0, 2.0, 4.0)
SIZES_MB_QUICK = (0.0, 1.0, 2.0)
#: Repeats per size: the check keeps each size's fastest, so a stall must hit every repeat to bias it.
REPEATS = 3
#: Each repeat's body is this many bytes longer than the one before: a prime, so no two repeats split alike into TCP
#: segments or 16 KB TLS records. A stall tied to how a body splits (nginx's upstream hop holding a body's last
#: small segment for the origin's delayed ACK, on some body sizes) then cannot hit every
#: repeat of a size alike. Three repeats stay far inside one size bucket of the check (64 KB).
SIZE_JITTER_BYTES = 4099
#: The first padded request (bytes) finds out whether the server accepts the padding at all.
PROBE_PAD_BYTES = 1024
#: The fast parser's time is the best of this many runs (the first one pays page faults for the new allocation).
FAST_PARSER_RUNS = 3
PROMPT_TOKENS = 16
#: Plain ASCII words: no escapes for a JSON parser to decode, nothing a safety filter would flag.
PAD_TEXT = "latscope pads this request with text that no model reads. "
#: The control body's first byte: no JSON text starts with it (RFC 8259 §2), so a parser stops at byte 0.
INVALID_FIRST_BYTE = b"!"


def planned_requests(quick: bool) -> int:
    """Requests this experiment sends at most."""
    return 2 + 2 * REPEATS * len(SIZES_MB_QUICK if quick else SIZES_MB)


def pad_text(n_bytes: int) -> str:
    """``n_bytes`` characters of padding text."""
    reps = n_bytes // len(PAD_TEXT) + 1
    return (PAD_TEXT * reps)[:n_bytes]


def padded(ctx: Context, padding: str, pad_bytes: int) -> RequestSpec:
    """The experiment's request with ``pad_bytes`` of padding of kind ``padding`` ("user" or "whitespace")."""
    if padding == "user":
        return ctx.spec(PROMPT_TOKENS, 1, extra={"user": pad_text(pad_bytes)})
    spec = ctx.spec(PROMPT_TOKENS, 1)
    return ctx.with_body(spec, b"{" + b" " * pad_bytes + spec.body[1:])


def fast_parser_ms(body: bytes) -> float:
    """The best of :data:`FAST_PARSER_RUNS` ``orjson.loads(body)`` timings, ms."""
    best = float("inf")
    for _ in range(FAST_PARSER_RUNS):
        started = time.perf_counter_ns()
        orjson.loads(body)
        best = min(best, (time.perf_counter_ns() - started) / 1e6)
    return best


#: Statuses a server answers a body it cannot parse with: client errors, and the plain 500 of servers that let the
#: parse error escape (429 is the rate limiter, 502–504 a proxy or an overload: not an answer to the body).
CONTROL_STATUSES = frozenset(range(400, 429)) | frozenset(range(430, 500)) | {500}


def _control_point(sample: RequestSample) -> ParsePoint | None:
    """The control's point when the server answered it with a refusal of the body (:data:`CONTROL_STATUSES`)."""
    if sample.status not in CONTROL_STATUSES or sample.wait_ms is None:
        return None
    return ParsePoint(
        body_bytes=sample.request_bytes,
        server_ms=max(0.0, sample.wait_ms),
        send_ms=sample.send_ms,
        reused=sample.reused,
    )


def _point(sample: RequestSample) -> ParsePoint | None:
    if not sample.ok or sample.wait_ms is None:
        return None
    reported = [sample.server_ms[k] for k in (ServerPhase.PARSE, ServerPhase.VALIDATE) if k in sample.server_ms]
    return ParsePoint(
        body_bytes=sample.request_bytes,
        server_ms=sample.wait_ms,
        send_ms=sample.send_ms,
        server_parse_ms=sum(reported) if reported else None,
        reused=sample.reused,
    )


async def run(ctx: Context, prior: Prior) -> ParsingEvidence:
    """Run the parsing experiment (see the module docstring)."""
    sizes = SIZES_MB_QUICK if ctx.quick else SIZES_MB
    failed: list[RequestSample] = []
    probes: list[RequestSample] = []
    async with ctx.client(quickack=True) as client:
        padding: str | None = None
        rejections: list[str] = []
        for kind in ("user", "whitespace"):
            sample = await ctx.send(client, padded(ctx, kind, PROBE_PAD_BYTES), label=f"probe {kind} padding")
            if sample.ok:
                padding = kind
                break
            probes.append(sample)
            rejections.append(f"{kind}: {failures.describe(sample)}")
            if sample.status is None or not 400 <= sample.status < 500 or sample.status == 429:
                break  # not a refusal of the padding: the other kind would fail the same way
        if padding is None:
            return ParsingEvidence(padding=None, probe_failures=tuple(probes), rejected="; ".join(rejections))
        points: list[ParsePoint] = []
        control: list[ParsePoint] = []
        rtts: list[float] = []
        rates: list[tuple[int, int]] = []  # (body bytes, the kernel's delivery rate after it, bytes/s)
        fast: dict[int, float] = {}
        limit: int | None = None
        usable = list(sizes)
        for repeat in range(REPEATS):
            for size_mb in list(usable):
                spec = padded(ctx, padding, int(size_mb * BYTES_PER_MB) + repeat * SIZE_JITTER_BYTES)
                invalid = ctx.with_body(spec, INVALID_FIRST_BYTE + spec.body[1:])
                # Each on a connection of its own, so both bodies start from the same TCP state (slow start from the
                # initial window): a remote server receives a MB over several round trips, and a body sent on a
                # connection the previous one warmed up arrives sooner, which the subtraction would count as parsing.
                # The order alternates, so what is left of a difference cancels over the repeats.
                control_first = repeat % 2 == 1
                if control_first:
                    rejected = await _send_fresh(ctx, client, invalid, f"control {size_mb:g} MB #{repeat + 1}")
                sample = await _send_fresh(ctx, client, spec, f"pad {size_mb:g} MB #{repeat + 1}")
                point = _point(sample)
                if point is None:
                    failed.append(sample)
                    if sample.status == 413:
                        # the server's body limit: larger sizes would be refused too
                        usable = [s for s in usable if s < size_mb]
                        limit = max((p.body_bytes for p in points), default=PROBE_PAD_BYTES)
                    continue
                points.append(point)
                if sample.rtt_ms is not None:
                    rtts.append(sample.rtt_ms)
                if sample.delivery_rate_bps is not None:
                    rates.append((sample.request_bytes, sample.delivery_rate_bps))
                if len(spec.body) not in fast:
                    fast[len(spec.body)] = fast_parser_ms(spec.body)
                if not control_first:
                    rejected = await _send_fresh(ctx, client, invalid, f"control {size_mb:g} MB #{repeat + 1}")
                checked = _control_point(rejected)
                if checked is not None:
                    control.append(checked)
    return ParsingEvidence(
        padding=padding,
        points=tuple(points),
        control=tuple(control),
        fast_parser=tuple(sorted(fast.items())),
        failures=tuple(failed),
        size_limit_bytes=limit,
        rtt_ms=median(rtts),
        probe_failures=tuple(probes),
        upload_rate_bps=_upload_rate(rates),
    )


async def _send_fresh(ctx: Context, client: Client, spec: RequestSpec, label: str) -> RequestSample:
    return await ctx.send(client, spec, label=label, new_connection=True)


def _upload_rate(rates: list[tuple[int, int]]) -> float | None:
    """The path's upload rate (bytes/s): the kernel's delivery rate after the largest bodies (the ones that left slow
    start furthest behind), median over their repeats."""
    if not rates:
        return None
    largest = max(size for size, _ in rates)
    return median([float(rate) for size, rate in rates if size >= largest - REPEATS * SIZE_JITTER_BYTES])


EXPERIMENT = Experiment(
    family="parsing",
    description="server time vs request body size, against a fast JSON parser",
    planned_requests=lambda ctx: planned_requests(ctx.quick),
    run=run,
)
