"""Terminal rendering of a bench run's summary (``latscope bench`` at the end, ``latscope report RUN``).

Layout: a header (target, model, workload, bounds), then for a sweep one comparison row per step, then for each step
its latency table (p50/p90/p95/p99/max of every metric, ITL per gap), throughput and goodput, per-class tables when
the workload mixes classes, pacing (open loop), coalescing, errors by phase, the client's own health, and warnings.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from latscope.load.stats import Dist
from latscope.load.summary import GroupSummary, StepSummary
from latscope.report.batchsize import batch_heatmap
from latscope.report.format import TABLE, fmt_ms, fmt_rate

#: Metric rows of the latency table, in request order: (metric key, label, note).
LATENCY_ROWS: tuple[tuple[str, str, str], ...] = (
    ("client_queue_ms", "client queue", "scheduled → started"),
    ("retry_ms", "retries", "earlier attempts + backoff (--retries)"),
    ("setup_ms", "setup", "pool + dns + connect + tls"),
    ("ttfb_ms", "TTFB", "first response byte"),
    ("ttft_ms", "TTFT", "first token"),
    ("tpot_ms", "TPOT", "per output token after the first"),
    ("itl_ms", "ITL", "every inter-token gap"),
    ("e2e_ms", "E2E", "whole request"),
)


def latency_table(group: GroupSummary, title: str) -> Table:
    """p50/p90/p95/p99/max/mean/count of each latency metric (ms)."""
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, box=None, header_style="bold")
    table.add_column("metric")
    for col in ("p50", "p90", "p95", "p99", "max", "mean", "n"):
        table.add_column(col, justify="right")
    table.add_column("", style="dim")
    for key, label, note in LATENCY_ROWS:
        d = group.metrics.get(key)
        if d is None or (key == "retry_ms" and d.max <= 0.0):  # no request was retried: nothing to show
            continue
        table.add_row(
            label,
            fmt_ms(d.p50, TABLE),
            fmt_ms(d.p90, TABLE),
            fmt_ms(d.p95, TABLE),
            Text(fmt_ms(d.p99, TABLE), style="bold"),
            fmt_ms(d.max, TABLE),
            fmt_ms(d.mean, TABLE),
            f"{d.count:,}",
            note,
        )
    return table


def _tokens(d: Dist | None) -> str:
    return "–" if d is None else f"{d.mean:.0f} mean (p50 {d.p50:.0f}, max {d.max:.0f})"


def throughput_line(group: GroupSummary) -> Text:
    """Requests, errors, throughput and goodput in one line."""
    text = Text()
    text.append(f"{group.requests:,} requests", style="bold")
    text.append(f"  ok {group.ok:,}")
    if group.errors:
        text.append(f"  errors {group.errors:,} ({group.error_rate:.1%})", style="red")
    text.append(f"   {fmt_rate(group.throughput_rps, ' req/s')}", style="bold")
    text.append(f"   {fmt_rate(group.output_tokens_per_s, ' output tok/s')}")
    if group.input_tokens_per_s is not None:
        text.append(f"   {fmt_rate(group.input_tokens_per_s, ' input tok/s')}")
    if group.goodput_rps is not None and group.goodput_fraction is not None:
        text.append(f"   goodput {fmt_rate(group.goodput_rps, ' req/s')} ({group.goodput_fraction:.1%})", style="bold")
    return text


def step_renderable(s: StepSummary) -> RenderableType:
    """Everything about one step."""
    parts: list[RenderableType] = [throughput_line(s.overall)]
    o = s.overall
    out_tok, in_tok = _tokens(o.metrics.get("output_tokens")), _tokens(o.metrics.get("prompt_tokens"))
    tokens = Text(f"output tokens {out_tok}   prompt tokens {in_tok}", style="dim")
    parts.append(tokens)
    parts.append(Text(""))
    parts.append(latency_table(o, "latency (ms)"))
    if s.classes:
        for name, group in s.classes.items():
            parts.append(Text(""))
            parts.append(Text(f"class {name}", style="bold cyan"))
            parts.append(throughput_line(group))
            parts.append(latency_table(group, ""))
    parts.append(Text(""))
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    facts.add_row("window", f"{s.window_s:.2f} s measured, {s.warmup_requests:,} warm-up requests excluded")
    if s.offered_rps is not None:
        sl = s.schedule_lag_ms
        lag_text = ""
        if sl is not None:
            lag_text = (
                f"; dispatch lag p50 {fmt_ms(sl.p50, TABLE)} p99 {fmt_ms(sl.p99, TABLE)} max {fmt_ms(sl.max, TABLE)} ms"
            )
        facts.add_row(
            "arrivals",
            f"target {fmt_rate(s.offered_rps)}, scheduled {fmt_rate(s.schedule_rps)}, "
            f"achieved {fmt_rate(s.achieved_rps)}{lag_text}",
        )
    if o.token_gaps:
        facts.add_row(
            "coalescing",
            f"{o.zero_gaps:,} of {o.token_gaps:,} token gaps are 0 ms ({o.zero_gap_share:.1%}); "
            f"{o.coalesced_events:,} of {o.events:,} events shared a read with the previous one",
        )
    total_conn = s.connections_opened + s.connections_reused
    if total_conn:
        facts.add_row(
            "connections",
            f"{s.connections_opened:,} requests opened a connection, {s.connections_reused:,} reused one "
            f"({s.connections_reused / total_conn:.0%} reuse)",
        )
    if o.attempts > o.requests:
        share = o.retry_time_ms / o.request_time_ms if o.request_time_ms > 0 else 0.0
        facts.add_row(
            "retries",
            f"{o.retried:,} of {o.requests:,} requests retried, {o.attempts:,} attempts "
            f"({o.attempts / max(1, o.requests):.2f} per request); retries took {share:.1%} of the requests' time "
            f"({o.retry_wait_time_ms / max(1, o.requests):.1f} ms waiting per request)"
            + (f"; {o.unkeyed_retries:,} without an idempotency key" if o.unkeyed_retries else ""),
        )
    if o.errors:
        by = ", ".join(f"{k} {v}" for k, v in o.errors_by_phase.items())
        kinds = ", ".join(f"{k} {v}" for k, v in o.errors_by_kind.items())
        status = ", ".join(f"HTTP {k}: {v}" for k, v in o.errors_by_status.items())
        facts.add_row("errors", Text(f"by phase: {by}; by kind: {kinds}" + (f"; {status}" if status else ""), "red"))
    if s.client_delay_ms is not None:
        d = s.client_delay_ms
        facts.add_row(
            "client delay",
            f"event stamp − server send stamp: p50 {fmt_ms(d.p50, TABLE)} p99 {fmt_ms(d.p99, TABLE)} "
            f"max {fmt_ms(d.max, TABLE)} ms "
            f"({d.count:,} events)",
        )
    if s.client is not None:
        c = s.client
        cpu = "–" if c.loop_cpu_mean is None else f"{c.loop_cpu_mean:.0%} mean, {c.loop_cpu_max or 0:.0%} max"
        if c.spin_share_mean:
            cpu += f" (pacing spins {c.spin_share_mean:.0%} of the time)"
        loop_lag = "" if c.loop_lag_ms is None else f"; loop lag p99 {fmt_ms(c.loop_lag_ms.p99, TABLE)} ms"
        mem = "" if c.rss_total_mb is None else f"; memory {c.rss_total_mb:,.0f} MiB"
        busy = "" if c.machine_busy_mean is None else f"; machine {c.machine_busy_mean:.0%} busy"
        if c.off_cpu_share is not None:
            busy += f"; off the CPU {c.off_cpu_share:.2%} of the time (longest {fmt_ms(c.off_cpu_max_ms, TABLE)} ms)"
        gc_note = "" if not c.gc_pauses else f"; {c.gc_pauses} GC pause(s) up to {fmt_ms(c.gc_pause_max_ms, TABLE)} ms"
        facts.add_row("client", f"{c.workers} worker(s), loop CPU {cpu}{loop_lag}{mem}{busy}{gc_note}")
    if s.slo:
        facts.add_row("SLO", ", ".join(f"{k} ≤ {fmt_ms(v, TABLE)} ms" for k, v in s.slo.items()))
    parts.append(facts)
    for warning in s.warnings:
        parts.append(Text(f"⚠ {warning}", style="yellow"))
    return Panel(Group(*parts), title=f"[bold]step {s.step}: {s.label}", title_align="left")


def sweep_table(steps: list[StepSummary]) -> Table:
    """One row per step: the numbers a sweep is run to compare."""
    table = Table(title="sweep", title_justify="left", header_style="bold")
    table.add_column("step")
    for col in ("req/s", "out tok/s", "TTFT p50", "TTFT p99", "ITL p99", "TPOT p50", "E2E p99", "goodput", "errors"):
        table.add_column(col, justify="right")

    def p(s: StepSummary, key: str, q: str) -> str:
        d = s.overall.metrics.get(key)
        return fmt_ms(None if d is None else float(getattr(d, q)))

    for s in steps:
        o = s.overall
        table.add_row(
            s.label,
            fmt_rate(o.throughput_rps, ""),
            fmt_rate(o.output_tokens_per_s, ""),
            p(s, "ttft_ms", "p50"),
            p(s, "ttft_ms", "p99"),
            p(s, "itl_ms", "p99"),
            p(s, "tpot_ms", "p50"),
            p(s, "e2e_ms", "p99"),
            "–" if o.goodput_fraction is None else f"{o.goodput_fraction:.1%}",
            f"{o.errors:,}",
        )
    return table


def header(data: dict[str, Any]) -> RenderableType:
    """Target, model, workload and bounds of a run."""
    cfg = data.get("config", {})
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column()
    grid.add_row("target", f"{cfg.get('url')}  ({cfg.get('api')})")
    grid.add_row("model", str(data.get("model")))
    classes = cfg.get("workload", {}).get("classes", [])
    for c in classes:
        prompt = f"file {c['prompt_file']}" if c.get("prompt_file") else f"prompt {c.get('prompt_tokens')}"
        eos = ", ignore_eos" if c.get("ignore_eos") else ""
        grid.add_row(f"class {c['name']}", f"weight {c['weight']:g}, {prompt}, output {c.get('output_tokens')}{eos}")
    bounds = []
    if cfg.get("requests"):
        bounds.append(f"{cfg['requests']:,} requests")
    if cfg.get("duration_s"):
        bounds.append(f"{cfg['duration_s']:g} s")
    if cfg.get("warmup_requests"):
        bounds.append(f"warm-up {cfg['warmup_requests']:,} requests")
    if cfg.get("warmup_s"):
        bounds.append(f"warm-up {cfg['warmup_s']:g} s")
    grid.add_row("bounds", ", ".join(bounds) or "default")
    grid.add_row("seed", str(cfg.get("workload", {}).get("seed")))
    if data.get("interrupted"):
        grid.add_row("status", Text("interrupted: results cover what ran", style="yellow"))
    title = f"[bold]latscope bench[/] {data.get('created', '')}"
    return Panel(grid, title=title, title_align="left")


def check_line(outcome: dict[str, Any]) -> Text | None:
    """One line for a check a bench step decided (``run.json`` ``steps[].checks``); None for one not tested (a run
    without --retries need not be told that retries were not measured)."""
    if "severity" in outcome:
        text = Text(f"finding {outcome['id']} ({outcome['severity']}): ", style="bold red")
        cost = fmt_ms(outcome.get("cost_ms"), TABLE)
        text.append(f"{cost} {outcome.get('cost_basis', '')}; {outcome.get('rule', '')}")
        text.append(f"\n  fix: {outcome.get('fix', '')}", style="dim")
        return text
    if "evidence" in outcome:
        return Text(f"{outcome['id']}: clear: {outcome.get('reason', '')}", style="green")
    return None


def ray_actors_table(data: dict[str, Any]) -> Table | None:
    """A run on Ray: each step's actors, where they ran, their clock offsets (± uncertainty) and what was lost."""
    rows = [
        (entry["step"], actor) for entry in data.get("steps", []) for actor in entry.get("ray", {}).get("actors", [])
    ]
    if not rows:
        return None
    address = (data.get("ray") or {}).get("address", "?")
    table = Table(title=f"Ray actors ({address})", title_justify="left", header_style="bold")
    for name in ("step", "actor", "host", "node", "clock offset ms", "state"):
        table.add_column(name, justify="right" if name in ("step", "actor", "clock offset ms") else "left")
    for step, a in rows:
        clock = a.get("clock") or {}
        offset = "–" if not clock else f"{clock['offset_ms']:+.3f} ± {clock['uncertainty_ms']:.3f}"
        state = "done" if a["state"] == "done" else f"lost: {a['requests_lost']} requests ({a['lost_reason']})"
        node = str(a.get("node_id") or "?")[:12]
        table.add_row(str(step), str(a["worker"]), str(a.get("host", "?")), node, offset, state)
    return table


def render_run(console: Console, data: dict[str, Any], steps: list[StepSummary], run_dir: str | None = None) -> None:
    """Print a run: header, sweep table (several steps), each step, and where the files are."""
    console.print(header(data))
    if len(steps) > 1:
        console.print(sweep_table(steps))
    checks = {int(entry.get("step", -1)): entry.get("checks") or [] for entry in data.get("steps", [])}
    for s in steps:
        console.print(step_renderable(s))
        for outcome in checks.get(s.step, []):
            line = check_line(outcome)
            if line is not None:
                console.print(line)
    actors = ray_actors_table(data)
    if actors is not None:
        console.print(actors)
    gauges = data.get("server_gauges") or {}
    heatmap = batch_heatmap(
        gauges.get("points", []), gauges.get("steps", []), title="Batch size over time (the server's gauges)"
    )
    if heatmap is not None:
        console.print(heatmap)
    elif gauges.get("why"):
        console.print(Text(f"server gauges: none ({gauges.get('url')}: {gauges['why']})", style="dim"))
    if run_dir is not None:
        console.print(
            Text(f"saved {run_dir}/run.json, requests.parquet, events.parquet  ·  latscope report {run_dir}", "dim")
        )
