"""``gateway-queueing``: a gateway holds requests beyond a rate before the server starts any work on them.

Mechanism: a limiter in queue mode (or any admission queue in front of the engine) lets requests through at its
rate; a burst above it waits in the gateway, one refill interval more for each request in line. That wait comes
before the server's own clocks start, so what the server reports for the request (Server-Timing parse, validate,
queue, prefill; TGI's, Ollama's equivalents) stays flat while the client's time to the first token grows. An engine
out of slots also makes a burst wait, but in its own queue, which the server reports as queue time
(``capacity-saturation`` is that finding). So, per request: the time to the first token (the connection's setup
excluded) less everything the server says it spent before it — what no server phase accounts for — is compared
between a control at a low rate and a burst; the path's round trip and the client's own costs are in both. A finding
needs that unaccounted time to grow in the burst, for several requests, well beyond the control's spread, in steps
(each waiter longer than the one before, as a line goes; a stall holds its requests alike), while the
server's reported queue time does not grow with it; and no refusal (a limiter that refuses is ``rate-limited``).
Without a server-reported queue time, the line's pace tells them apart (:func:`check_gateway_queueing` by pace): an
engine's queue lets the next request in when one finishes, so a burst's first tokens come about one request's whole
service time apart (a lone request's end after setup, less the round trip) or closer, batched; a limiter in queue
mode releases them at its rate whatever their work — a burst of two-token requests an engine clears in milliseconds
comes out 1/rate apart. A finding by pace needs at least :data:`MIN_WAITERS` steps between successive first tokens of
the burst each over :data:`PACE_SERVICE_RATIO` service times (and :data:`GROWTH_FLOOR_MS`); its cost, the burst's
mean wait over the control, may include some engine queueing (medium confidence).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median
from latscope.findings import Clear, Confidence, NotTested, Outcome
from latscope.timeline.model import ServerPhase

GATEWAY_QUEUEING_ID = "gateway-queueing"

#: The server phases before the first token that a client's time to it is set against (``window_wait`` is inside
#: ``queue``, so it is not counted twice).
ACCOUNTED_PHASES = (
    ServerPhase.PARSE,
    ServerPhase.VALIDATE,
    ServerPhase.INGEST,
    ServerPhase.QUEUE,
    ServerPhase.LOAD,
    ServerPhase.SLOT_WAIT_TEMPLATING,
    ServerPhase.PREFILL,
)
#: The phases in which an engine's own queue shows (the lab's and vLLM-style ``queue``, Ollama's ``load``).
ENGINE_WAIT_PHASES = (ServerPhase.QUEUE, ServerPhase.LOAD)
#: A burst request waited in the gateway when its unaccounted time exceeded the control's median by the largest of:
#: this many times the control's spread (its own noise) …
GROWTH_SPREADS = 3.0
#: … this share of the control's median time to the first token (the client's and the path's costs grow a little
#: with concurrency: a busy client reads several streams at once) …
GROWTH_SHARE = 0.5
#: … and this floor, ms: a loopback control's spread can be a fraction of a millisecond, while a busy client host
#: delays a burst's streams by several (reading six TLS streams at once); a gateway queue worth naming holds requests
#: longer.
GROWTH_FLOOR_MS = 20.0
#: Requests of the burst that must have waited: a queue holds each one a refill interval longer than the one
#: before, so more than one waits; one slow request is a stall.
MIN_WAITERS = 2
#: A queue lets its requests through one after another: each waiter waited a refill interval (or a service time)
#: longer than the one before, so the waiters' waits spread over at least half of the longest (the lab's queue is
#: such a stair). A stall of the host or the server delays the requests it catches
#: alike: waits whose spread is under this share of the longest are one hold, not a line.
MIN_STAIR_SHARE = 0.3
#: The server's reported queue time may grow by at most this share of the unaccounted growth: beyond it, the burst
#: waited (also) in the engine's queue, which is ``capacity-saturation``'s mechanism.
MAX_ENGINE_SHARE = 0.25
#: Requests of each phase that must have measured values.
MIN_MEASURED = 3
#: Without a server-reported queue time, a step between successive first tokens of the burst is a release at a
#: limiter's pace when it exceeds this many of a lone request's whole service times: an engine serving one request
#: at a time steps by about one (llama-cpp-python: 1.0–1.3), a batching engine by less.
PACE_SERVICE_RATIO = 3.0


@dataclass(frozen=True, slots=True)
class GatewayQueueEvidence:
    """The offered-rate step: the same short requests at a low rate, then as many at once.

    Fields:
        low_interval_ms: the low rate's spacing between sends (ms).
        low: the low-rate requests (the control), in send order.
        high: the requests sent at once, in send order.
        high_request_ids: the server's ``x-request-id`` of the ``high`` requests that carried one (lets a test find
            them in a server's own records).
    """

    low_interval_ms: float
    low: tuple[RequestSample, ...] = ()
    high: tuple[RequestSample, ...] = ()
    high_request_ids: tuple[str, ...] = ()


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def engine_wait_ms(sample: RequestSample) -> float | None:
    """What the server reported as its own queue time (ms), None when it reports none."""
    waits = [sample.server_ms[p] for p in ENGINE_WAIT_PHASES if p in sample.server_ms]
    return sum(waits) if waits else None


def unaccounted_ms(sample: RequestSample) -> float | None:
    """Time to the first token after the connection was ready, less every server phase before it (ms); None when
    the request failed or the server reports no queue time (without one, nothing tells where a wait happened)."""
    if not sample.ok or sample.ttft_after_setup_ms is None or engine_wait_ms(sample) is None:
        return None
    return sample.ttft_after_setup_ms - sum(sample.server_ms.get(p, 0.0) for p in ACCOUNTED_PHASES)


def _values(samples: tuple[RequestSample, ...], of: Any) -> list[float]:
    return [v for v in (of(s) for s in samples) if v is not None]


def check_gateway_queueing(ev: GatewayQueueEvidence, reference: Reference | None) -> Outcome:
    """Finding when the burst's requests waited before any reported server work, beyond the low-rate control
    (see the module docstring); cost = the mean time per burst request that no server phase accounts for, over the
    control's."""
    samples = ev.low + ev.high
    if failures.rate_limited(samples) or any(s.status == 503 for s in samples):
        return NotTested(
            GATEWAY_QUEUEING_ID,
            "the server refused requests of the rate step (429/503): a limiter that refuses is rate-limited; what "
            "the others waited is not a queue's measure",
        )
    broken = failures.too_many_failed(samples)
    if broken:
        return NotTested(GATEWAY_QUEUEING_ID, f"the target misbehaved during the rate step: {broken}")
    low, high = _values(ev.low, unaccounted_ms), _values(ev.high, unaccounted_ms)
    if len(low) < MIN_MEASURED or len(high) < MIN_MEASURED:
        if not any(engine_wait_ms(s) is not None for s in samples):
            return _by_pace(ev, reference)
        reason = failures.summarise(samples) or "too few requests completed"
        return NotTested(GATEWAY_QUEUEING_ID, f"the rate step could not measure: {reason}")
    low_ttft = median(_values(ev.low, _ttft)) or 0.0
    control, spread, threshold, waited = _waiters(low, high, low_ttft)
    growth = sum(high) / len(high) - control
    engine_low = median(_values(ev.low, engine_wait_ms)) or 0.0
    engine_high = _values(ev.high, engine_wait_ms)
    engine_growth = sum(engine_high) / len(engine_high) - engine_low if engine_high else 0.0
    evidence: dict[str, Any] = {
        "low_interval_ms": ev.low_interval_ms,
        "low_unaccounted_ms": [_round(v) for v in low],
        "burst_unaccounted_ms": [_round(v) for v in high],
        "control_ms": _round(control),
        "control_spread_ms": _round(spread),
        "threshold_ms": _round(threshold),
        "waited": len(waited),
        "unaccounted_growth_ms": _round(growth),
        "engine_queue_growth_ms": _round(engine_growth),
        "high_request_ids": list(ev.high_request_ids),
    }
    if len(waited) < MIN_WAITERS:
        return Clear(
            GATEWAY_QUEUEING_ID,
            f"{len(ev.high)} requests at once waited no longer before the server's work than {len(ev.low)} sent "
            f"{ev.low_interval_ms:.0f} ms apart ({len(waited)} beyond {threshold:.1f} ms)",
            evidence,
        )
    excess = [v - control for v in waited]
    stair = (max(excess) - min(excess)) / max(excess)
    evidence["stair_share"] = _round(stair)
    if stair < MIN_STAIR_SHARE:
        return Clear(
            GATEWAY_QUEUEING_ID,
            f"{len(waited)} requests of the burst waited {min(excess):.1f}–{max(excess):.1f} ms longer than the "
            "control before the server's work, all alike: one hold of the host or the server, not a queue (whose "
            "requests go through one after another)",
            evidence,
        )
    if engine_growth > MAX_ENGINE_SHARE * growth:
        return Clear(
            GATEWAY_QUEUEING_ID,
            f"the burst waited, but in the server's own queue (its reported queue time grew {engine_growth:.1f} ms "
            f"of the {growth:.1f} ms): an engine out of slots, not a gateway",
            evidence,
        )
    return costed_finding(
        GATEWAY_QUEUEING_ID,
        growth,
        reference,
        cost_basis=(
            f"mean ms per request of a burst of {len(ev.high)} that passed before any server-reported work, beyond "
            f"the same requests sent {ev.low_interval_ms:.0f} ms apart ({control:.1f} ms)"
        ),
        evidence=evidence,
        rule=(
            f"{len(waited)} of {len(ev.high)} requests sent at once waited more than {threshold:.1f} ms longer before "
            "the server's reported parse/validate/queue/prefill than at a low rate, while the server's queue time "
            f"grew {engine_growth:.1f} ms and nothing was refused: a queue in front of the server"
        ),
        confidence=Confidence.HIGH if len(waited) >= MIN_WAITERS + 1 else Confidence.MEDIUM,
    )


