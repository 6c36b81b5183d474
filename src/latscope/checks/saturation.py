"""``capacity-saturation``: past some concurrency, requests wait for a free slot before the engine starts them.

Mechanism: the concurrency sweep sends ``c`` identical short requests at once, for growing ``c``. An engine with
room for all of them (continuous batching within its batch and KV budget) starts each at once: TTFT grows only by
the few prompt tokens the others add to the prefill step, a small fraction of one request's whole service time.
An engine out of slots makes the extra requests wait until earlier ones *finish*: their TTFT grows by a good part
of a whole request's service time, and their first token comes that long after the first tokens of their burst. So
a request waited when both hold (its TTFT beyond the lone TTFT, and its first token beyond the burst's first one by
more than a lone prefill, each by :data:`WAIT_SHARE` of a lone request's stream), a level waits when every burst
had such requests; the knee is the last level that did not wait, and that concurrency is the endpoint's capacity
here. Requests are all alike and short, so one long prompt holding others up (``queue-head-of-line``) cannot be
what is seen.

The mark is the burst's first token, not the end of another's stream: what the client sees is delivery, and a
server that queues its output between the engine and the socket (llama-cpp-python runs up to ten chunks ahead of
its writer) delivers an earlier request's last tokens after the next one's first, though the next one waited for
the whole generation; across a network the tail's arrival is paced by TCP, not by the engine, so no end of a
stream can be read from it. A continuous-batching engine that admits a burst over two steps delays the later
requests' first tokens by about a prefill, which the threshold allows for. A host stall that delays every first
token of a burst alike moves none of them apart. A wait in front of the server (a gateway's queue) delays first
tokens the same way, but the server's own clocks never see it: where the server reports its queue time
(Server-Timing ``queue``, Ollama's ``load``) and it covers little of what the waiting requests waited, they did not
wait for a slot (``gateway-queueing`` is that finding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median, percentile
from latscope.findings import Clear, Confidence, Inconclusive, NotTested, Outcome
from latscope.timeline.model import ServerPhase

SATURATION_ID = "capacity-saturation"

#: A request waited for a slot when its TTFT exceeded the lone TTFT by this share of a lone request's end-to-end
#: time: it waited for another request to finish, not for a slightly larger prefill step.
WAIT_SHARE = 0.5
#: A level waits when every round had at least this many such requests (two from this concurrency on: one request
#: held up by a host stall is not a queue).
MIN_WAITERS = 1
MIN_WAITERS_FROM = 4
MIN_WAITERS_LARGE = 2
#: The lone request's whole service time must exceed its TTFT by this much (ms) for a wait to be told from noise.
MIN_SERVICE_SPAN_MS = 10.0
#: A server's waiting-requests gauge read this many times over the sweep (diagnose scrapes every 50 ms) and never
#: above zero outweighs the client's view: an engine that admits a burst over several prefill steps spreads its
#: first tokens as a queue would (llama.cpp's llama-server on a CPU, every request running, none deferred).
MIN_GAUGE_SCRAPES = 5
#: Where the server reports its queue time, the waiting requests' reported queue time must cover at least this
#: share of what they waited beyond a lone request for the wait to have been for a slot: a request held in front of
#: the server (a gateway's queue) reaches it late and is reported as not queued at all.
MIN_REPORTED_QUEUE_SHARE = 0.25
#: The phases in which a server reports a wait for a slot (the lab's and Server-Timing's ``queue``, Ollama's ``load``).
QUEUE_PHASES = (ServerPhase.QUEUE, ServerPhase.LOAD)


@dataclass(frozen=True, slots=True)
class SaturationLevel:
    """One step of the concurrency sweep: ``concurrency`` short requests sent at once, in each of a few rounds.

    ``first_token_lags_ms`` (aligned with ``rounds``; empty when not known) gives of each request the ms from the
    earliest first token of the others in its burst to its own (None where either is missing): a request that
    waited for a slot got its first token about a whole stream after the first ones of its burst. ``set_aside``
    holds the rounds the experiment sent again because the server was busy before they began
    (:func:`latscope.checks.saturation.busy_at_start`): kept for the record, not judged.
    """

    concurrency: int
    rounds: tuple[tuple[RequestSample, ...], ...]
    first_token_lags_ms: tuple[tuple[float | None, ...], ...] = ()
    set_aside: tuple[tuple[RequestSample, ...], ...] = ()

    @property
    def samples(self) -> tuple[RequestSample, ...]:
        """Every request of every round."""
        return tuple(s for burst in self.rounds for s in burst)

    @property
    def ttfts_ms(self) -> list[float]:
        """TTFTs without connection setup of the requests that completed, every round."""
        return [s.ttft_after_setup_ms for s in self.samples if s.ok and s.ttft_after_setup_ms is not None]

    @property
    def failed(self) -> list[RequestSample]:
        """The requests that failed."""
        return [s for s in self.samples if not s.ok]


@dataclass(frozen=True, slots=True)
class SaturationEvidence:
    """The saturation experiment: a bounded concurrency sweep of short prompts (every level's connections opened
    before it is measured).

    Fields:
        prompt_tokens / max_tokens: each request's prompt (about) and tokens generated.
        levels: the steps, in increasing concurrency; the sweep stops one step after requests started to wait.
        waiting_gauge / running_gauge: the server's waiting- and running-requests gauges at their highest during
            the sweep, where its metrics had them (None: not read).
        metrics: which metrics were read (the server family), or why none were.
        batch_series: the server's running-requests gauge over the sweep (its batch size), ``(seconds since the
            sweep began, running, waiting)`` per scrape (waiting None where the server has no such gauge).
        level_starts: ``(concurrency, seconds since the sweep began)`` of each level.
    """

    prompt_tokens: int
    max_tokens: int
    levels: tuple[SaturationLevel, ...] = ()
    waiting_gauge: float | None = None
    running_gauge: float | None = None
    metrics: str | None = None
    batch_series: tuple[tuple[float, float, float | None], ...] = ()
    level_starts: tuple[tuple[int, float], ...] = ()


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def lone_rtt_ms(samples: tuple[RequestSample, ...] | list[RequestSample]) -> float | None:
    """The round trip of the lone requests' connections (median of their TCP_INFO, ms), None where unknown."""
    return median([s.rtt_ms for s in samples if s.ok and s.rtt_ms is not None])


