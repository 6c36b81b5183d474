"""``response-cached``: a prompt route is answered from an HTTP cache.

Mechanism: a CDN or caching proxy in front of the model server keys on the URL (or the body) and replays a stored
response. It is fast, but nothing was generated for the request: a user gets someone else's answer to "the same"
prompt, sampling parameters stop mattering, and every latency measured on that route measures the cache, not the
model. The experiment sends a request (``first``), a varied one of the same size (``control``) and ``first`` again
(``repeat``) on one connection.

Evidence, strongest first:

* cache headers on any of the three (``Cache-Status`` with ``hit``, ``X-Cache: HIT``, ``CF-Cache-Status: HIT``, a
  positive ``Age``; :mod:`latscope.signals.cache`) → Finding, high confidence;
* without them, ``repeat`` brings back ``first``'s exact text, its first token comes after at most
  :data:`FIRST_TOKEN_SHARE` of the control's server time, and its stream spans at most :data:`SPAN_SHARE` of the
  control's (the tokens arrive together rather than at the decode pace) → Finding, medium confidence. Server time
  is the first token's time after connection setup less one round trip (TCP_INFO's RTT), so a 40 ms path between
  client and server adds the same to both and cancels; the stream's span (first to last token) contains no round
  trip at all. A server that merely answers deterministically at its normal speed fails the first-token test; one
  with a prefix cache still decodes at its pace and fails the span. A repeat whose first token came late but whose
  tokens came together, while the control's streamed at the pace, is a stall (on either side: a client that reads
  late finds a generated stream already whole in its socket) or a cache slow to look up: Inconclusive, and the
  experiment sends the repeat again.

Cost and severity: the finding costs no time (0 ms; a replay is faster) and is reported at medium severity whatever
its cost, as a correctness risk: severities otherwise rank a finding's share of the typical TTFT
(:mod:`latscope.checks.severity`), which would hide a defect whose harm is that the answer was never generated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.findings import Clear, Confidence, Inconclusive, NotTested, Outcome, Severity, make_finding
from latscope.signals.cache import CacheSignal

CACHE_ID = "response-cached"

#: A replay's first token comes after at most this share of the control's server time: generation takes a prefill
#: and a decode step, a replay only a lookup. Loose, because the round trip subtracted is TCP's minimum and a path's
#: jitter stays in.
FIRST_TOKEN_SHARE = 0.5
#: A replay's stream spans at most this share of the control's (first to last token): a replay sends the stored
#: tokens together, generation at the decode pace; no round trip is in either span.
SPAN_SHARE = 0.25
#: Below this control server time (ms) a replay cannot be told from generation by its first token: the stream's
#: cadence alone decides (a replay has none).
MIN_CONTROL_SERVER_MS = 2.0
#: Below this control stream span (ms: first to last token) the stream is too short to show decode pace.
MIN_CONTROL_SPAN_MS = 2.0


@dataclass(frozen=True, slots=True)
class CachedReply:
    """One request of the caching experiment with what its response said about caching.

    Fields:
        sample: the request.
        cache: the response's cache headers (``Age``, ``X-Cache``, ``CF-Cache-Status``, ``Cache-Status`` …).
        output_sha256: hex digest of the generated text (None when it generated none or failed).
    """

    sample: RequestSample
    cache: CacheSignal = field(default_factory=CacheSignal)
    output_sha256: str | None = None


@dataclass(frozen=True, slots=True)
class CachingEvidence:
    """The caching experiment: a request, a varied one of the same size (the control), then the first again, byte
    for byte, on one connection.

    Fields:
        first: the first request. control: the varied one. repeat: the first one's exact repeat (the last one sent).
        repeats: how many times the repeat was sent (again while the check was undecided).
    """

    first: CachedReply | None = None
    control: CachedReply | None = None
    repeat: CachedReply | None = None
    repeats: int = 1


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _server_ms(reply: CachedReply) -> float | None:
    """The first token's time after connection setup less one round trip, ms (the server's share of it)."""
    sample = reply.sample
    if sample.ttft_after_setup_ms is None:
        return None
    return max(0.0, sample.ttft_after_setup_ms - (sample.rtt_ms or 0.0))


def _span_ms(reply: CachedReply) -> float:
    """First to last token of the stream, ms."""
    return sum(reply.sample.itl_ms)


def _headers(replies: dict[str, CachedReply]) -> dict[str, Any]:
    return {
        role: {"hit": r.cache.hit, "status": r.cache.status, "source": r.cache.source, "age_s": r.cache.age_s}
        for role, r in replies.items()
        if r.cache.hit is not None or r.cache.age_s is not None
    }


def check_response_cached(ev: CachingEvidence, reference: Reference | None) -> Outcome:
    """Finding when cache headers say hit, or when the repeat is a fast replay of the first (module docstring)."""
    if ev.first is None or ev.control is None or ev.repeat is None:
        return NotTested(CACHE_ID, "the caching experiment did not complete its three requests")
    replies = {"first": ev.first, "control": ev.control, "repeat": ev.repeat}
    headers = _headers(replies)
    hits = [role for role, r in replies.items() if r.cache.hit is True]
    if hits:
        r = replies[hits[0]]
        said = f"{r.cache.source}: {r.cache.status}" if r.cache.status else f"{r.cache.source}: {r.cache.age_s} s"
        return _finding(
            {"cache_headers": headers, "hit_requests": hits},
            f"the {' and '.join(hits)} request's response came from a cache ({said})",
            Confidence.HIGH,
        )
    samples = [r.sample for r in replies.values()]
    broken = failures.summarise(samples, total=len(samples))
    if broken:
        return NotTested(CACHE_ID, f"the caching experiment could not compare its requests: {broken}")
    evidence: dict[str, Any] = {"cache_headers": headers}
    misses = [role for role, r in replies.items() if r.cache.hit is False]
    if len(misses) == len(replies):
        return Clear(CACHE_ID, "the cache headers of all three requests say the origin produced them", evidence)
    if ev.first.output_sha256 is None or ev.repeat.output_sha256 is None:
        return NotTested(CACHE_ID, "the responses carried no cache headers and no text to compare")
    same = ev.first.output_sha256 == ev.repeat.output_sha256
    evidence["repeat_text_identical"] = same
    if not same:
        return Clear(CACHE_ID, "the repeated request was generated anew (its text differs from the first's)", evidence)
    control_ms, repeat_ms = _server_ms(ev.control), _server_ms(ev.repeat)
    if control_ms is None or repeat_ms is None:
        return NotTested(CACHE_ID, "the repeat's text was identical, but a first token was not timed")
    control_span, repeat_span = _span_ms(ev.control), _span_ms(ev.repeat)
    evidence.update(
        control_server_ms=_round(control_ms),
        repeat_server_ms=_round(repeat_ms),
        first_token_ratio=_round(repeat_ms / control_ms) if control_ms else None,
        control_stream_span_ms=_round(control_span),
        repeat_stream_span_ms=_round(repeat_span),
        rtt_ms=_round(ev.repeat.sample.rtt_ms),
        repeats_sent=ev.repeats,
    )
    if control_ms < MIN_CONTROL_SERVER_MS:
        return _by_cadence_alone(evidence, control_ms, control_span, repeat_span)
    paced = control_span >= MIN_CONTROL_SPAN_MS
    if repeat_ms > FIRST_TOKEN_SHARE * control_ms and paced and repeat_span <= SPAN_SHARE * control_span:
        if repeat_ms - FIRST_TOKEN_SHARE * control_ms <= MIN_CONTROL_SERVER_MS:
            # late only by the jitter a subtracted round trip leaves (a fast prefill across a path: 0.53 of a
            # control of a few ms, three sends running): the first tokens say nothing, the cadence decides
            return _by_cadence_alone(evidence, control_ms, control_span, repeat_span)
        return Inconclusive(
            CACHE_ID,
            f"the repeat came back identical with no decode pace (streamed in {repeat_span:.1f} ms against the "
            f"control's {control_span:.1f} ms), but {repeat_ms:.1f} ms after it was sent against the control's "
            f"{control_ms:.1f} ms: a stall on either side (a late read finds a generated stream already whole) or a "
            f"cache slow to look up; sent {ev.repeats} time(s)",
            evidence,
        )
    if repeat_ms > FIRST_TOKEN_SHARE * control_ms:
        return Clear(
            CACHE_ID,
            f"the repeat's text was identical but it took {repeat_ms:.1f} ms to its first token against the "
            f"control's {control_ms:.1f} ms: generated deterministically, not replayed",
            evidence,
        )
    if not paced:
        return Inconclusive(
            CACHE_ID,
            f"the repeat came back identical after {repeat_ms:.1f} ms against the control's {control_ms:.1f} ms, but "
            "the streams were too short to show whether it was decoded; a longer max_tokens would settle it",
            evidence,
        )
    if repeat_span > SPAN_SHARE * control_span:
        return Clear(
            CACHE_ID,
            f"the repeat's first token came early ({repeat_ms:.1f} ms against {control_ms:.1f} ms) but its tokens "
            f"streamed at the decode pace ({repeat_span:.1f} ms against {control_span:.1f} ms): a prefix cache, not "
            "a replayed response",
            evidence,
        )
    return _finding(
        evidence,
        f"no cache headers, but the repeat brought back the first request's exact text after {repeat_ms:.1f} ms of "
        f"server time against the control's {control_ms:.1f} ms (≤ {FIRST_TOKEN_SHARE:.0%}) and streamed it in "
        f"{repeat_span:.1f} ms against {control_span:.1f} ms (≤ {SPAN_SHARE:.0%}): replayed, not generated",
        Confidence.MEDIUM,
    )


def _by_cadence_alone(evidence: dict[str, Any], control_ms: float, control_span: float, repeat_span: float) -> Outcome:
    """The identical repeat of a server whose first token comes too soon to compare (a fast engine, or a round trip
    that TCP's RTT over-subtracts) told by its stream alone: generation streams at the decode pace, a replay at
    once."""
    if control_span < MIN_CONTROL_SPAN_MS:
        return NotTested(
            CACHE_ID,
            "the repeat's text was identical, but the control was too fast to tell a replay from generation "
            f"(control server time {control_ms:.1f} ms, below {MIN_CONTROL_SERVER_MS} ms, and its stream "
            f"{control_span:.1f} ms long)",
        )
    if repeat_span > SPAN_SHARE * control_span:
        return Clear(
            CACHE_ID,
            f"the repeat's text was identical and its tokens streamed at the decode pace ({repeat_span:.1f} ms "
            f"against the control's {control_span:.1f} ms): generated deterministically, not replayed",
            evidence,
        )
    return _finding(
        evidence,
        f"no cache headers, and the control's first token too soon to compare ({control_ms:.1f} ms of server time), "
        f"but the repeat brought back the first request's exact text streamed in {repeat_span:.1f} ms against the "
        f"control's {control_span:.1f} ms (≤ {SPAN_SHARE:.0%}): no decode pace, replayed, not generated",
        Confidence.MEDIUM,
    )


def _finding(evidence: dict[str, Any], rule: str, confidence: Confidence) -> Outcome:
    return make_finding(
        CACHE_ID,
        severity=Severity.MEDIUM,
        cost_ms=0.0,
        cost_basis="no added latency (a replay is faster): the answer was not generated for the request",
        evidence=evidence,
        rule=rule,
        confidence=confidence,
    )
