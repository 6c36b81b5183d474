"""The ``latscope`` command: a click group whose subcommands live one per module in this package."""

from __future__ import annotations

import importlib
import importlib.util

import click

#: subcommand name → "module:attribute" of its click command (imported only when used, so ``--help`` stays fast).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "probe": ("latscope.cli.probe", "Send a few streamed requests and draw each one's timeline as a waterfall."),
    "lab": ("latscope.cli.lab", "Run the reference OpenAI-compatible server with faults switched on or off."),
    "diagnose": ("latscope.cli.diagnose", "Run the experiment battery against an endpoint and name the bottlenecks."),
    "bench": ("latscope.cli.bench", "Load-test an endpoint: concurrency or arrival rates, percentiles, goodput."),
    "report": ("latscope.cli.report", "Print the summary of a saved bench run again (or write it as HTML)."),
    "compare": ("latscope.cli.compare", "Compare two bench runs or two diagnoses: what changed, how sure, and where."),
}


class LazyGroup(click.Group):
    """A group that imports a subcommand's module only when that subcommand runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in SUBCOMMANDS if _available(name)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            return None
        module_name, _ = SUBCOMMANDS[cmd_name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None
            raise
        command = getattr(module, "command", None)
        return command if isinstance(command, click.Command) else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _available(name: str) -> bool:
    return importlib.util.find_spec(SUBCOMMANDS[name][0]) is not None


def _print_version(ctx: click.Context, value: bool) -> None:
    """``--version``: the package's version and :func:`latscope.compiled.describe` (imported only when asked)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    from latscope import compiled

    click.echo(f"latscope {version('latscope')}\n{compiled.describe()}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _param, value: _print_version(ctx, value),
    help="Show the version and which compiled hot paths this install has, and exit.",
)
def cli() -> None:
    """latscope — find where an LLM API request's latency hides.

    It records the full timeline of streamed requests (DNS, TCP, TLS, send, wait, every token), joins it with what
    the server reports, and runs experiments that name the bottleneck with its cost in milliseconds and the fix.

    \b
    Start here:
      latscope diagnose                 diagnose the embedded lab (a deliberately naive server)
      latscope probe URL                draw the timeline of a few requests to an OpenAI-style base URL
      latscope diagnose URL             diagnose your own endpoint
    """


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
