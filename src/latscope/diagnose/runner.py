"""``diagnose()``: run the experiments a set of finding ids needs, then the checks, and rank what they found.

Order: target discovery (model, first contact) → baseline → the experiments the ids need, in the order of the
registry (:data:`~latscope.diagnose.experiments.EXPERIMENTS`: connection, parsing, queueing, streaming) → checks.
Each experiment is bounded in requests (its plan) and in time (:data:`EXPERIMENT_TIMEOUT_S`); one that fails or runs
out of time marks its checks "not tested" with the reason and the run goes on. Only an unreachable target (or one
that refuses the request as such) ends the diagnosis early, with :class:`~latscope.diagnose.discovery.DiagnoseError`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from latscope.checks import CHECKS
from latscope.checks.baseline import BaselineEvidence
from latscope.checks.engineknobs import engine_fix
from latscope.checks.parsing import ParsingEvidence
from latscope.checks.samples import Reference
from latscope.diagnose import discovery, plan, summary
from latscope.diagnose.context import REQUEST_TIMEOUTS, Context, ProgressCallback
from latscope.diagnose.experiments import EXPERIMENTS, Prior
from latscope.diagnose.experiments import baseline as baseline_experiment
from latscope.diagnose.result import Diagnosis, ExperimentRun
from latscope.findings import Finding, NotTested, Outcome
from latscope.signals.serverspans import join_server_spans
from latscope.wire.spanreceiver import SPAN_WAIT_S, SpanReceiver
from latscope.wire.target import Target

#: Wall-clock bound of one experiment, s (quick mode: half). Generous for a slow target; a stalled one cannot hold
#: the run for longer.
EXPERIMENT_TIMEOUT_S = 180.0


@dataclass(frozen=True, slots=True)
class _Failed:
    """An experiment that produced no evidence, and why."""

    reason: str


class _Interrupted(Exception):
    """The diagnosis was cancelled (Ctrl-C) during an experiment, whose run is recorded as interrupted."""


async def _run_experiment(
    ctx: Context,
    name: str,
    planned: int,
    experiment: Callable[[], Awaitable[Any]],
    runs: list[ExperimentRun],
    budget_left_s: float | None = None,
) -> Any:
    """Run one experiment with its time bound (and within ``budget_left_s``, what is left of the diagnosis's
    budget); its evidence, or :class:`_Failed`. Raises :class:`_Interrupted` when cancelled."""
    ctx.begin(name, planned)
    sent_before = ctx.requests_sent
    started = time.monotonic()
    timeout = EXPERIMENT_TIMEOUT_S / 2 if ctx.quick else EXPERIMENT_TIMEOUT_S
    budget_bound = budget_left_s is not None and budget_left_s < timeout
    if budget_left_s is not None:
        timeout = min(timeout, budget_left_s)
    try:
        evidence = await asyncio.wait_for(experiment(), timeout)
    except asyncio.CancelledError:
        elapsed = time.monotonic() - started
        runs.append(ExperimentRun(name, "interrupted", ctx.requests_sent - sent_before, elapsed, "interrupted"))
        ctx.finish("interrupted")
        raise _Interrupted(name) from None
    except TimeoutError:
        what = "the diagnosis's budget" if budget_bound else f"its {timeout:.0f} s"
        result: Any = _Failed(f"the {name} experiment ran out of {what}")
        status, message = "timeout", result.reason
    except Exception as exc:  # one experiment's failure must not end the diagnosis
        result = _Failed(f"the {name} experiment failed: {exc!r}")
        status, message = "failed", result.reason
    else:
        result, status, message = evidence, "ok", ""
    runs.append(ExperimentRun(name, status, ctx.requests_sent - sent_before, time.monotonic() - started, message))
    ctx.finish(message or "done")
    return result


def in_engine_words(outcome: Outcome, engine: str | None) -> Outcome:
    """``outcome`` with its fix in the words of the engine that answered (:mod:`latscope.checks.engineknobs`),
    when it is a finding that engine has knobs for; else unchanged."""
    if not isinstance(outcome, Finding):
        return outcome
    fix = engine_fix(outcome.id, engine)
    return outcome if fix is None else dataclasses.replace(outcome, fix=fix)


def _decide(ids: Sequence[str], evidence: dict[str, Any], reference: Reference | None) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for finding_id in ids:
        check = CHECKS[finding_id]
        ev = evidence.get(check.family)
        if ev is None:
            outcomes.append(NotTested(finding_id, f"the {check.family} experiment did not run"))
        elif isinstance(ev, _Failed):
            outcomes.append(NotTested(finding_id, ev.reason))
        else:
            try:
                outcomes.append(check.run(ev, reference))
            except Exception as exc:  # a check bug reads as "not tested", never as a traceback
                outcomes.append(NotTested(finding_id, f"the check could not decide: {exc!r}"))
    return outcomes


async def diagnose(
    target: Target | str,
    *,
    model: str | None = None,
    only: str | Iterable[str] | None = None,
    quick: bool = False,
    progress: ProgressCallback | None = None,
    budget_s: float | None = None,
    keep_timelines: bool = False,
    direct_url: str | None = None,
    server_spans: tuple[str, int] | None = None,
) -> Diagnosis:
    """Diagnose the endpoint ``target``: a resolved :class:`~latscope.wire.target.Target` (URL, dialect, credential
    headers, TLS settings, timeouts), or a base URL (``http[s]://host:port[/v1]``) resolved with every default and
    :data:`~latscope.diagnose.context.REQUEST_TIMEOUTS`.

    ``model`` defaults to the first one the server's model list names; ``only`` (ids, or a comma-separated string)
    limits the checks and so the experiments; ``quick`` runs smaller experiments; ``progress`` is called with
    :class:`~latscope.diagnose.context.ProgressEvent` objects; ``budget_s`` bounds the whole diagnosis, s (the
    experiment running when it ends is cut off, the later ones are not tested); ``keep_timelines`` keeps every
    experiment request's timeline in :attr:`Diagnosis.timelines` and sends each with a W3C ``traceparent`` (for
    ``--otlp``); ``direct_url`` is the target's upstream reached directly (``--direct``, normalised as the target's
    URL): the gateway-overhead check compares the target with it, and is not tested without it. Cancelled (Ctrl-C)
    during an experiment, it returns what was measured with ``interrupted`` set.

    ``server_spans`` (host, port) receives the server's own OTLP spans for the run
    (:class:`~latscope.wire.spanreceiver.SpanReceiver`; it implies ``keep_timelines``): after the experiments, every
    kept timeline gets its request's span joined (vLLM's ingest, queue, prefill, decode), and
    :attr:`Diagnosis.server_spans` says how many did. The checks themselves decide on what the client measured.

    Raises
    :class:`~latscope.diagnose.plan.UnknownFindingError` for an unknown id and
    :class:`~latscope.diagnose.discovery.DiagnoseError` (its subclass ``TargetUnreachable`` when nothing reached the
    target) when the diagnosis cannot start; misbehaviour during the experiments only marks the affected checks
    "not tested".
    """
    ids = plan.select(only)
    if isinstance(target, str):
        target = Target.resolve(target, timeouts=REQUEST_TIMEOUTS)
    if server_spans is not None:
        async with SpanReceiver(*server_spans) as receiver:
            result = await diagnose(
                target,
                model=model,
                only=ids,
                quick=quick,
                progress=progress,
                budget_s=budget_s,
                keep_timelines=True,
                direct_url=direct_url,
            )
            wanted = [t.trace_id for t in result.timelines if t.ok and t.trace_id]
            await receiver.wait_for(wanted, SPAN_WAIT_S)
            joined = join_server_spans(result.timelines, receiver.spans)
        result.server_spans = f"{joined} of {len(wanted)} request(s) joined to the server's own spans ({receiver.url})"
        return result
    started = time.monotonic()
    ctx = Context(
        # a traceparent on every request only where the spans are exported (``keep_timelines``, for --otlp)
        target=target.replace(trace_context=keep_timelines),
        model=model or "",
        quick=quick,
        direct_url=None if direct_url is None else target.at(direct_url).base_url,
        progress=progress,
        timelines=[] if keep_timelines else None,
    )
    models: list[str] = []
    if not model:
        models = await discovery.discover_model(ctx)
        ctx.model = models[0]
    first = await discovery.first_contact(ctx)
    engine = await discovery.identify_engine(ctx, first)
    ctx.request_extra = discovery.token_count_fields(engine, ctx.dialect.name)
    families = plan.families_for(ids)
    runs: list[ExperimentRun] = []
    evidence: dict[str, Any] = {}
    deadline = None if budget_s is None else started + budget_s
    baseline: BaselineEvidence | None = None
    interrupted = False
    try:
        baseline = await _baseline(ctx, families, runs, deadline)
        max_tokens = (
            baseline.typical_max_tokens if baseline is not None else baseline_experiment.typical_max_tokens(quick)
        )
        await _experiments(ctx, families, Prior(baseline, max_tokens), runs, evidence, deadline, budget_s)
    except _Interrupted as stop:
        interrupted = True
        for family in families:
            if family not in evidence:
                evidence[family] = _Failed(f"interrupted (Ctrl-C) during the {stop} experiment")
    outcomes = [in_engine_words(o, engine) for o in _decide(ids, evidence, summary.reference(baseline))]
    parsed = evidence.get("parsing")
    upload = parsed.upload_rate_bps if isinstance(parsed, ParsingEvidence) else None
    return Diagnosis(
        target=discovery.facts(ctx, first, models, upload_rate_bps=upload, engine=engine),
        timeline_summary=summary.timeline_summary(baseline),
        baseline=summary.baseline_summary(baseline),
        outcomes=outcomes,
        experiments=runs,
        duration_s=time.monotonic() - started,
        quick=quick,
        checked=ids,
        interrupted=interrupted,
        timelines=ctx.timelines or [],
    )


async def _baseline(
    ctx: Context, families: Sequence[str], runs: list[ExperimentRun], deadline: float | None
) -> BaselineEvidence | None:
    """Run the baseline experiment (with the TTFT sweep when a family needs it); its evidence, None when it failed."""
    wants_sweep = any(EXPERIMENTS[family].needs_sweep for family in families)
    base = await _run_experiment(
        ctx,
        "baseline",
        baseline_experiment.planned_requests(ctx.quick, wants_sweep),
        lambda: baseline_experiment.run(ctx, sweep=wants_sweep),
        runs,
        _left(deadline),
    )
    return base if isinstance(base, BaselineEvidence) else None


async def _experiments(
    ctx: Context,
    families: Sequence[str],
    prior: Prior,
    runs: list[ExperimentRun],
    evidence: dict[str, Any],
    deadline: float | None,
    budget_s: float | None,
) -> None:
    """Run each family's experiment in order into ``evidence``; once the target stopped answering or the budget
    (``budget_s``, which ends at ``deadline``, monotonic s) ran out, the rest get the reason instead."""
    stopped: _Failed | None = None
    for family in families:
        if stopped is None and runs[-1].status == "timeout" and not await discovery.still_answering(ctx):
            # a target that stopped answering would make every later experiment wait out its own time bound
            stopped = _Failed(f"the target stopped answering during the {runs[-1].name} experiment")
        left = _left(deadline)
        if stopped is None and left is not None and left <= 0:
            stopped = _Failed(f"the diagnosis's budget of {budget_s:g} s ran out before this experiment")
        if stopped is not None:
            evidence[family] = stopped
            continue
        experiment = EXPERIMENTS[family]
        evidence[family] = await _run_experiment(
            ctx, family, experiment.planned_requests(ctx), partial(experiment.run, ctx, prior), runs, left
        )


def _left(deadline: float | None) -> float | None:
    """Seconds left before ``deadline`` (monotonic), None without one."""
    return None if deadline is None else deadline - time.monotonic()