def _waiters(low: list[float], high: list[float], low_ttft: float) -> tuple[float, float, float, list[float]]:
    """The control (the low rate's median, ms), its spread, the threshold a burst request's wait must pass
    (:data:`GROWTH_SPREADS`, :data:`GROWTH_SHARE` of the control's time to the first token, :data:`GROWTH_FLOOR_MS`)
    and the burst's values past it."""
    control = median(low) or 0.0
    spread = max(low) - min(low)
    threshold = max(GROWTH_SPREADS * spread, GROWTH_SHARE * low_ttft, GROWTH_FLOOR_MS)
    return control, spread, threshold, [v for v in high if v - control > threshold]


def _ttft(sample: RequestSample) -> float | None:
    return sample.ttft_after_setup_ms if sample.ok else None


def _service_ms(sample: RequestSample) -> float | None:
    """A lone request's whole time in the server: its end after setup less one round trip (ms)."""
    if not sample.ok or sample.e2e_after_setup_ms is None:
        return None
    return max(0.0, sample.e2e_after_setup_ms - (sample.rtt_ms or 0.0))


def _by_pace(ev: GatewayQueueEvidence, reference: Reference | None) -> Outcome:
    """The check for a server that reports no queue time: the burst's line told by its pace (module docstring)."""
    low, high = _values(ev.low, _ttft), sorted(_values(ev.high, _ttft))
    services = _values(ev.low, _service_ms)
    if len(low) < MIN_MEASURED or len(high) < MIN_MEASURED or not services:
        reason = failures.summarise(ev.low + ev.high) or "no lone request's time in the server was measured"
        return NotTested(
            GATEWAY_QUEUEING_ID,
            f"the server reports no queue time, and the rate step could not measure the line's pace: {reason}",
        )
    control, _, threshold, waited = _waiters(low, high, median(low) or 0.0)
    service = median(services) or 0.0
    steps = [b - a for a, b in pairwise(high)]
    step_floor = max(PACE_SERVICE_RATIO * service, GROWTH_FLOOR_MS)
    paced = [d for d in steps if d >= step_floor]
    growth = sum(high) / len(high) - control
    evidence: dict[str, Any] = {
        "told_by": "pace (the server reports no queue time)",
        "low_interval_ms": ev.low_interval_ms,
        "low_ttft_ms": [_round(v) for v in low],
        "burst_ttft_ms": [_round(v) for v in high],
        "control_ms": _round(control),
        "service_ms": _round(service),
        "threshold_ms": _round(threshold),
        "waited": len(waited),
        "steps_ms": [_round(d) for d in steps],
        "paced_steps": len(paced),
        "step_floor_ms": _round(step_floor),
        "burst_wait_growth_ms": _round(growth),
        "high_request_ids": list(ev.high_request_ids),
    }
    if len(waited) < MIN_WAITERS:
        return Clear(
            GATEWAY_QUEUEING_ID,
            f"{len(ev.high)} requests at once came no later to their first token than {len(ev.low)} sent "
            f"{ev.low_interval_ms:.0f} ms apart ({len(waited)} beyond {threshold:.1f} ms; the server reports no queue "
            "time, so the line was read by its pace)",
            evidence,
        )
    if len(paced) < MIN_WAITERS:
        return Clear(
            GATEWAY_QUEUEING_ID,
            f"{len(waited)} requests of the burst waited, but their first tokens came at most "
            f"{max(steps, default=0.0):.1f} ms apart, within {PACE_SERVICE_RATIO:g}× a lone request's "
            f"{service:.1f} ms in the server: served one after another by the engine (capacity-saturation's queue), "
            "not released at a gateway's pace",
            evidence,
        )
    pace = median(paced) or 0.0
    evidence["pace_ms"] = _round(pace)
    return costed_finding(
        GATEWAY_QUEUEING_ID,
        growth,
        reference,
        cost_basis=(
            f"mean ms per request of a burst of {len(ev.high)} to its first token beyond the same requests sent "
            f"{ev.low_interval_ms:.0f} ms apart ({control:.1f} ms); the server reports no queue time, so any wait in "
            "its engine's queue is in it too"
        ),
        evidence=evidence,
        rule=(
            f"{len(paced)} of the burst's {len(steps)} steps between first tokens were {pace:.0f} ms (median), over "
            f"{PACE_SERVICE_RATIO:g}× the {service:.1f} ms a lone request spends in the server: released at a fixed "
            f"pace of about {1000.0 / pace:.1f} requests/s whatever their work, as a limiter's queue does, and "
            "nothing was refused"
        ),
        confidence=Confidence.MEDIUM,
    )
