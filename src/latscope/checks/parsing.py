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

from typing import Any

from latscope.checks import failures
from latscope.checks.evidence import ParsePoint, ParsingEvidence, Reference
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
#: this ratio does not, while the absolute thresholds above do not hold on an oversubscribed host: measured on a
#: 2-core host shared with other test runs, llama-cpp-python (stdlib json + pydantic, about 1 ms/MB idle) showed 12
#: ms/MB beyond receiving at a receiving cost of 6.8 ms/MB (1.8×); the lab's slow-parse regexes, 60–70 ms/MB, are over
#: ten times their server's receiving cost.
RECEIVE_RATIO = 3.0
#: A server whose own parse/validate report covers less than this share of the excess contradicts the client-side
#: slope: the excess is real time, but not spent parsing (the server would have timed it). The lower edge of the
#: confirmation band, so a report either confirms, contradicts, or (above the band) leaves the finding as measured.
CONTRADICT_SHARE = 1.0 - CONFIRM_TOLERANCE
#: A fit this good (R²) is high-confidence evidence on its own.
HIGH_CONFIDENCE_R2 = 0.9
#: A target further away than this (ms of RTT) adds upload transfer time to the server-side time.
REMOTE_RTT_MS = 1.0


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


def check_request_parsing(ev: ParsingEvidence, reference: Reference | None) -> Outcome:
    """Finding when the server's per-MB time is at least :data:`SLOW_PARSE_RATIO` × a fast parser's and at least
    :data:`SLOW_PARSE_MIN_EXCESS_MS_PER_MB` above it.

    Two lines are fitted: through every request (reported: slope, intercept, R², residual noise) and through each
    size's fastest repeat (the decision and the cost: robust to the additive noise of a busy host). A finding needs
    both slopes at or above the threshold; clear needs the robust slope below it and the all-requests slope's lower
    95 % edge below it too; anything else is inconclusive.
    """
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
    receiving = control_ms_per_mb(ev)
    upload = receiving is not None  # with a control, time both from the upload's start (see the module docstring)
    fit = fit_line(
        [p.body_bytes / BYTES_PER_MB for p in ev.points], [point_ms(p, from_upload_start=upload) for p in ev.points]
    )
    floors = floor_points(ev.points, from_upload_start=upload)
    floor = fit_line([x for x, _ in floors], [y for _, y in floors])
    fast = _fast_parser_ms_per_mb(ev.fast_parser)
    if fit is None or floor is None or fast is None or fit.slope_se is None:
        return Inconclusive(PARSE_ID, "the padded requests did not span enough sizes for a line; run again")
    evidence = _fit_evidence(ev, fit, fast, upload)
    evidence["server_ms_per_mb_fastest"] = round(floor.slope, 3)
    evidence["receive_ms_per_mb"] = None if receiving is None else round(receiving, 3)
    # the raw slopes are compared with the receiving cost plus what a fast parser would need plus the margin
    threshold = (receiving or 0.0) + max(fast * SLOW_PARSE_RATIO, fast + SLOW_PARSE_MIN_EXCESS_MS_PER_MB)
    evidence["threshold_ms_per_mb"] = round(threshold, 3)
    low = fit.slope - SLOPE_Z * fit.slope_se
    if floor.slope < threshold and low < threshold:
        return Clear(
            PARSE_ID,
            f"the server spends {floor.slope:.2f} ms per MB of body ({receiving or 0.0:.2f} of them receiving it; "
            f"fast parser here: {fast:.2f} ms/MB), below the {threshold:.2f} ms/MB that would mean slow parsing",
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
    excess = floor.slope - (receiving or 0.0) - fast
    if receiving is not None and excess < RECEIVE_RATIO * receiving:
        evidence["excess_ms_per_mb"] = round(excess, 3)
        return Inconclusive(
            PARSE_ID,
            f"the server spends {excess:.2f} ms per MB beyond receiving the body and a fast parser, above the "
            f"{threshold:.2f} ms/MB threshold but under {RECEIVE_RATIO:g}× the {receiving:.2f} ms/MB it needs to "
            "receive the same bytes: a busy host stretches both alike; a run on a quiet host, or the server's own "
            "parse timing (Server-Timing), would settle it",
            evidence,
        )
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
                f"server-side time grows {floor.slope:.2f} ms per MB of body ({excess:.2f} beyond receiving it and "
                f"a fast parser), but the server reports only {reported:.2f} ms per MB of parsing and validation: "
                "the time goes elsewhere on the path (a proxy in front, the network)",
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
            f"server time grows {floor.slope:.2f} ms per MB of padding ({ev.padding}); beyond receiving the body "
            f"that is ≥ {SLOW_PARSE_RATIO:g}× the fast parser's {fast:.2f} ms/MB and ≥ "
            f"{SLOW_PARSE_MIN_EXCESS_MS_PER_MB:g} ms/MB above it"
        ),
        confidence=confidence,
    )
