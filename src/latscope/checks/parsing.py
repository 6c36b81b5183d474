"""``slow-request-parsing``: the server spends far more per MB of request body than a fast JSON parser needs.

Mechanism: the same short prompt is sent with its body padded by a field the model never sees (``user``, or JSON
whitespace) at several sizes. What the server does before answering (receiving, parsing, validating the body) shows
in its time to first byte after the upload (``wait_ms``); a least-squares line through (body MB, server ms) gives
the server's cost per MB. Two controls, both measured in this run:

- the same bodies made invalid at their first byte: the server receives them whole and rejects them at once, so
  their per-MB cost is what receiving a body costs (network, TLS records, HTTP/2 frames) without any parsing; it is
  subtracted. With this control both sides are timed from the start of the upload (``send_ms + wait_ms``): how much of
  the upload the client's write covered (socket buffers, HTTP/2 flow control) then cancels out too;
- ``orjson.loads`` of the very same bodies in the client process: a fast parser's cost per MB on comparable hardware,
  which what remains is compared with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import LineFit, fit_line, median
from latscope.findings import Clear, Confidence, Inconclusive, NotTested, Outcome
from latscope.units import BYTES_PER_MB

PARSE_ID = "slow-request-parsing"


#: A server this many times slower per MB than the fast parser is slower than even the standard library's json
#: (orjson/ujson are 2–5× faster than stdlib json on long prompts: reference/bottlenecks.md, source article).
SLOW_PARSE_RATIO = 5.0
#: …and at least this much slower in absolute terms (ms per MB, i.e. below 100 MB/s): an order of magnitude slower
#: than even the standard library's json on such padding (about 1 ms/MB), so what remains of receiving the body after
#: the control's subtraction (a few ms per MB in an interpreted HTTP stack, more when the host is busy) cannot reach it.
SLOW_PARSE_MIN_EXCESS_MS_PER_MB = 10.0
#: Repeats of one padding size fall in one bucket of this many bytes (padding sizes are ≥ 0.5 MB apart; prompts
#: differ by a few bytes).
SIZE_BUCKET_BYTES = 64 * 1024
#: Completed padded requests and distinct body sizes a line needs before it can say anything.
MIN_POINTS = 4
MIN_SIZES = 3
#: The all-requests slope's uncertainty band is ± this many standard errors (≈ 95 %).
SLOPE_Z = 2.0
#: The server's own parse/validate report confirms the client-side slope when within this fraction of it.
CONFIRM_TOLERANCE = 0.5
#: Parsing must cost at least this many times what the same server spends receiving the same bytes (the control's
#: per-MB cost). Receiving and parsing use the same CPU, so when the host is busy both stretch by the same factor and
#: this ratio does not, while the absolute thresholds above do not hold on an oversubscribed host (there
#: llama-cpp-python's stdlib json + pydantic stays under twice its receiving cost; the lab's slow-parse regexes are
#: over ten times theirs).
RECEIVE_RATIO = 3.0
#: A server whose own parse/validate report covers less than this share of the excess contradicts the client-side
#: slope: the excess is real time, but not spent parsing (the server would have timed it). The lower edge of the
#: confirmation band, so a report either confirms, contradicts, or (above the band) leaves the finding as measured.
CONTRADICT_SHARE = 1.0 - CONFIRM_TOLERANCE
#: Receiving costs a server's CPU at most this much per MB (an interpreted HTTP stack on a busy host several ms, C
#: stacks well under 1): a control that takes longer is waiting for the network (a link's bandwidth, round
#: trips), which does not stretch with the host's load like parsing, so only this much of it counts for the ratio
#: above.
RECEIVE_CPU_MAX_MS_PER_MB = 10.0
#: The paired differences (each body minus its control) must lie on a line this well (R²) for a finding: parsing
#: grows with the bytes parsed, while a difference that jumps between sizes is something else.
MIN_PAIRED_R2 = 0.8
#: A fit this good (R²) is high-confidence evidence on its own.
HIGH_CONFIDENCE_R2 = 0.9
#: A target further away than this (ms of RTT) adds upload transfer time to the server-side time.
REMOTE_RTT_MS = 1.0


@dataclass(frozen=True, slots=True)
class ParsePoint:
    """One padded request of the parsing experiment: its body size (bytes) and the server-side time (``wait_ms``:
    first response byte − request fully written), the upload time, what the server reported for parsing and
    validating (ms, None when it reports nothing), and whether it went on a reused connection (None: unknown)."""

    body_bytes: int
    server_ms: float
    send_ms: float | None = None
    server_parse_ms: float | None = None
    reused: bool | None = None


@dataclass(frozen=True, slots=True)
class ParsingEvidence:
    """The parsing experiment.

    Fields:
        padding: how bodies were padded: ``"user"`` (OpenAI's ``user`` string, never tokenised), ``"whitespace"``
            (JSON whitespace) or None when the server accepted neither.
        points: every padded request that completed.
        control: the same bodies made invalid at their first byte, which the server must receive whole and then
            rejects at once (400): their ``server_ms`` is the cost of receiving a body (network, TLS, HTTP framing)
            without parsing it. Empty when the server answered them in an unusable way.
        fast_parser: ``(body_bytes, ms)``: ``orjson.loads`` of the same bodies in the client process, best of a few.
        failures: padded requests and controls that failed (samples with their errors).
        probe_failures: the first padded requests that found out whether the server accepts a padding kind and
            failed: a refusal there chose the other kind (or showed that neither is accepted).
        rejected: why padding was refused (the server's answer), when it was.
        size_limit_bytes: the largest body the server accepted when it refused a larger one (413), else None.
        rtt_ms: the connection's TCP round-trip time (a remote target adds upload transfer time to ``server_ms``).
        upload_rate_bps: the rate the path carried the largest bodies at (bytes/s, the kernel's estimate).
    """

    padding: str | None
    points: tuple[ParsePoint, ...] = ()
    control: tuple[ParsePoint, ...] = ()
    fast_parser: tuple[tuple[int, float], ...] = ()
    failures: tuple[RequestSample, ...] = ()
    rejected: str | None = None
    size_limit_bytes: int | None = None
    rtt_ms: float | None = None
    probe_failures: tuple[RequestSample, ...] = ()
    upload_rate_bps: float | None = None


def _fast_parser_ms_per_mb(points: tuple[tuple[int, float], ...]) -> float | None:
    """The fast parser's cost per MB: the slope of its line, or its mean rate when the sizes do not allow a line."""
    usable = [(b, ms) for b, ms in points if b > 0]
    fit = fit_line([b / BYTES_PER_MB for b, _ in points], [ms for _, ms in points]) if len(points) >= 2 else None
    if fit is not None:
        return max(0.0, fit.slope)
    rates = [ms / (b / BYTES_PER_MB) for b, ms in usable]
    return median(rates)


def _server_reported_slope(ev: ParsingEvidence) -> float | None:
    reported: list[tuple[float, float]] = [
        (p.body_bytes / BYTES_PER_MB, p.server_parse_ms) for p in ev.points if p.server_parse_ms is not None
    ]
    if len(reported) < MIN_POINTS:
        return None
    fit = fit_line([x for x, _ in reported], [y for _, y in reported])
    return None if fit is None else fit.slope


def _fit_evidence(ev: ParsingEvidence, fit: LineFit, fast: float, from_upload_start: bool) -> dict[str, Any]:
    return {
        "padding": ev.padding,
        "bodies": len(ev.points),
        "largest_body_mb": round(max(p.body_bytes for p in ev.points) / BYTES_PER_MB, 3),
        "server_ms_per_mb": round(fit.slope, 3),
        "server_ms_per_mb_se": None if fit.slope_se is None else round(fit.slope_se, 3),
        "intercept_ms": round(fit.intercept, 3),
        "r2": round(fit.r2, 4),
        "residual_sd_ms": round(fit.residual_sd, 3),
        "fast_parser_ms_per_mb": round(fast, 3),
        "timed_from": "upload start (send + wait)" if from_upload_start else "upload end (wait)",
        "points": [
            [round(p.body_bytes / BYTES_PER_MB, 3), round(point_ms(p, from_upload_start=from_upload_start), 3)]
            for p in ev.points
        ],
    }


def point_ms(point: ParsePoint, *, from_upload_start: bool) -> float:
    """A point's time: ``wait_ms`` (first byte − request written), or from the start of the upload."""
    return point.server_ms + (point.send_ms or 0.0) if from_upload_start else point.server_ms


def floor_points(points: tuple[ParsePoint, ...], *, from_upload_start: bool = False) -> list[tuple[float, float]]:
    """Per body size, the fastest of its repeats: ``(MB, ms)``. Noise on a shared host (scheduling, a collector,
    other traffic) only ever adds time, so the per-size minimum is the server's own cost. Repeats of one padding
    size differ by a few bytes (their prompts differ): sizes are grouped in :data:`SIZE_BUCKET_BYTES` buckets."""
    best: dict[int, tuple[int, float]] = {}
    for p in points:
        ms = point_ms(p, from_upload_start=from_upload_start)
        bucket = round(p.body_bytes / SIZE_BUCKET_BYTES)
        if bucket not in best or ms < best[bucket][1]:
            best[bucket] = (p.body_bytes, ms)
    return [(size / BYTES_PER_MB, ms) for size, ms in (best[b] for b in sorted(best))]


def control_ms_per_mb(ev: ParsingEvidence) -> float | None:
    """The receiving cost per MB, timed from the start of the upload (fastest repeats of the invalid bodies), never
    below 0; None without a usable control."""
    floors = floor_points(ev.control, from_upload_start=True)
    if len(floors) < MIN_SIZES:
        return None
    fit = fit_line([x for x, _ in floors], [y for _, y in floors])
    return None if fit is None else max(0.0, fit.slope)


def _buckets(values: list[tuple[int, float]]) -> set[int]:
    return {round(size / SIZE_BUCKET_BYTES) for size, _ in values}


def paired_differences(ev: ParsingEvidence) -> list[tuple[int, float]]:
    """``(body bytes, ms)`` for every padded body whose control (the same bytes, rejected at byte 0) went like it
    over a new connection: its time from the start of the upload minus the control's. Receiving the body, however
    the path delivers it (slow start, flow control, bandwidth), is the same for both, so what is left is the
    server's work on a valid body."""
    controls = {c.body_bytes: c for c in ev.control if c.reused is False}
    out: list[tuple[int, float]] = []
    for p in ev.points:
        c = controls.get(p.body_bytes)
        if c is not None and p.reused is False:
            out.append((p.body_bytes, point_ms(p, from_upload_start=True) - point_ms(c, from_upload_start=True)))
    return out


def _paired_floors(ev: ParsingEvidence) -> list[tuple[float, float]]:
    """Per body size, the fastest padded request minus the fastest control (each the server's own cost: a busy host
    only adds time to either), over the sizes both have: ``(MB, ms)``."""

    def by_bucket(points: tuple[ParsePoint, ...]) -> dict[int, tuple[float, float]]:
        floors = floor_points(points, from_upload_start=True)
        return {round(mb * BYTES_PER_MB / SIZE_BUCKET_BYTES): (mb, ms) for mb, ms in floors}

    padded, control = by_bucket(ev.points), by_bucket(ev.control)
    return [(padded[b][0], padded[b][1] - control[b][1]) for b in sorted(padded) if b in control]


@dataclass(frozen=True, slots=True)
class _Lines:
    """The lines the parsing check decides on (slopes in ms per MB of body).

    ``receiving``: the control's time per MB (None without a control); ``fast``: the fast parser's; ``paired``: the
    series is each body's time beyond its control; ``upload``: times run from the upload's start; ``fit``: the line
    through every request; ``floor``: through each size's fastest; ``padded_floor``: through each size's fastest
    padded request (the control not subtracted); ``offset``: receiving, where the series still contains it;
    ``threshold``: the slope that means slow parsing; ``excess``: the fastest line's slope beyond receiving and the
    fast parser.
    """

    receiving: float | None
    fast: float
    paired: bool
    upload: bool
    fit: LineFit
    floor: LineFit
    padded_floor: LineFit
    offset: float
    threshold: float
    excess: float


def check_request_parsing(ev: ParsingEvidence, reference: Reference | None) -> Outcome:
    """Finding when the server's per-MB time is at least :data:`SLOW_PARSE_RATIO` × a fast parser's and at least
    :data:`SLOW_PARSE_MIN_EXCESS_MS_PER_MB` above it.

    Two lines are fitted: through every request (reported: slope, intercept, R², residual noise) and through each
    size's fastest repeat (the decision and the cost: robust to the additive noise of a busy host). A finding needs
    both slopes at or above the threshold; clear needs the robust slope below it and the all-requests slope's lower
    95 % edge below it too; anything else is inconclusive.
    """
    unmeasured = _unmeasured(ev)
    if unmeasured is not None:
        return unmeasured
    lines = _lines(ev)
    if lines is None:
        return Inconclusive(PARSE_ID, "the padded requests did not span enough sizes for a line; run again")
    evidence = _evidence(ev, lines)
    undecided = _against_threshold(lines, evidence)
    if undecided is None:
        undecided = _not_parsing_alone(lines, evidence)
    if undecided is not None:
        return undecided
    return _finding(ev, reference, lines, evidence)


def _unmeasured(ev: ParsingEvidence) -> NotTested | None:
    """Why the padded requests cannot be judged (no padding accepted, a misbehaving target, too few sizes), None
    when they can."""
    if ev.padding is None:
        return NotTested(PARSE_ID, f"no padded body was accepted: {ev.rejected or 'the server refused the padding'}")
    # refusals the experiment expects (the body-size limit, a padding kind: probe_failures) are not misbehaviour
    unexpected = [f for f in ev.failures if f.status != 413]
    broken = failures.too_many_failed(unexpected, ok_elsewhere=len(ev.points))
    if broken:
        return NotTested(PARSE_ID, f"the target misbehaved during the parsing experiment: {broken}")
    sizes = {round(p.body_bytes / SIZE_BUCKET_BYTES) for p in ev.points}
    if len(ev.points) < MIN_POINTS or len(sizes) < MIN_SIZES:
        reason = failures.summarise(ev.probe_failures + ev.failures)
        limit = ""
        if ev.size_limit_bytes is not None:
            limit = f"; the server accepts bodies up to about {ev.size_limit_bytes / BYTES_PER_MB:.2f} MB"
        return NotTested(
            PARSE_ID,
            f"only {len(ev.points)} padded request(s) over {len(sizes)} size(s) completed"
            + (f" ({reason})" if reason else "")
            + limit,
        )
    return None


def _lines(ev: ParsingEvidence) -> _Lines | None:
    """The lines through the padded requests and the threshold they are held to, None where a line cannot be
    fitted."""
    receiving = control_ms_per_mb(ev)
    fast = _fast_parser_ms_per_mb(ev.fast_parser)
    pairs = paired_differences(ev)
    paired = receiving is not None and len(pairs) >= MIN_POINTS and len(_buckets(pairs)) >= MIN_SIZES
    upload = receiving is not None  # with a control, everything is timed from the upload's start
    padded = [(p.body_bytes, point_ms(p, from_upload_start=upload)) for p in ev.points]
    # What is decided on: with a control, each body's time beyond the same bytes rejected at byte 0 (receiving is
    # already subtracted, pair by pair); without one, the padded bodies' own times.
    series = pairs if paired else padded
    fit = fit_line([b / BYTES_PER_MB for b, _ in series], [ms for _, ms in series])
    floors = _paired_floors(ev) if paired else floor_points(ev.points, from_upload_start=upload)
    floor = fit_line([x for x, _ in floors], [y for _, y in floors])
    padded_floor = fit_line(*zip(*floor_points(ev.points, from_upload_start=upload), strict=True))
    if fit is None or floor is None or padded_floor is None or fast is None or fit.slope_se is None:
        return None
    offset = 0.0 if paired else (receiving or 0.0)  # receiving, where the series still contains it
    # the slopes are compared with what a fast parser would need plus the margin (plus receiving, where included)
    threshold = offset + max(fast * SLOW_PARSE_RATIO, fast + SLOW_PARSE_MIN_EXCESS_MS_PER_MB)
    excess = floor.slope - offset - fast
    return _Lines(receiving, fast, paired, upload, fit, floor, padded_floor, offset, threshold, excess)


def _evidence(ev: ParsingEvidence, lines: _Lines) -> dict[str, Any]:
    """The lines' numbers, how requests were timed, and the threshold."""
    evidence = _fit_evidence(ev, lines.fit, lines.fast, lines.upload)
    evidence["timed_from"] = (
        "upload start, minus the same body rejected at byte 0 (paired, new connections)"
        if lines.paired
        else evidence["timed_from"]
    )
    evidence["server_ms_per_mb_fastest"] = round(lines.padded_floor.slope, 3)
    evidence["receive_ms_per_mb"] = None if lines.receiving is None else round(lines.receiving, 3)
    evidence["threshold_ms_per_mb"] = round(lines.threshold, 3)
    return evidence


def _against_threshold(lines: _Lines, evidence: dict[str, Any]) -> Clear | Inconclusive | None:
    """Clear when both lines are below the threshold, inconclusive when only one is, None when neither is."""
    fit, floor, fast, threshold = lines.fit, lines.floor, lines.fast, lines.threshold
    receiving, offset, excess = lines.receiving, lines.offset, lines.excess
    assert fit.slope_se is not None
    low = fit.slope - SLOPE_Z * fit.slope_se
    if floor.slope < threshold and low < threshold:
        return Clear(
            PARSE_ID,
            f"the server spends {excess + fast:.2f} ms per MB of body beyond receiving it ({receiving or 0.0:.2f} "
            f"ms/MB; fast parser here: {fast:.2f} ms/MB), below the {threshold - offset:.2f} ms/MB that would mean "
            "slow parsing",
            evidence,
        )
    if floor.slope < threshold or fit.slope < threshold:
        return Inconclusive(
            PARSE_ID,
            f"the server's cost per MB is {floor.slope:.2f} ms on its fastest requests and {fit.slope:.2f} "
            f"± {SLOPE_Z * fit.slope_se:.2f} ms over all (threshold {threshold:.2f} ms/MB, R² {fit.r2:.2f}): "
            "more samples or larger bodies would settle it",
            evidence,
        )
    return None


def _not_parsing_alone(lines: _Lines, evidence: dict[str, Any]) -> Inconclusive | None:
    """Inconclusive when the time beyond receiving is not in a line, or not clear of the server's cost of receiving
    the bytes; None otherwise."""
    fit, floor, excess = lines.fit, lines.floor, lines.excess
    # a line through every request, or through each size's fastest (one stalled request on a busy host bends the
    # first, not the second; a step between sizes bends both)
    line_r2 = max(fit.r2, floor.r2)
    evidence["r2_fastest"] = round(floor.r2, 4)
    if lines.paired and line_r2 < MIN_PAIRED_R2:
        evidence["excess_ms_per_mb"] = round(excess, 3)
        return Inconclusive(
            PARSE_ID,
            f"the time beyond receiving grows {fit.slope:.2f} ms per MB, but not in a line (R² {fit.r2:.2f} over "
            f"every request, {floor.r2:.2f} over each size's fastest, both < {MIN_PAIRED_R2:g}): something other "
            "than parsing varies with the body; more repeats would settle it",
            evidence,
        )
    # the server's own CPU receiving the bytes: what the control measured, less what a network carries slowly
    receive_cpu = None if lines.receiving is None else min(lines.receiving, RECEIVE_CPU_MAX_MS_PER_MB)
    if receive_cpu is not None and excess < RECEIVE_RATIO * receive_cpu:
        evidence["excess_ms_per_mb"] = round(excess, 3)
        return Inconclusive(
            PARSE_ID,
            f"the server spends {excess:.2f} ms per MB beyond receiving the body and a fast parser, above the "
            f"{lines.threshold:.2f} ms/MB threshold but under {RECEIVE_RATIO:g}× the {receive_cpu:.2f} ms/MB it "
            "needs to receive the same bytes: a busy host stretches both alike; a run on a quiet host, or the "
            "server's own parse timing (Server-Timing), would settle it",
            evidence,
        )
    return None


def _finding(ev: ParsingEvidence, reference: Reference | None, lines: _Lines, evidence: dict[str, Any]) -> Outcome:
    """The finding, unless the server's own parse timing says the time went elsewhere (inconclusive)."""
    fit, fast, receiving, excess = lines.fit, lines.fast, lines.receiving, lines.excess
    reported = _server_reported_slope(ev)
    confirmed = reported is not None and abs(reported - excess) <= CONFIRM_TOLERANCE * excess
    if reported is not None:
        evidence["server_reported_parse_ms_per_mb"] = round(reported, 3)
        evidence["excess_ms_per_mb"] = round(excess, 3)
        if reported < CONTRADICT_SHARE * excess:
            # the server timed its own parsing and validation and found them cheap: the time per MB went somewhere
            # between the client and the parser (a proxy buffering the body, the network), not into parsing
            return Inconclusive(
                PARSE_ID,
                f"server-side time grows {lines.padded_floor.slope:.2f} ms per MB of body ({excess:.2f} beyond "
                f"receiving it and a fast parser), but the server reports only {reported:.2f} ms per MB of parsing "
                "and validation: the time goes elsewhere on the path (a proxy in front, the network)",
                evidence,
            )
    remote = ev.rtt_ms is not None and ev.rtt_ms >= REMOTE_RTT_MS
    confidence = Confidence.HIGH if confirmed or (fit.r2 >= HIGH_CONFIDENCE_R2 and not remote) else Confidence.MEDIUM
    if receiving is None:
        confidence = Confidence.MEDIUM if not confirmed else confidence
    received = (
        f"after {receiving:.2f} ms/MB of receiving it (bodies rejected at their first byte)"
        if receiving is not None
        else "receiving included (no usable control)"
    )
    basis = (
        f"ms per MB of request body spent by the server parsing and validating it, {received}, beyond a fast JSON "
        f"parser (orjson, measured here: {fast:.2f} ms/MB); a request pays it once per MB it carries"
    )
    if remote:
        basis += f"; the target is {ev.rtt_ms:.1f} ms away, so part of it may be upload still in flight"
    evidence["excess_ms_per_mb"] = round(excess, 3)
    return costed_finding(
        PARSE_ID,
        excess,
        reference,
        cost_basis=basis,
        evidence=evidence,
        rule=(
            f"server time grows {lines.padded_floor.slope:.2f} ms per MB of padding ({ev.padding}); beyond receiving "
            f"the body that is ≥ {SLOW_PARSE_RATIO:g}× the fast parser's {fast:.2f} ms/MB and ≥ "
            f"{SLOW_PARSE_MIN_EXCESS_MS_PER_MB:g} ms/MB above it"
        ),
        confidence=confidence,
    )
