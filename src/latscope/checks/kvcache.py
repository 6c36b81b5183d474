"""``kv-cache-pressure``: the KV cache runs out, and decoding sequences are preempted and recomputed mid-stream.

Mechanism: long streams sent at once, more than the cache holds as they grow. An engine with room for them decodes
each at its own steady cadence. An engine out of KV blocks takes them from a running sequence (vLLM, SGLang, the
lab): the victim's stream stops mid-decode until blocks come back, then its prompt and everything generated so far
are prefilled again before it goes on. So a stream under pressure shows a *stall*: a gap between tokens far above its
own cadence and longer than the prefill of every stream of the burst (what admitting the others can hold it up by) —
measured against the same streams sent one at a time in the same run, which must not stall. The server's own
preemption counter and KV-usage gauge confirm it where its metrics have them; they also tell a burst that never
came near filling the cache, where nothing was tested. Where the counter says preemptions happened, a stall need
only outlast what a victim pays at least (recomputing its own prompt: one stream's prefill) and the longest gap the
controls showed: an engine that readmits a victim as soon as a neighbour ends (vLLM) holds it for less than the
whole burst's prefill. The cost is the stall time measured, per preemption the
server counted: as many of the burst's longest holds as it counted (a victim readmitted at once holds about nothing,
and one held just under the threshold is still priced), or per stalled stream without metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median
from latscope.findings import Clear, Confidence, Inconclusive, NotTested, Outcome

KV_ID = "kv-cache-pressure"

#: A stall is a gap at least this many times the stream's own median inter-token gap …
STALL_FACTOR = 10.0
#: … at least the prefill of the whole burst (the control's TTFT × the streams sent at once: what admitting every
#: other stream can hold a step up by, chunked or not) …
#: … and at least this long (ms).
MIN_STALL_MS = 30.0
#: Streams of the burst that must stall for a finding when the server's metrics do not count a preemption (one
#: could be a host stall); one suffices when they do.
MIN_STALLED = 2
#: Share of a stall window another stream's token arrivals must span for it to have gone on decoding meanwhile.
WENT_ON_SHARE = 0.5
#: KV usage (0–1) at which the cache counts as full.
FULL_USAGE = 0.9


@dataclass(frozen=True, slots=True)
class KvEvidence:
    """The KV-cache experiment: long streams alone, then many at once.

    Fields:
        prompt_tokens / max_tokens / concurrency: each stream's prompt (about) and length, and the burst's size.
        alone: the same streams one at a time (the control: how a stream flows without pressure).
        burst: ``concurrency`` of them sent at once.
        preemptions: the server's preemption counter's increase over the burst (None: not read).
        kv_usage_max: the server's KV-cache usage gauge (0–1) at its highest during the burst (None: not read).
        metrics: which metrics were read (the server family), or why none were.
        skipped: why the burst was not sent (the target too slow for a bounded burst), None when it was.
    """

    prompt_tokens: int
    max_tokens: int
    concurrency: int
    alone: tuple[RequestSample, ...] = ()
    burst: tuple[RequestSample, ...] = ()
    preemptions: float | None = None
    kv_usage_max: float | None = None
    metrics: str | None = None
    skipped: str | None = None


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _cadence_and_limit(sample: RequestSample, threshold_ms: float) -> tuple[float, float] | None:
    """A stream's own cadence (median gap, ms) and the gap (ms) from which one of its gaps is a stall: at least
    ``threshold_ms`` and :data:`STALL_FACTOR` × that cadence. None without gaps."""
    cadence = median(sample.itl_ms)
    return None if cadence is None else (cadence, max(threshold_ms, STALL_FACTOR * cadence))


def stall_ms(sample: RequestSample, threshold_ms: float) -> float:
    """Time (ms) a stream spent in stalls: over every gap at least ``threshold_ms`` and :data:`STALL_FACTOR` × its
    own median gap, the gap beyond that median."""
    found = _cadence_and_limit(sample, threshold_ms)
    if found is None:
        return 0.0
    cadence, limit = found
    return sum(gap - cadence for gap in sample.itl_ms if gap >= limit)


def stall_gaps(samples: list[RequestSample], threshold_ms: float) -> int:
    """Gaps of ``samples`` that are stalls (see :func:`stall_ms`)."""
    count = 0
    for sample in samples:
        found = _cadence_and_limit(sample, threshold_ms)
        if found is not None:
            count += sum(1 for gap in sample.itl_ms if gap >= found[1])
    return count


def preemption_holds_ms(samples: list[RequestSample], count: int) -> list[float]:
    """The ``count`` longest holds (ms) over every gap of ``samples``, each beyond its own stream's median gap (0 for
    a gap under it), longest first: what ``count`` preemptions held their victims for, the rest of the gaps being a
    stream's own cadence or a neighbour's prefill."""
    holds: list[float] = []
    for sample in samples:
        cadence = median(sample.itl_ms)
        if cadence is not None:
            holds.extend(max(0.0, gap - cadence) for gap in sample.itl_ms)
    return sorted(holds, reverse=True)[: max(1, count)]


def stall_windows(sample: RequestSample, threshold_ms: float) -> list[tuple[float, float]]:
    """The stalls of ``sample`` (see :func:`stall_ms`) as windows of the client's clock: (last token before, first
    token after), ms. Empty for a sample without arrival times."""
    found = _cadence_and_limit(sample, threshold_ms)
    if found is None or len(sample.token_at_ms) < 2:
        return []
    limit = found[1]
    return [(a, b) for a, b in pairwise(sample.token_at_ms) if b - a >= limit]


def stalled_alone(burst: list[RequestSample], threshold_ms: float) -> list[bool]:
    """For each stream of ``burst``: whether it stalled while another stream of the burst went on receiving tokens
    (:func:`_went_on`).

    A preempted sequence stops on its own: the engine took its blocks and goes on decoding the others. When every
    stream stops at once, something in front of all of them held them (the host, a gateway's event loop, the
    client), which a preemption does not. A stream whose arrival times are unknown counts as stalled alone when it
    stalled at all (nothing can be said against it)."""
    windows = [stall_windows(s, threshold_ms) for s in burst]
    alone = []
    for i, (sample, own) in enumerate(zip(burst, windows, strict=True)):
        if not sample.token_at_ms:
            alone.append(stall_ms(sample, threshold_ms) > 0)
            continue
        others = [other.token_at_ms for j, other in enumerate(burst) if j != i]
        alone.append(any(_went_on(times, a, b) for a, b in own for times in others))
    return alone


def _went_on(times: tuple[float, ...], start: float, end: float) -> bool:
    """Whether a stream with token arrivals ``times`` kept receiving tokens through the window (``start``, ``end``),
    ms: its arrivals inside it span at least :data:`WENT_ON_SHARE` of it. A stream held with the others has its
    arrivals inside at one edge only (its last token before the hold, or its held-back tokens flushed at its end)."""
    inside = [t for t in times if start < t < end]
    return bool(inside) and inside[-1] - inside[0] >= WENT_ON_SHARE * (end - start)


@dataclass(frozen=True, slots=True)
class _Burst:
    """What the check reads of the streams: ``load`` (the burst, in words), the control and burst streams that
    completed, the stall threshold (ms: the whole burst's prefill), the threshold a stream's stall is judged by
    (``victim_threshold``, ms: the same, or, where the server counted preemptions, one stream's prefill or the
    longest gap a control showed, whichever is longer), each
    control's and each burst stream's stall (ms) by that one, and whether the server's metrics counted a preemption
    (``preempted``) or a full cache (``full``)."""

    load: str
    alone: list[RequestSample]
    burst: list[RequestSample]
    threshold: float
    victim_threshold: float
    control: list[float]
    stalls: list[float]
    preempted: bool
    full: bool


def check_kv_cache_pressure(ev: KvEvidence, reference: Reference | None) -> Outcome:
    """Finding when streams of the burst stalled mid-decode (:data:`MIN_STALLED`, or one that the server's preemption
    counter confirms) while none of the control streams did; the cost is the stall time per preempted stream (per
    stalled stream without a preemption count)."""
    unmeasured = _unmeasured(ev)
    if unmeasured is not None:
        return unmeasured
    b = _burst(ev)
    stalled = [v for v in b.stalls if v > 0]
    evidence = _evidence(ev, b, stalled)
    not_the_cache = _not_the_cache(ev, b, stalled, evidence)
    if not_the_cache is not None:
        return not_the_cache
    # one stalled stream is enough when the server says it preempted; without that, one could be a host stall, and
    # stalls every stream shared are not a preemption's
    needed = 1 if b.preempted else MIN_STALLED
    if not b.preempted and len(stalled) >= needed:
        lone = stalled_alone(b.burst, b.threshold)
        evidence["stalled_alone"] = sum(lone)
        if sum(lone) < needed:
            return Inconclusive(
                KV_ID,
                f"{len(stalled)} of {len(b.burst)} streams stalled mid-decode, but every stream stopped at once (only "
                f"{sum(lone)} stalled while another went on): something in front of them all held them (the host, "
                "a gateway, the client), not a preempted sequence; no server metrics say whether the cache filled",
                evidence,
            )
        stalled = [v for v, by_itself in zip(b.stalls, lone, strict=True) if v > 0 and by_itself]
    if len(stalled) < needed:
        return _too_few_stalled(ev, b, stalled, evidence)
    if ev.preemptions is not None and not b.preempted and not b.full:
        return Inconclusive(
            KV_ID,
            f"{len(stalled)} of {len(b.burst)} streams stalled mid-decode, but the server reports no preemption and KV "
            f"usage at most {ev.kv_usage_max if ev.kv_usage_max is not None else 'unknown'}: something else held them",
            evidence,
        )
    return _finding(ev, reference, b, stalled, evidence)


def _unmeasured(ev: KvEvidence) -> NotTested | None:
    """Why the burst cannot be judged (not sent, a misbehaving target, too few streams), None when it can."""
    if ev.skipped is not None:
        return NotTested(KV_ID, f"the burst was not sent: {ev.skipped}")
    samples = (*ev.alone, *ev.burst)
    broken = failures.too_many_failed(samples)
    if broken:
        return NotTested(KV_ID, f"the target misbehaved during the KV-cache experiment: {broken}")
    alone = [s for s in ev.alone if s.ok and s.itl_ms]
    burst = [s for s in ev.burst if s.ok and s.itl_ms]
    if not alone or len(burst) < MIN_STALLED:
        reason = failures.summarise(samples) or "too few streams completed"
        return NotTested(KV_ID, f"the KV-cache experiment could not measure: {reason}")
    return None


def _burst(ev: KvEvidence) -> _Burst:
    """The completed streams, the stall threshold and every stream's stall."""
    alone = [s for s in ev.alone if s.ok and s.itl_ms]
    burst = [s for s in ev.burst if s.ok and s.itl_ms]
    # the control's TTFT less the round trip it paid: the prefill alone, on a remote target too
    prefill = min(
        (max(0.0, s.ttft_after_setup_ms - (s.rtt_ms or 0.0)) for s in alone if s.ttft_after_setup_ms is not None),
        default=0.0,
    )
    threshold = max(MIN_STALL_MS, ev.concurrency * prefill)
    preempted = ev.preemptions is not None and ev.preemptions > 0
    # Where the server counted preemptions, a stall is judged by what a victim pays at least: recomputing its own
    # prompt (one stream's prefill). An engine that readmits its victims as soon as another stream ends (vLLM:
    # streams of one burst end together) holds them for less than the whole burst's prefill, which the threshold
    # asks only to tell a preemption from admitting the others when nothing counts preemptions.
    # The controls, one at a time, show the longest gap this host and target leave in a stream under no pressure at
    # all: a victim's stall must be longer still.
    noise = math.nextafter(max((gap for s in alone for gap in s.itl_ms), default=0.0), math.inf)
    victim = max(MIN_STALL_MS, prefill, noise) if preempted else threshold
    return _Burst(
        load=f"{ev.concurrency} streams of {ev.prompt_tokens} + {ev.max_tokens} tokens at once",
        alone=alone,
        burst=burst,
        threshold=threshold,
        victim_threshold=victim,
        control=[stall_ms(s, victim) for s in alone],
        stalls=[stall_ms(s, victim) for s in burst],
        preempted=preempted,
        full=ev.kv_usage_max is not None and ev.kv_usage_max >= FULL_USAGE,
    )


def _evidence(ev: KvEvidence, b: _Burst, stalled: list[float]) -> dict[str, Any]:
    """The load, the stalls and the server's metrics."""
    return {
        "load": b.load,
        "prompt_tokens": ev.prompt_tokens,
        "max_tokens": ev.max_tokens,
        "concurrency": ev.concurrency,
        "stall_threshold_ms": _round(b.threshold),
        "victim_threshold_ms": _round(b.victim_threshold),
        "streams": len(b.burst),
        "stalled_streams": len(stalled),
        "stall_ms": [_round(v) for v in b.stalls],
        "control_stall_ms": [_round(v) for v in b.control],
        "cadence_alone_ms": _round(median([g for s in b.alone for g in s.itl_ms])),
        "preemptions": ev.preemptions,
        "kv_usage_max": ev.kv_usage_max,
        "metrics": ev.metrics,
    }


def _not_the_cache(
    ev: KvEvidence, b: _Burst, stalled: list[float], evidence: dict[str, Any]
) -> NotTested | Inconclusive | None:
    """Not tested when the cache never came near full, inconclusive when the controls stalled too; else None."""
    if ev.kv_usage_max is not None and not b.full and not b.preempted:
        # the situation the experiment sets up never happened: whatever stalled, it was not a full cache
        seen = f"; {len(stalled)} stream(s) stalled for other reasons" if stalled else ""
        return NotTested(
            KV_ID,
            f"{b.load} never came near filling the KV cache (usage peaked at {ev.kv_usage_max:.0%}, no preemption): "
            f"this load does not test it{seen}",
        )
    if any(v > 0 for v in b.control):
        return Inconclusive(KV_ID, "streams stalled even one at a time: the stalls are not the cache's", evidence)
    return None


def _too_few_stalled(ev: KvEvidence, b: _Burst, stalled: list[float], evidence: dict[str, Any]) -> Clear | NotTested:
    """Too few streams stalled: clear when the cache was full, else not tested."""
    if b.full or b.preempted:
        what = f"{ev.preemptions:g} preemption(s)" if b.preempted else f"usage peaked at {ev.kv_usage_max:.0%}"
        stalls_seen = f"only {len(stalled)} stream stalled" if stalled else "no stream stalled"
        return Clear(KV_ID, f"{b.load}: the cache was full ({what}) but {stalls_seen} mid-decode", evidence)
    return NotTested(KV_ID, f"no stream stalled at {b.load}, and no KV metrics say whether the cache was near full")


def _finding(
    ev: KvEvidence, reference: Reference | None, b: _Burst, stalled: list[float], evidence: dict[str, Any]
) -> Outcome:
    """The finding: the stall time per preempted stream (per stalled stream without a preemption count)."""
    preempted, full, burst, load = b.preempted, b.full, b.burst, b.load
    if preempted and ev.preemptions is not None:
        # every preemption holds its victim once: the server's count says how many of the burst's longest holds are
        # preemptions, the threshold no longer needed (a hold just under it is still one; a victim readmitted at
        # once holds about nothing)
        priced = preemption_holds_ms(burst, max(stall_gaps(burst, b.threshold), round(ev.preemptions)))
        evidence["priced_holds_ms"] = [_round(v) for v in priced]
        cost = sum(priced) / len(priced)
        per = (
            f"the {len(priced)} longest holds of the burst beyond their stream's cadence, as many as the "
            f"{ev.preemptions:g} preemption(s) the server counted (or the stalls seen, if more)"
        )
    else:
        cost = sum(stalled) / len(stalled)
        per = f"the mean over the {len(stalled)} streams that stalled"
    confirm = (
        f"; the server counted {ev.preemptions:g} preemption(s)"
        if preempted
        else (f"; KV usage reached {ev.kv_usage_max:.0%}" if full else "")
    )
    return costed_finding(
        KV_ID,
        cost,
        reference,
        cost_basis=(
            f"ms a preempted stream spent stopped mid-decode: {per}; a stall is a gap beyond the stream's own "
            f"cadence over {b.victim_threshold:.0f} ms and {STALL_FACTOR:g}× that cadence"
        ),
        evidence=evidence,
        rule=(
            f"{len(stalled)} of {len(burst)} streams stalled mid-decode at {load}, none of {len(b.alone)} alone"
            f"{confirm}"
        ),
        confidence=Confidence.HIGH if preempted or full else Confidence.MEDIUM,
    )
