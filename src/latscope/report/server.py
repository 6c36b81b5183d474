"""What a server's Prometheus metrics said about a window of requests, as a table: per-request means (ms) over the
requests it finished, engine time per phase, queue and KV-cache gauges, with the metric each number came from."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from latscope.report.format import FIXED_2, fmt_ms
from latscope.signals.scrape import MetricsWindow, NotAvailable

#: The durations of :class:`~latscope.signals.windowstats.ServerWindowStats` shown, in request-path order (ms).
DURATION_FIELDS = (
    "mean_parse_ms", "mean_validate_ms", "mean_queue_ms", "mean_prefill_ms", "mean_decode_ms", "mean_inference_ms",
    "mean_ttft_ms", "mean_e2e_ms", "mean_itl_ms", "mean_api_overhead_ms", "total_prefill_ms", "total_decode_ms",
)  # fmt: skip

#: Words of a field name written as users know them.
_ACRONYMS = {"ttft": "TTFT", "itl": "ITL", "api": "API"}


def duration_label(field_name: str) -> str:
    """``mean_ttft_ms`` → "mean TTFT"."""
    return " ".join(_ACRONYMS.get(word, word) for word in field_name.removesuffix("_ms").split("_"))


def server_window(window: MetricsWindow | NotAvailable) -> RenderableType:
    """What the server's Prometheus metrics say about the probe's window: per-request means (ms) over the
    requests it finished, and its queue and KV-cache gauges; or why there are none."""
    if isinstance(window, NotAvailable):
        return Text(f"server metrics: none ({window.url}: {window.why})", style="dim")
    head = Text("server metrics ", style="bold")
    interval = window.interval_s
    head.append(f"{window.url}", style="dim")
    if interval is not None:
        head.append(f" · window {interval:.2f} s", style="dim")
    stats = window.stats
    if stats is None:
        why = next((w for w in window.warnings if "no adapter" in w), "no adapter knows these metric names")
        return Group(head, Text(f"not from a server latscope knows: {why}", style="yellow"))
    head.append(f" · read as {stats.family}", style="dim")
    table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
    table.add_column(style="dim", no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    table.add_column(style="dim", overflow="fold")
    sources = stats.sources
    if stats.requests_finished is not None:
        table.add_row("requests finished", f"{stats.requests_finished:g}", sources.get("requests_finished", ""))
    for field_name in DURATION_FIELDS:
        value = getattr(stats, field_name)
        if value is not None:
            table.add_row(duration_label(field_name), fmt_ms(value, FIXED_2), sources.get(field_name, ""))
    for label, field_name, gauge, scale, unit in (
        ("waiting", "waiting", stats.waiting, 1.0, ""),
        ("running", "running", stats.running, 1.0, ""),
        ("KV cache", "kv_usage", stats.kv_usage, 100.0, " %"),
    ):
        if gauge is not None:
            shown = f"max {gauge.max * scale:g}{unit}, last {gauge.last * scale:g}{unit}"
            table.add_row(label, shown, sources.get(field_name, ""))
    if stats.mean_tokens_per_step is not None:
        table.add_row("tokens per step", f"{stats.mean_tokens_per_step:.1f}", sources.get("mean_tokens_per_step", ""))
    if stats.preemptions:
        table.add_row("preemptions", f"{stats.preemptions:g}", sources.get("preemptions", ""))
    parts: list[RenderableType] = [head, table]
    parts += [Text(f"! {warning}", style="yellow") for warning in window.warnings]
    return Group(*parts)
