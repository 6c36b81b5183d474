"""``queue-head-of-line``: short requests wait behind long prefills.

Mechanism: a few long-prompt requests are sent, then a short one just after them. A scheduler that lets the short
request go first (shortest-first, priority, deadline) or that interleaves prefill in chunks holds it for at most the
one step already running: its TTFT grows by at most about one long prefill. A FIFO scheduler without chunked
prefill makes it wait for every long prefill ahead of it: its TTFT grows by several. So the check compares the short
request's TTFT inflation with the long requests' own prefill time, both measured in this run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median, robust_sd
from latscope.findings import CATALOGUE, Clear, Confidence, Inconclusive, NotTested, Outcome

QUEUE_ID = "queue-head-of-line"

#: Inflation of at least this many long prefills: the short request waited for more than the step that was running
#: when it arrived, i.e. behind queued long requests (with 3 in flight, FIFO gives ≈ 3).
HOL_FINDING_RATIO = 1.75
#: Inflation of at most this many long prefills: no more than the running step held it (shortest-first / chunked).
HOL_CLEAR_RATIO = 1.25
#: The test needs at least two long requests in flight: with one, FIFO and shortest-first both wait one step.
MIN_LONGS_PER_ROUND = 2
#: A long prompt must prefill for at least this many short TTFTs, and at least MIN_PREFILL_MS, for the test to
#: separate queueing from noise.
MIN_PREFILL_FACTOR = 3.0
MIN_PREFILL_MS = 10.0
#: The inflation must stand this many noise standard deviations (of the short TTFTs) above zero.
NOISE_Z = 3.0
#: The server's own queue-time report confirms the finding when it covers at least this share of the inflation.
CONFIRM_SHARE = 0.5
#: Long requests of a round whose prefills overlapped this little (long prefills in parallel, from the last one's
#: TTFT) were served one at a time: a single slot, no batching. Halfway between serial (1) and two at once (2).
SERIAL_MAX_PARALLEL = 1.5


@dataclass(frozen=True, slots=True)
class QueueEvidence:
    """The queueing experiment. TTFTs are ``ttft_after_setup_ms`` (the client's connection setup excluded).

    Fields:
        short_prompt_tokens / long_prompt_tokens: prompt sizes used (about; the server adds its template).
        longs_per_round: long requests in flight while each short one is sent.
        short_alone_ms: short TTFTs with nothing else in flight.
        long_alone_ms: long TTFTs with nothing else in flight (their prefill, plus the short's fixed costs).
        short_contended_ms: short TTFTs sent while ``longs_per_round`` long requests were in flight.
        server_queue_ms: what the server reported as queue time for the contended short requests (may be empty).
        long_contended_ms: per round, the TTFTs of its long requests (how the server worked through them).
        failures: requests that failed, but for the long prompts sent alone.
        long_alone_failures: long prompts sent alone (sizing the long prompt, and its repeats) that failed; a
            refusal among them (``RequestSample.refused``: a context too short) is the sizing at work.
        head_start_ms: per contended round (aligned with ``short_contended_ms``; empty when unknown), how long the
            first long request had been inside the server when the short one arrived: the client's lead after it saw
            the long one acknowledged, plus one round trip.
        rounds_not_arrived: rounds left out because their long requests had not all reached the server in time.
        arrival_verified: every counted round saw its long requests acknowledged (False where the platform could
            only see them written).
        note: how the long prompt was sized (halved after a rejection, capped …).
    """

    short_prompt_tokens: int
    long_prompt_tokens: int
    longs_per_round: int
    short_alone_ms: tuple[float, ...] = ()
    long_alone_ms: tuple[float, ...] = ()
    short_contended_ms: tuple[float, ...] = ()
    server_queue_ms: tuple[float, ...] = ()
    failures: tuple[RequestSample, ...] = ()
    note: str | None = None
    long_contended_ms: tuple[tuple[float, ...], ...] = ()
    long_alone_failures: tuple[RequestSample, ...] = ()
    head_start_ms: tuple[float, ...] = ()
    rounds_not_arrived: int = 0
    arrival_verified: bool = True

    @property
    def all_failures(self) -> tuple[RequestSample, ...]:
        """Every failed request of the experiment."""
        return self.long_alone_failures + self.failures


@dataclass(frozen=True, slots=True)
class _Waits:
    """What the short requests waited behind the long ones (ms).

    ``short_alone`` / ``long_alone``: the fastest TTFTs with nothing else in flight; ``contended``: the median short
    TTFT behind long requests; ``prefill``: one long prefill; ``inflation``: contended − short alone; ``waits``: each
    round's wait plus its head start; ``held``: their median; ``head``: the median head start; ``alone_noise``: the
    uncontended short TTFTs' robust SD; ``noise``: the larger of it and the waits'.
    """

    short_alone: float
    long_alone: float
    contended: float
    prefill: float
    inflation: float
    waits: list[float]
    held: float
    head: float
    alone_noise: float
    noise: float

    @property
    def ratio(self) -> float:
        """The wait in long prefills."""
        return self.held / self.prefill


def check_queue_head_of_line(ev: QueueEvidence, reference: Reference | None) -> Outcome:
    """Finding when a short request's TTFT inflation behind ``longs_per_round`` long requests is at least
    :data:`HOL_FINDING_RATIO` long prefills; clear at most :data:`HOL_CLEAR_RATIO`."""
    unmeasured = _unmeasured(ev)
    if unmeasured is not None:
        return unmeasured
    w = _waits(ev)
    evidence = _evidence(ev, w)
    undecided = _undecided(ev, w, evidence)
    if undecided is not None:
        return undecided
    return _finding(ev, reference, w, evidence)


def _unmeasured(ev: QueueEvidence) -> NotTested | Inconclusive | None:
    """Why the rounds cannot be judged (no long prompt accepted or arrived, too few requests, a misbehaving target,
    too few long requests in flight), None when they can."""
    if len(ev.short_alone_ms) >= 2 and not ev.long_alone_ms:
        refused = [f for f in ev.long_alone_failures if f.refused]
        if refused and len(refused) == len(ev.long_alone_failures):
            return NotTested(
                QUEUE_ID,
                f"the server refused every long prompt, down to about {ev.long_prompt_tokens} tokens (its context "
                f"is shorter): no long prefill to queue behind ({failures.describe(refused[-1])})",
            )
    if len(ev.short_alone_ms) >= 2 and ev.long_alone_ms and not ev.short_contended_ms and ev.rounds_not_arrived:
        return Inconclusive(
            QUEUE_ID,
            f"in {ev.rounds_not_arrived} round(s) the long requests had not all reached the server (their bytes "
            "acknowledged) before the short one was due: nothing is known of a queue they were never in; a target "
            "this slow to receive a long prompt needs a longer wait",
        )
    if len(ev.short_alone_ms) < 2 or not ev.long_alone_ms or not ev.short_contended_ms:
        reason = failures.summarise(ev.all_failures) or "too few requests completed"
        return NotTested(QUEUE_ID, f"the queueing experiment could not measure: {reason}")
    # a long prompt refused for its length is the sizing at work, not misbehaviour
    unexpected = [f for f in ev.long_alone_failures if not f.refused] + list(ev.failures)
    completed = len(ev.short_alone_ms) + len(ev.long_alone_ms) + len(ev.short_contended_ms) * (1 + ev.longs_per_round)
    broken = failures.too_many_failed(unexpected, ok_elsewhere=completed)
    if broken:
        return NotTested(QUEUE_ID, f"the target misbehaved during the queueing experiment: {broken}")
    if ev.longs_per_round < MIN_LONGS_PER_ROUND:
        return NotTested(QUEUE_ID, f"only {ev.longs_per_round} long request(s) could be kept in flight at once")
    return None


def _waits(ev: QueueEvidence) -> _Waits:
    """The uncontended costs and the rounds' waits."""
    # the uncontended TTFTs at their fastest: a busy host only ever adds time to a request, so the fastest of a few
    # is the server's own cost, where a median of two or three follows the host's load; the contended TTFTs at their
    # median (their spread is where in the running prefill the short request arrived)
    short_alone = min(ev.short_alone_ms)
    long_alone = min(ev.long_alone_ms)
    contended = median(ev.short_contended_ms)
    assert short_alone is not None and long_alone is not None and contended is not None
    prefill = long_alone - short_alone
    inflation = contended - short_alone
    # What a queue holds a short request for is counted from the first long request's arrival: by the time the short
    # one arrived the server had been working on it for its head start (about one round trip on a remote target).
    # Each round's wait plus its head start is what the check measures in long prefills.
    rounds = len(ev.short_contended_ms)
    heads = ev.head_start_ms if len(ev.head_start_ms) == rounds else (0.0,) * rounds
    waits = [c - short_alone + h for c, h in zip(ev.short_contended_ms, heads, strict=True)]
    held = median(waits)
    head = median(heads)
    assert held is not None and head is not None
    alone_noise = robust_sd(ev.short_alone_ms) or 0.0
    noise = max(alone_noise, robust_sd(waits) or 0.0)
    return _Waits(short_alone, long_alone, contended, prefill, inflation, waits, held, head, alone_noise, noise)


def _evidence(ev: QueueEvidence, w: _Waits) -> dict[str, Any]:
    """The uncontended and contended TTFTs, and how the rounds were run."""
    evidence: dict[str, Any] = {
        "short_prompt_tokens": ev.short_prompt_tokens,
        "long_prompt_tokens": ev.long_prompt_tokens,
        "longs_per_round": ev.longs_per_round,
        "short_ttft_alone_ms_fastest": round(w.short_alone, 3),
        "long_ttft_alone_ms_fastest": round(w.long_alone, 3),
        "long_prefill_ms": round(w.prefill, 3),
        "short_ttft_contended_ms_p50": round(w.contended, 3),
        "short_ttft_contended_ms": [round(v, 3) for v in ev.short_contended_ms],
        "inflation_ms": round(w.inflation, 3),
        "noise_sd_ms": round(w.noise, 3),
    }
    if ev.head_start_ms:
        evidence["head_start_ms_p50"] = round(w.head, 3)
    if not ev.arrival_verified:
        evidence["arrival"] = "the long requests were seen written, not acknowledged (no TCP_INFO here)"
    if ev.rounds_not_arrived:
        evidence["rounds_not_arrived"] = ev.rounds_not_arrived
    if ev.note:
        evidence["note"] = ev.note
    return evidence


def _undecided(ev: QueueEvidence, w: _Waits, evidence: dict[str, Any]) -> Clear | Inconclusive | None:
    """Inconclusive when the prefill is too short to tell, clear when the short request was not queued, inconclusive
    between the thresholds; None when the wait makes a finding."""
    prefill, short_alone, head, inflation, noise = w.prefill, w.short_alone, w.head, w.inflation, w.noise
    if prefill < max(MIN_PREFILL_MS, MIN_PREFILL_FACTOR * short_alone):
        return Inconclusive(
            QUEUE_ID,
            f"a {ev.long_prompt_tokens}-token prompt prefills in only {prefill:.1f} ms (short TTFT {short_alone:.1f} "
            "ms): too little prefill to tell queueing from noise; a longer prompt would settle it if the server "
            "accepts one",
            evidence,
        )
    if head >= prefill:
        return Inconclusive(
            QUEUE_ID,
            f"the long requests took {head:.1f} ms to reach the server, longer than one of them takes to prefill "
            f"({prefill:.1f} ms): the first was done before the short request arrived; a longer prompt would settle "
            "it if the server accepts one",
            evidence,
        )
    ratio = w.ratio
    evidence["inflation_in_long_prefills"] = round(ratio, 3)
    if ratio <= HOL_CLEAR_RATIO:
        return Clear(
            QUEUE_ID,
            f"with {ev.longs_per_round} long prompts in flight a short request waited {inflation:.1f} ms, "
            f"{ratio:.2f} long prefills ({prefill:.1f} ms each): it was not queued behind them",
            evidence,
        )
    # When every round's short request waited the finding's worth of long prefills, the rounds differ only in where
    # in the running prefill it arrived (up to one prefill): their spread is the mechanism, not noise, and the
    # inflation need only stand clear of an uncontended short request's jitter.
    every_round = min(w.waits) >= HOL_FINDING_RATIO * prefill
    evidence["every_round_held"] = every_round
    if ratio < HOL_FINDING_RATIO or w.held < NOISE_Z * (w.alone_noise if every_round else noise):
        return Inconclusive(
            QUEUE_ID,
            f"a short request waited {inflation:.1f} ms = {ratio:.2f} long prefills counting the first one's "
            f"{head:.1f} ms head start (noise {noise:.1f} ms): "
            "between the clear and the finding thresholds; more rounds would settle it",
            evidence,
        )
    return None


def _finding(ev: QueueEvidence, reference: Reference | None, w: _Waits, evidence: dict[str, Any]) -> Outcome:
    """The finding, confirmed by the server's reported queue time where it reports one."""
    inflation = w.inflation
    reported = median(ev.server_queue_ms)
    confirmed = reported is not None and reported >= CONFIRM_SHARE * inflation
    if reported is not None:
        evidence["server_reported_queue_ms_p50"] = round(reported, 3)
    parallel = prefills_in_parallel(ev, w.short_alone, w.prefill)
    rule = (
        f"the short request's TTFT grew by {w.ratio:.2f} long prefills (≥ {HOL_FINDING_RATIO:g}, counting the first "
        "one's head start): it waited for long requests queued ahead of it, not only for the step that was running"
    )
    fix = None
    if parallel is not None:
        evidence["long_prefills_in_parallel"] = round(parallel, 2)
        if parallel <= SERIAL_MAX_PARALLEL:
            rule += f"; the server prefilled the {ev.longs_per_round} long requests one at a time"
            fix = (
                f"{CATALOGUE[QUEUE_ID].fix} This server works through one request at a time: parallel slots "
                "(llama.cpp: --parallel) or continuous batching would also let short requests through."
            )
    return costed_finding(
        QUEUE_ID,
        inflation,
        reference,
        cost_basis=(
            f"ms added to a short request's TTFT while {ev.longs_per_round} requests with "
            f"{ev.long_prompt_tokens}-token prompts are in flight (median of {len(ev.short_contended_ms)} rounds)"
        ),
        evidence=evidence,
        rule=rule,
        confidence=Confidence.HIGH if confirmed else Confidence.MEDIUM,
        fix=fix,
    )


def prefills_in_parallel(ev: QueueEvidence, short_alone_ms: float, prefill_ms: float) -> float | None:
    """How many long prefills the server ran at once (median over the rounds): the round's prefill work
    (``longs_per_round`` × one prefill) over the time its last long request took to its first token beyond a short
    request's fixed costs. About 1 when the server serves one request at a time, about ``longs_per_round`` when it
    batches them all. None without complete rounds."""
    values = []
    for ttfts in ev.long_contended_ms:
        if len(ttfts) == ev.longs_per_round and max(ttfts) > short_alone_ms:
            values.append(ev.longs_per_round * prefill_ms / (max(ttfts) - short_alone_ms))
    return median(values)
