"""``latscope report RUN``: print a saved bench run's summary again (tables, or JSON for machines)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson
from rich.console import Console

from latscope.cli.html import require_html, write_html
from latscope.load.bench import load_summaries, summarize_dir
from latscope.load.slo import SloSpecError, parse_slo
from latscope.runs.storage import RunFormatError, read_run_json


@click.command("report")
@click.argument("run", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (run.json, or the recomputed steps).")
@click.option("--slo", help="Recompute goodput from the saved tables against these objectives, e.g. ttft=300ms.")
@click.option("--recompute", is_flag=True, help="Recompute every summary from requests.parquet and events.parquet.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="Write a self-contained HTML report (waterfalls, token arrivals, CDFs per step, the server's batch) to FILE.",
)
def command(run: str, as_json: bool, slo: str | None, recompute: bool, html_path: str | None) -> None:
    """Print the summary of the bench run saved in RUN (a directory written by `latscope bench`); --html writes it
    as one HTML file that opens offline."""
    from latscope.report.run import render_run

    require_html(html_path)
    run_dir = Path(run)
    if run_dir.is_file():
        run_dir = run_dir.parent
    try:
        data = read_run_json(run_dir)
        objective = parse_slo(slo) if slo else None
        if objective is not None or recompute:
            steps = summarize_dir(run_dir, objective)
            for entry, summary in zip(data.get("steps", []), steps, strict=False):
                entry["summary"] = summary.to_dict()
            if objective is not None:
                data.setdefault("config", {})["slo"] = objective.to_dict()
        else:
            steps = load_summaries(data)
    except (RunFormatError, SloSpecError) as exc:
        raise click.ClickException(str(exc)) from None
    except (OSError, KeyError, ValueError) as exc:
        raise click.ClickException(f"cannot read the run in {run_dir}: {exc}") from None
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        render_run(Console(), data, steps, str(run_dir))
    if html_path is not None:

        def build() -> str:
            from latscope.report.html import run_html

            return run_html(run_dir)

        write_html(Console(stderr=as_json), html_path, build)