def waiters(
    level: SaturationLevel, index: int, lone_ttft_ms: float, lone_e2e_ms: float, rtt_ms: float | None = None
) -> int:
    """Requests of the level's burst ``index`` that waited for a slot: TTFT beyond the lone TTFT by more than
    :data:`WAIT_SHARE` of a lone request's stream, and (where known) first token beyond the burst's first by that
    and the server's part of a lone TTFT (``lone_ttft_ms`` less the round trip ``rtt_ms``; all of it where the
    round trip is unknown). A continuous-batching engine that prefills a request arriving mid-step one step later
    delays its first token by about a prefill; one out of slots, by a whole request."""
    wait = WAIT_SHARE * (lone_e2e_ms - lone_ttft_ms)
    prefill = max(0.0, lone_ttft_ms - (rtt_ms or 0.0))
    burst = level.rounds[index]
    lags = level.first_token_lags_ms[index] if index < len(level.first_token_lags_ms) else (None,) * len(burst)
    return sum(
        1
        for s, lag in zip(burst, lags, strict=True)
        if s.ok
        and s.ttft_after_setup_ms is not None
        and s.ttft_after_setup_ms > lone_ttft_ms + wait
        and (lag is None or lag > prefill + wait)
    )


def needed_waiters(concurrency: int) -> int:
    """Requests of a burst of ``concurrency`` that must have waited for the round to count as waiting."""
    return MIN_WAITERS_LARGE if concurrency >= MIN_WAITERS_FROM else MIN_WAITERS


def busy_at_start(level: SaturationLevel, index: int, lone_ttft_ms: float, lone_e2e_ms: float) -> bool:
    """The level's burst ``index`` got its earliest first token later than a lone request by more than
    :data:`WAIT_SHARE` of a lone stream. The burst's first request cannot have waited for a slot that another of
    the burst held (none had started), so the server or the host was busy with something else when the burst
    arrived, and a round without waiters shows nothing about slots (seen on llama-cpp-python: a burst whose first
    token came late, its second soon after)."""
    ttfts = [s.ttft_after_setup_ms for s in level.rounds[index] if s.ok and s.ttft_after_setup_ms is not None]
    return bool(ttfts) and min(ttfts) > lone_ttft_ms + WAIT_SHARE * (lone_e2e_ms - lone_ttft_ms)


def level_waited(level: SaturationLevel, lone_ttft_ms: float, lone_e2e_ms: float, rtt_ms: float | None = None) -> bool:
    """Every round of the level had requests that waited for a slot (:func:`waiters`; at least
    :data:`MIN_WAITERS_LARGE` from :data:`MIN_WAITERS_FROM` concurrent requests on)."""
    needed = needed_waiters(level.concurrency)
    counts = [waiters(level, i, lone_ttft_ms, lone_e2e_ms, rtt_ms) for i in range(len(level.rounds))]
    return bool(counts) and all(n >= needed for n in counts)


