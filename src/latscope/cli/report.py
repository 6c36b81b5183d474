"""``latscope report RUN``: print a saved bench run's summary again (tables, or JSON for machines)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson
from rich.console import Console

from latscope.load.bench import load_summaries, summarize_dir
from latscope.load.slo import SloSpecError, parse_slo
from latscope.load.storage import RunFormatError, read_run_json


@click.command("report")
@click.argument("run", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (run.json, or the recomputed steps).")
@click.option("--slo", help="Recompute goodput from the saved tables against these objectives, e.g. ttft=300ms.")
@click.option("--recompute", is_flag=True, help="Recompute every summary from requests.parquet and events.parquet.")
def command(run: str, as_json: bool, slo: str | None, recompute: bool) -> None:
    """Print the summary of the bench run saved in RUN (a directory written by `latscope bench`)."""
    from latscope.report.run import render_run

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
        return
    render_run(Console(), data, steps, str(run_dir))
