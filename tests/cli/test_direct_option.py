"""``latscope diagnose --direct UPSTREAM_URL``: taught in --help, accepted, and what gateway-overhead compares with;
``latscope lab``'s gateway hop options."""

from __future__ import annotations

import orjson
from click.testing import CliRunner

from latscope.cli.lab import command as lab_command
from latscope.cli.main import cli
from latscope.diagnose.experiments.overhead import PAIRS
from tests.support.stream_server import ServerThread, models_handler, paced_stream


def _diagnose(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["diagnose", *args], catch_exceptions=False, env={"COLUMNS": "200"})
    return result.exit_code, result.stdout


def test_help_teaches_direct_as_the_gateways_upstream_for_a_paired_comparison() -> None:
    code, out = _diagnose("--help")
    assert code == 0
    text = " ".join(out.split())
    assert "--direct UPSTREAM_URL" in text
    assert "the same requests go through the gateway and straight to the upstream, in pairs" in text
    assert "Without it gateway-overhead is not tested" in text


def test_direct_is_accepted_and_the_comparison_reads_both_servers() -> None:
    with (
        ServerThread(models_handler(paced_stream(4))) as gateway,
        ServerThread(models_handler(paced_stream(4))) as upstream,
    ):
        code, out = _diagnose(
            gateway.base_url, "--direct", upstream.base_url, "--only", "gateway-overhead", "--quick", "--json", "-"
        )
    assert code == 0, out
    data = orjson.loads(out[out.index("{") :])
    outcomes = [*data["findings"], *data["clear"], *data["inconclusive"], *data["not_tested"]]
    (outcome,) = [o for o in outcomes if o["id"] == "gateway-overhead"]
    assert outcome["evidence"]["direct_url"] == upstream.base_url, outcome
    assert outcome["evidence"]["pairs"] == PAIRS


def test_without_direct_the_report_says_to_pass_it() -> None:
    with ServerThread(models_handler(paced_stream(4))) as server:
        code, out = _diagnose(server.base_url, "--only", "gateway-overhead", "--quick")
    assert code == 2, out  # the only check asked for could not measure: "could not diagnose"
    assert "--direct UPSTREAM_URL" in " ".join(out.split())


def test_the_lab_offers_the_gateway_hops_costs() -> None:
    result = CliRunner().invoke(lab_command, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--gateway-hop-ms" in result.output and "--gateway-chunk-ms" in result.output


def test_the_lab_refuses_the_hop_behind_nginx() -> None:
    result = CliRunner().invoke(lab_command, ["--fault", "gateway-overhead", "--edge", "nginx"])
    assert result.exit_code != 0 and "cannot be combined" in result.output
