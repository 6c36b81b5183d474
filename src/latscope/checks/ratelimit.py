"""``rate-limited``: the gateway refused requests for their rate (429, or 503 with ``Retry-After``).

Mechanism: a rate limiter answers a request beyond the quota at once, before any work, with 429 and (usually) when
to come back: ``Retry-After`` / ``retry-after-ms``, or a quota window that reads ``remaining 0`` and resets in so
many seconds (OpenAI, Anthropic, IETF and X-RateLimit headers, :mod:`latscope.signals.ratelimit`). A client that
honours it waits that long before the request can even start, so the cost of one refusal is that wait. The
evidence is every refusal the run met, in any experiment, plus a short probe that stops at its first refusal. A
refusal that names no wait is priced by what the probe measured: its retries at doubling intervals after the
refusal, the first one admitted bounding the wait from above and the last one refused from below (a limiter that
admitted none within them holds a client at least that long). A server without a limiter answers the probe and never
refuses: clear. Those refusals also leave the other
experiments with failed requests, which their checks count (:func:`latscope.checks.failures.too_many_failed`) and
so answer "not tested" rather than decide on the survivors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median
from latscope.findings import Clear, Confidence, NotTested, Outcome
from latscope.signals.ratelimit import RateLimitState

RATE_LIMITED_ID = "rate-limited"

#: Refusals quoted in the evidence, first ones first: enough to show what the server said, bounded for the report.
MAX_QUOTED = 5


@dataclass(frozen=True, slots=True)
class RateLimitAnswer:
    """One response that carried rate-limit information, as the run saw it.

    Fields:
        experiment: the experiment that sent the request (``ratelimit`` for the probe itself).
        label: what the experiment sent it for.
        status: the HTTP status (429, a 503 with ``Retry-After``, or a success that reported its quota).
        state: every rate-limit header of the response, parsed (:func:`latscope.signals.ratelimit.rate_limit_state`;
            times in seconds from the response's arrival).
    """

    experiment: str
    label: str
    status: int | None
    state: RateLimitState

    @property
    def refused(self) -> bool:
        """The server refused the request for its rate: 429, or 503 with ``Retry-After`` (RFC 9110 §15.6.4)."""
        return self.status == 429 or (self.status == 503 and self.state.retry_after_s is not None)

    @property
    def wait_ms(self) -> float | None:
        """The wait the refusal imposes, ms: ``Retry-After`` (``retry-after-ms`` first), else the soonest reset of an
        exhausted window; None when the server said neither."""
        if self.state.retry_after_s is not None:
            return self.state.retry_after_s * 1000.0
        resets = [w.reset_s for w in self.state.exhausted if w.reset_s is not None]
        return min(resets) * 1000.0 if resets else None


@dataclass(frozen=True, slots=True)
class RecoveryTry:
    """One retry of the probe after a refusal that named no wait.

    Fields:
        after_s: when it was sent, s after the refusal arrived.
        status: its HTTP status (None when it failed before a response).
        ok: it completed with a stream.
    """

    after_s: float
    status: int | None
    ok: bool

    @property
    def refused(self) -> bool:
        """Refused again for the rate (429, or a 503: the limiter's answer while it still holds the client)."""
        return self.status in (429, 503)


@dataclass(frozen=True, slots=True)
class MeasuredWait:
    """The wait a limiter imposed, from the probe's retries, ms: between ``at_least_ms`` (the last retry refused)
    and ``at_most_ms`` (the first admitted; None when none was)."""

    at_least_ms: float
    at_most_ms: float | None


def measured_wait(tries: tuple[RecoveryTry, ...]) -> MeasuredWait | None:
    """What the retries after a refusal say of the wait; None when there were none, or one failed otherwise than by
    a refusal before any was admitted (nothing to tell from)."""
    at_least = 0.0
    for attempt in tries:
        if attempt.refused:
            at_least = attempt.after_s * 1000.0
        elif attempt.ok:
            return MeasuredWait(at_least, attempt.after_s * 1000.0)
        else:
            return None
    return MeasuredWait(at_least, None) if tries else None


@dataclass(frozen=True, slots=True)
class RateLimitEvidence:
    """The rate-limit probe, with what every other experiment of the run met.

    Fields:
        probe_limit: the most requests the probe would send (it stops at the first refusal).
        probe: the probe's requests in order: short prompts, one token each, sent back to back on one connection.
        refusals: every rate-limit refusal of the run (:attr:`RateLimitAnswer.refused`), from any experiment, the
            probe's included, in order.
        quota: the last answered request's rate-limit headers (None when no answer carried any).
        recovery: after a probe refusal that named no wait, its retries at doubling intervals, in order (empty when
            the refusal named its wait, or the probe met none).
    """

    probe_limit: int
    probe: tuple[RequestSample, ...] = ()
    refusals: tuple[RateLimitAnswer, ...] = ()
    quota: RateLimitAnswer | None = None
    recovery: tuple[RecoveryTry, ...] = ()


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def describe_answer(answer: RateLimitAnswer) -> dict[str, Any]:
    """One answer's rate-limit facts as plain values (seconds turned into ms)."""
    state = answer.state
    return {
        "experiment": answer.experiment,
        "label": answer.label,
        "status": answer.status,
        "retry_after_ms": _round(None if state.retry_after_s is None else state.retry_after_s * 1000.0),
        "retry_after_source": state.retry_after_source,
        "windows": [
            {
                "dimension": w.dimension,
                "source": w.source,
                "limit": w.limit,
                "remaining": w.remaining,
                "reset_ms": _round(None if w.reset_s is None else w.reset_s * 1000.0),
                "window_s": w.window_s,
            }
            for w in state.windows
        ],
    }


def _quota_text(answer: RateLimitAnswer | None) -> str:
    """What the last answer's quota headers said, for a clear outcome's reason ("" without any)."""
    if answer is None or not answer.state.windows:
        return ""
    parts = [
        f"{w.dimension} {w.remaining if w.remaining is not None else '?'} of {w.limit if w.limit is not None else '?'}"
        f" left ({w.source})"
        for w in answer.state.windows
    ]
    return "; the server's quota headers said: " + ", ".join(parts)


def _measured(ev: RateLimitEvidence, evidence: dict[str, Any]) -> tuple[float | None, str]:
    """The wait of refusals that named none, as the probe's retries measured it (into ``evidence``), and the cost
    basis that says how it was found."""
    unknown = "the server refused without saying when to retry (no Retry-After, no reset)"
    evidence["recovery"] = [[round(t.after_s * 1000.0, 1), t.status] for t in ev.recovery]
    found = measured_wait(ev.recovery)
    if found is None:
        return None, f"{unknown}, and the probe could not measure it: the wait is unknown"
    evidence["measured_wait_ms"] = {"at_least": _round(found.at_least_ms), "at_most": _round(found.at_most_ms)}
    if found.at_most_ms is None:
        return found.at_least_ms, (
            f"{unknown}; ms a refused client waits at least: the probe's {len(ev.recovery)} retries at doubling "
            f"intervals were all refused, the last {found.at_least_ms:.0f} ms after the refusal"
        )
    return found.at_most_ms, (
        f"{unknown}; ms a refused client waits before it is admitted again, measured: the probe's retry "
        f"{found.at_most_ms:.0f} ms after the refusal was admitted, the one at {found.at_least_ms:.0f} ms refused"
    )


def check_rate_limited(ev: RateLimitEvidence, reference: Reference | None) -> Outcome:
    """Finding when any request of the run was refused for its rate; cost = the median wait a refusal imposed
    (``Retry-After``, else the exhausted window's reset, else what the probe's retries measured). Clear when the
    probe's requests all went through."""
    refusals = ev.refusals
    sent = len(ev.probe)
    evidence: dict[str, Any] = {
        "probe_sent": sent,
        "probe_limit": ev.probe_limit,
        "probe_statuses": [s.status for s in ev.probe],
        "refusals": len(refusals),
        "refused_in": sorted({r.experiment for r in refusals}),
        "quota": None if ev.quota is None else describe_answer(ev.quota),
    }
    if refusals:
        evidence["answers"] = [describe_answer(r) for r in refusals[:MAX_QUOTED]]
        waits = [w for w in (r.wait_ms for r in refusals) if w is not None]
        wait = median(waits)
        evidence["wait_ms_per_refusal"] = _round(wait)
        statuses = sorted({r.status for r in refusals if r.status is not None})
        where = ", ".join(evidence["refused_in"])
        exhausted = sorted({f"{w.dimension} ({w.source})" for r in refusals for w in r.state.exhausted})
        said = f"; quota exhausted: {', '.join(exhausted)}" if exhausted else ""
        if wait is not None:
            basis = (
                f"ms a client must wait per refused request before it may retry (median of {len(waits)} "
                "Retry-After / reset values the server sent)"
            )
        else:
            wait, basis = _measured(ev, evidence)
        return costed_finding(
            RATE_LIMITED_ID,
            wait or 0.0,
            reference,
            cost_basis=basis,
            evidence=evidence,
            rule=(
                f"{len(refusals)} request{'s' if len(refusals) != 1 else ''} refused for their rate (HTTP "
                f"{'/'.join(str(s) for s in statuses)}) during: {where}{said}"
            ),
            confidence=Confidence.HIGH,
        )
    ok = [s for s in ev.probe if s.ok]
    if not ok:
        reason = failures.summarise(ev.probe, sent) or "the probe sent nothing"
        return NotTested(RATE_LIMITED_ID, f"the rate-limit probe could not measure: {reason}")
    return Clear(
        RATE_LIMITED_ID,
        f"no request of this run was refused for its rate, and {len(ok)} short requests sent back to back all went "
        f"through (a limit above that is not excluded){_quota_text(ev.quota)}",
        evidence,
    )
