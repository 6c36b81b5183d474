"""``latscope compare A B``: two bench runs (or two diagnose JSON files) before and after, with significance."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console
from rich.text import Text

from latscope.cli.html import require_html, write_html
from latscope.load.slo import Slo, SloSpecError, parse_slo
from latscope.report.compare.result import DEFAULT_MIN_CHANGE_SHARE
from latscope.report.compare.stats import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES
from latscope.runs.storage import RUN_JSON, RunFormatError

DIAGNOSIS_SCHEMA = "latscope.diagnosis/1"


def _kind(path: Path) -> str:
    """``"bench"`` for a run directory (or its run.json), ``"diagnosis"`` for a diagnose JSON file."""
    if path.is_dir() or path.name == RUN_JSON:
        return "bench"
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise click.ClickException(f"{path}: neither a bench run directory nor a JSON file ({exc})") from None
    if isinstance(data, dict) and data.get("schema") == DIAGNOSIS_SCHEMA:
        return "diagnosis"
    if isinstance(data, dict) and str(data.get("schema", "")).startswith("latscope.bench/"):
        return "bench"
    got = data.get("schema") if isinstance(data, dict) else type(data).__name__
    raise click.ClickException(f"{path}: expected a bench run or a {DIAGNOSIS_SCHEMA} file, got schema {got!r}")


def _refuse(differences: list[str]) -> None:
    lines = "\n".join(f"  - {d}" for d in differences)
    raise click.ClickException(
        f"the two runs measured different workloads, so their latencies are not comparable:\n{lines}\n"
        "Run both with the same workload, or pass --force to compare anyway."
    )


@click.command("compare", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.argument("a", type=click.Path(exists=True))
@click.argument("b", type=click.Path(exists=True))
@click.option("--force", is_flag=True, help="Compare even when the workloads differ (they are listed).")
@click.option(
    "--json",
    "json_path",
    metavar="FILE",
    help="Write the comparison as JSON (latscope.compare/1) to FILE ('-': stdout).",
)
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Write a self-contained HTML report.")
@click.option("--slo", help="Goodput objectives for both runs, e.g. ttft=300ms (default: A's, else B's).")
@click.option(
    "--confidence",
    type=click.FloatRange(0.5, 0.999),
    default=DEFAULT_CONFIDENCE,
    show_default=True,
    help="Confidence of the intervals.",
)
@click.option(
    "--resamples",
    type=click.IntRange(200, 100_000),
    default=DEFAULT_RESAMPLES,
    show_default=True,
    help="Bootstrap draws per interval.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap draws.")
@click.option(
    "--min-change",
    type=click.FloatRange(0, 100),
    default=DEFAULT_MIN_CHANGE_SHARE * 100,
    show_default=True,
    help="Smallest latency change called significant, percent of A (two runs of one server differ by a few).",
)
def command(
    a: str,
    b: str,
    force: bool,
    json_path: str | None,
    html_path: str | None,
    slo: str | None,
    confidence: float,
    resamples: int,
    seed: int,
    min_change: float,
) -> None:
    """Compare run A (before) with run B (after): bench run directories, or diagnose --json files.

    \b
    For bench runs, per step: TTFT, ITL (every gap), TPOT and E2E at p50/p95/p99, goodput and error rate, each
    change B − A with a bootstrap confidence interval and whether it is significant, and the change of TTFT and
    E2E split over the request's phases (pool wait, connect, TLS, send, the server's parse/queue/prefill, first
    token, stream). For diagnoses: the findings that appeared, disappeared or changed cost.

    \b
    Examples:
      latscope compare runs/before runs/after
      latscope compare naive.json tuned.json --html compare.html
    """
    require_html(html_path)
    path_a, path_b = Path(a), Path(b)
    kind_a, kind_b = _kind(path_a), _kind(path_b)
    if kind_a != kind_b:
        raise click.UsageError(f"A is a {kind_a}, B a {kind_b}: compare two bench runs or two diagnoses")
    to_stdout = json_path == "-"
    console = Console(stderr=to_stdout)
    if kind_a == "bench":
        settings = _RunSettings(slo, force, seed, resamples, confidence, min_change / 100)
        data = _compare_runs(console, path_a, path_b, settings, html_path)
    else:
        data = _compare_diagnoses(console, a, b, force, html_path)
    if json_path is not None:
        payload = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        if to_stdout:
            sys.stdout.buffer.write(payload)
            sys.stdout.flush()
        else:
            Path(json_path).write_bytes(payload)
            console.print(Text(f"wrote {json_path}", style="dim"))


@dataclass(frozen=True, slots=True)
class _RunSettings:
    """How two bench runs are compared: the options of ``latscope compare`` that only runs use."""

    slo: str | None
    force: bool
    seed: int
    resamples: int
    confidence: float
    min_change_share: float  #: 0…1 of A's value


def _compare_runs(
    console: Console, path_a: Path, path_b: Path, settings: _RunSettings, html_path: str | None
) -> dict[str, Any]:
    """Compare two bench runs: print the comparison, write the HTML page when asked; the ``--json`` object."""
    from latscope.report.compare.result import compare_runs
    from latscope.report.compare.samples import read_samples, reports_server_phases_dir
    from latscope.report.compare.terminal import run_comparison_renderable
    from latscope.report.compare.workload import run_workload_differences

    try:
        objective = parse_slo(settings.slo) if settings.slo else None
        dirs = [p.parent if p.is_file() else p for p in (path_a, path_b)]
        split = reports_server_phases_dir(dirs[0]) and reports_server_phases_dir(dirs[1])
        run_a = read_samples(dirs[0], objective, server_reported=split)
        run_b = read_samples(dirs[1], objective or _run_slo(run_a.slo), server_reported=split)
    except SloSpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--slo") from None
    except (RunFormatError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    differences = run_workload_differences(run_a.data, run_b.data)
    if differences and not settings.force:
        _refuse(differences)
    result = compare_runs(
        run_a,
        run_b,
        workload_differences=differences,
        forced=settings.force,
        seed=settings.seed,
        resamples=settings.resamples,
        confidence=settings.confidence,
        min_change_share=settings.min_change_share,
    )
    console.print(run_comparison_renderable(result))
    if html_path is not None:

        def build_runs() -> str:
            from latscope.report.html.compare import compare_runs_html

            return compare_runs_html(result, run_a, run_b)

        write_html(console, html_path, build_runs)
    return result.to_dict()


def _compare_diagnoses(console: Console, a: str, b: str, force: bool, html_path: str | None) -> dict[str, Any]:
    """Compare the diagnose JSON files ``a`` and ``b``: print the comparison, write the HTML page when asked; the
    ``--json`` object."""
    from latscope.report.compare.result import compare_diagnoses
    from latscope.report.compare.terminal import diagnosis_comparison_renderable
    from latscope.report.compare.workload import diagnosis_workload_differences

    diag_a, diag_b = orjson.loads(Path(a).read_bytes()), orjson.loads(Path(b).read_bytes())
    differences = diagnosis_workload_differences(diag_a, diag_b)
    if differences and not force:
        _refuse(differences)
    diag_result = compare_diagnoses(diag_a, diag_b, path_a=a, path_b=b, workload_differences=differences, forced=force)
    console.print(diagnosis_comparison_renderable(diag_result))
    if html_path is not None:

        def build_diagnoses() -> str:
            from latscope.report.html.compare import compare_diagnoses_html

            return compare_diagnoses_html(diag_result, diag_a, diag_b)

        write_html(console, html_path, build_diagnoses)
    return diag_result.to_dict()


def _run_slo(slo: dict[str, float] | None) -> Slo | None:
    """A's objectives, for B's goodput."""
    return None if slo is None else Slo.from_dict(slo)