def reported_queue_share(level: SaturationLevel, lone_ttft_ms: float, lone_e2e_ms: float) -> float | None:
    """The share of the level's waiting requests' wait (TTFT beyond the lone TTFT by more than :data:`WAIT_SHARE`
    of a lone stream) that the server reported as queue time; None when it reported none for them."""
    threshold = lone_ttft_ms + WAIT_SHARE * (lone_e2e_ms - lone_ttft_ms)
    waited = 0.0
    queued = 0.0
    reported = False
    for s in level.samples:
        if not s.ok or s.ttft_after_setup_ms is None or s.ttft_after_setup_ms <= threshold:
            continue
        phases = [s.server_ms[p] for p in QUEUE_PHASES if p in s.server_ms]
        if not phases:
            continue
        reported = True
        waited += s.ttft_after_setup_ms - lone_ttft_ms
        queued += sum(phases)
    return queued / waited if reported and waited > 0 else None


def _quietest(level: SaturationLevel) -> float:
    """The lowest mean TTFT of the level's rounds (ms)."""
    means = []
    for burst in level.rounds:
        ttfts = [s.ttft_after_setup_ms for s in burst if s.ok and s.ttft_after_setup_ms is not None]
        if ttfts:
            means.append(_mean(ttfts))
    return min(means) if means else _mean(level.ttfts_ms)


@dataclass(frozen=True, slots=True)
class _Lone:
    """A lone request's fastest TTFT and end-to-end time (ms, connection setup excluded) and its connection's round
    trip (ms, None where not reported): what the levels are measured against."""

    ttft: float
    e2e: float
    rtt: float | None


def check_capacity_saturation(ev: SaturationEvidence, reference: Reference | None) -> Outcome:
    """Finding when some concurrency of the sweep made requests wait (:func:`level_waited`); the capacity is the
    level before it, the cost the mean TTFT that level added over the one before."""
    samples = [s for level in ev.levels for s in level.samples]
    broken = failures.too_many_failed(samples)
    if broken:
        return NotTested(SATURATION_ID, f"the target misbehaved during the concurrency sweep: {broken}")
    lone_level = next((lv for lv in ev.levels if lv.concurrency == 1), None)
    if lone_level is None or not lone_level.ttfts_ms or len(ev.levels) < 2:
        reason = failures.summarise(samples) or "the sweep did not get past one request"
        return NotTested(SATURATION_ID, f"the concurrency sweep could not measure: {reason}")
    lone = _lone(lone_level)
    rows = _rows(ev, lone)
    evidence = _evidence(ev, rows, lone)
    if lone.e2e - lone.ttft < MIN_SERVICE_SPAN_MS:
        return NotTested(
            SATURATION_ID,
            f"a lone request streams its {ev.max_tokens} tokens in {lone.e2e - lone.ttft:.1f} ms: too little service "
            "time to tell waiting for a slot from noise",
        )
    alone_waited = sum(sum(row["waited"]) for row in rows if row["concurrency"] == 1)
    if alone_waited:
        # nothing waits for a slot alone: the target or the host slowed while the sweep ran, and every later level
        # is measured against a lone request it no longer serves at that pace
        return Inconclusive(
            SATURATION_ID,
            f"{alone_waited} request(s) sent one at a time came as late as a request waiting for a slot: the target "
            "or this host slowed during the concurrency sweep, so no level can be told apart from it",
            evidence,
        )
    waited = next(
        (lv for lv in ev.levels if lv.concurrency > 1 and level_waited(lv, lone.ttft, lone.e2e, lone.rtt)), None
    )
    top = ev.levels[-1].concurrency
    if waited is None:
        return Clear(
            SATURATION_ID,
            f"up to {top} concurrent short requests started without waiting for a slot (TTFT p90 "
            f"{rows[-1]['ttft_p90_ms']} ms vs {lone.ttft:.1f} ms alone)",
            evidence,
        )
    not_for_a_slot = _not_for_a_slot(ev, waited, lone, evidence)
    if not_for_a_slot is not None:
        return not_for_a_slot
    return _finding(ev, reference, waited, lone, evidence)


def _lone(level: SaturationLevel) -> _Lone:
    """The lone request's costs, from the sweep's level of one."""
    lone_ttft = min(level.ttfts_ms)
    e2es = [s.e2e_after_setup_ms for s in level.samples if s.ok and s.e2e_after_setup_ms is not None]
    lone_e2e = min(e2es) if e2es else lone_ttft
    return _Lone(lone_ttft, lone_e2e, lone_rtt_ms(level.samples))


def _rows(ev: SaturationEvidence, lone: _Lone) -> list[dict[str, Any]]:
    """Each level's TTFTs, failures and waiters per round."""
    return [
        {
            "concurrency": lv.concurrency,
            "ttft_p50_ms": _round(median(lv.ttfts_ms)),
            "ttft_p90_ms": _round(percentile(lv.ttfts_ms, 90.0)),
            "ttft_max_ms": _round(max(lv.ttfts_ms, default=None) if lv.ttfts_ms else None),
            "failed": len(lv.failed),
            "waited": [waiters(lv, i, lone.ttft, lone.e2e, lone.rtt) for i in range(len(lv.rounds))],
            **({"set_aside": len(lv.set_aside)} if lv.set_aside else {}),
        }
        for lv in ev.levels
    ]


