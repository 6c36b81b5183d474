"""``--server-spans [[HOST:]PORT]``: where the receiver of the server's own spans listens (loopback by default)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from latscope.cli.main import cli
from latscope.cli.options import DEFAULT_SPAN_ADDRESS, span_address


@pytest.mark.parametrize(
    ("value", "address"),
    [
        ("4318", ("127.0.0.1", 4318)),
        (":4318", ("127.0.0.1", 4318)),
        ("0.0.0.0:9000", ("0.0.0.0", 9000)),
        ("[::1]:4318", ("::1", 4318)),
        (DEFAULT_SPAN_ADDRESS, ("127.0.0.1", 4318)),
    ],
)
def test_the_address_defaults_to_loopback(value: str, address: tuple[str, int]) -> None:
    assert span_address(value) == address


@pytest.mark.parametrize("value", ["abc", "host:", "127.0.0.1:70000", "127.0.0.1:-1"])
def test_a_bad_address_names_the_option(value: str) -> None:
    with pytest.raises(click.BadParameter, match="HOST:"):
        span_address(value)


@pytest.mark.parametrize("command", ["probe", "diagnose"])
def test_both_commands_refuse_a_bad_address_before_any_request(command: str) -> None:
    result = CliRunner().invoke(cli, [command, "http://127.0.0.1:9/v1", "--server-spans", "nope"])
    assert result.exit_code == 2 and "--server-spans" in result.output, result.output