def _evidence(ev: SaturationEvidence, rows: list[dict[str, Any]], lone: _Lone) -> dict[str, Any]:
    """The levels, the lone request and the server's gauges."""
    return {
        "levels": rows,
        "lone_ttft_ms": _round(lone.ttft),
        "lone_e2e_ms": _round(lone.e2e),
        "lone_rtt_ms": _round(lone.rtt),
        "max_tokens": ev.max_tokens,
        "waiting_gauge_max": ev.waiting_gauge,
        "running_gauge_max": ev.running_gauge,
        "metrics": ev.metrics,
        "batch_series": [list(point) for point in ev.batch_series],
        "level_starts": [list(start) for start in ev.level_starts],
    }


def _not_for_a_slot(
    ev: SaturationEvidence, waited: SaturationLevel, lone: _Lone, evidence: dict[str, Any]
) -> Clear | None:
    """Clear when the server's own clocks or queue gauge say the late requests did not wait for a slot, else None."""
    share = reported_queue_share(waited, lone.ttft, lone.e2e)
    evidence["reported_queue_share"] = _round(share)
    if share is not None and share < MIN_REPORTED_QUEUE_SHARE:
        # the server's own clocks say the waiting requests were hardly queued: they waited before reaching it
        return Clear(
            SATURATION_ID,
            f"at {waited.concurrency} concurrent requests some first tokens came late, but the server reported queue "
            f"time for only {share:.0%} of that wait: the requests waited before reaching the server (a queue in "
            "front of it, see gateway-queueing), not for a slot",
            evidence,
        )
    scrapes = len(ev.batch_series)
    if ev.waiting_gauge == 0 and scrapes >= MIN_GAUGE_SCRAPES:
        # the server's own queue, read throughout, never held a request: the first tokens spread for another reason
        return Clear(
            SATURATION_ID,
            f"at {waited.concurrency} concurrent requests some first tokens came a prefill and half a stream after "
            f"their burst's first, but the server's waiting-requests gauge stayed at 0 over {scrapes} scrapes of the "
            "sweep: the engine admitted the burst over several steps (prefill), nothing waited for a slot",
            evidence,
        )
    return None


def _finding(
    ev: SaturationEvidence,
    reference: Reference | None,
    waited: SaturationLevel,
    lone: _Lone,
    evidence: dict[str, Any],
) -> Outcome:
    """The finding: the capacity is the level before ``waited``, the cost the mean TTFT ``waited`` added."""
    index = ev.levels.index(waited)
    knee = ev.levels[index - 1].concurrency
    # the requests that did not wait had a slot: the capacity, as far as this level shows it
    started = min(
        waited.concurrency - waiters(waited, i, lone.ttft, lone.e2e, lone.rtt) for i in range(len(waited.rounds))
    )
    capacity = max(knee, started)
    # one step past the knee against the knee itself: both levels pay what concurrency costs without waiting (a
    # larger prefill step, the host's and the network's share of a burst); only the waiting differs
    # each level at its quietest round: a busy host only ever adds time to a burst
    control = _quietest(ev.levels[index - 1])
    added = _quietest(waited) - control
    evidence.update(
        {"capacity": capacity, "knee": knee, "waited_at": waited.concurrency, "ttft_added_ms": _round(added)}
    )
    confirm = ev.waiting_gauge is not None and ev.waiting_gauge > 0
    gauge = f"; the server's waiting-requests gauge reached {ev.waiting_gauge:g}" if confirm else ""
    if ev.running_gauge is not None and confirm:
        gauge += f" with {ev.running_gauge:g} running"
    return costed_finding(
        SATURATION_ID,
        added,
        reference,
        cost_basis=(
            f"ms of TTFT the average request gained at {waited.concurrency} concurrent requests, one step past the "
            f"knee at {knee} (mean TTFT {control + added:.1f} ms vs {control:.1f} ms at {knee}, each level's quietest "
            "burst): the wait for a slot that requests beyond the capacity pay, shared over the burst"
        ),
        evidence=evidence,
        rule=(
            f"at {waited.concurrency} concurrent short requests, in every round, some waited for others to finish "
            f"(TTFT beyond a lone request's by more than {WAIT_SHARE:.0%} of its {lone.e2e - lone.ttft:.0f} ms "
            f"stream); capacity about {capacity} concurrent requests (none waited at {knee}){gauge}"
        ),
        confidence=Confidence.HIGH if confirm or len(waited.ttfts_ms) >= 4 else Confidence.MEDIUM,
    )
