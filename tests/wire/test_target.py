"""The resolved target: one value for where requests go and how, redacted wherever it shows."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from latscope.cli.options import TargetOptions, target_options
from latscope.load.arrivals import ClosedLoop
from latscope.load.config import BenchConfig
from latscope.load.workload import Workload
from latscope.wire import Timeouts
from latscope.wire.target import Target, TargetError

KEY = "sk-target-test-key-0123456789"


def test_the_url_gets_the_dialects_base_path_and_the_key_its_header() -> None:
    openai = Target.resolve("127.0.0.1:8000", api_key=KEY)
    assert openai.base_url == "http://127.0.0.1:8000/v1"
    assert ("Authorization", f"Bearer {KEY}") in openai.headers
    anthropic = Target.resolve("https://api.example", dialect="anthropic.messages", api_key=KEY)
    assert anthropic.base_url == "https://api.example/v1" and ("x-api-key", KEY) in anthropic.headers
    ollama = Target.resolve("http://localhost:11434/", dialect="ollama.chat")
    assert ollama.base_url == "http://localhost:11434" and ollama.headers == ()


def test_the_caller_headers_come_first_and_the_key_last() -> None:
    t = Target.resolve("http://h", headers=[("X-Team", "perf")], api_key=KEY)
    assert [name for name, _ in t.headers] == ["X-Team", "Authorization"]


def test_neither_repr_nor_to_dict_shows_a_credential() -> None:
    t = Target.resolve("https://user:pw@h/v1?api_key=q", api_key=KEY, headers=[("Cookie", "session=abc")])
    for shown in (repr(t), str(t.to_dict())):
        assert KEY not in shown and "session=abc" not in shown and ":pw@" not in shown
    assert t.to_dict()["headers"]["authorization"] == "[redacted]"


def test_to_dict_round_trips_with_the_real_url_and_headers_given_back() -> None:
    t = Target.resolve(
        "https://h:8443",
        dialect="openai.completions",
        api_key=KEY,
        verify=False,
        ca_file="/tmp/ca.pem",
        timeouts=Timeouts(connect_s=3.0, total_s=9.0),
        stamps="kernel",
        http2=False,
        max_connections_per_origin=4,
        trace_context=False,
    )
    assert Target.from_dict(t.to_dict(), url=t.base_url, headers=t.headers) == t


def test_at_points_the_same_settings_at_another_server() -> None:
    t = Target.resolve("http://gateway:4000", dialect="ollama.chat", verify=False)
    upstream = t.at("http://engine:11434/")
    assert upstream.base_url == "http://engine:11434" and upstream.verify is False and upstream.dialect is t.dialect


@pytest.mark.parametrize(
    ("url", "settings", "message"),
    [
        ("ftp://h", {}, "http:// or https://"),
        ("http://h", {"http3": True}, "https://"),
        ("http://h", {"stamps": "tsc"}, "--stamps"),
        ("http://h", {"max_connections_per_origin": 0}, "at least one"),
    ],
)
def test_a_target_that_cannot_be_reached_so_is_refused_naming_why(
    url: str, settings: dict[str, object], message: str
) -> None:
    with pytest.raises(TargetError, match=message):
        Target.resolve(url, **settings)  # type: ignore[arg-type]


def test_a_client_made_from_the_target_carries_its_settings_and_takes_overrides() -> None:
    t = Target.resolve("http://h", verify=False, stamps="user", timeouts=Timeouts(read_s=7.0), trace_context=False)
    client = t.client(quickack=True)
    assert (client.verify, client.stamps, client.timeouts.read_s, client.trace_context, client.quickack) == (
        False,
        "user",
        7.0,
        False,
        True,
    )
    assert t.client(trace_context=True).trace_context is True


def test_timeout_bounds_every_phase_and_max_time_the_whole_request() -> None:
    default = Timeouts(connect_s=10.0, headers_s=60.0, read_s=30.0)
    assert TargetOptions().timeouts(default) == default
    both = TargetOptions(timeout_s=5.0, max_time_s=20.0).timeouts(default)
    assert both == Timeouts(connect_s=5.0, tls_s=5.0, send_s=5.0, headers_s=5.0, read_s=5.0, total_s=20.0)


def _command() -> click.Command:
    @click.command()
    @click.argument("url")
    @target_options(timeout_help="10 s")
    def show(url: str, target: TargetOptions) -> None:
        resolved = target.resolve(url, "openai.chat")
        click.echo(f"{resolved.timeouts.read_s} {resolved.timeouts.total_s} {resolved.stamps}")

    return show


def test_the_target_options_take_durations_and_name_a_bad_one() -> None:
    runner = CliRunner()
    ok = runner.invoke(_command(), ["http://h", "--timeout", "500ms", "--max-time", "2m", "--stamps", "user"])
    assert ok.exit_code == 0 and ok.output.split() == ["0.5", "120.0", "user"]
    bad = runner.invoke(_command(), ["http://h", "--timeout", "soon"])
    assert bad.exit_code == 2 and "--timeout" in bad.output and "soon" in bad.output
    scheme = runner.invoke(_command(), ["ftp://h"])
    assert scheme.exit_code == 2 and "http:// or https://" in scheme.output


def test_run_json_keeps_the_target_redacted_and_reads_it_back() -> None:
    config = BenchConfig(Target.resolve("http://h", api_key=KEY), (ClosedLoop(1),), Workload.single())
    data = config.to_dict()
    assert KEY not in str(data) and data["target"]["dialect"] == "openai.chat"
    assert BenchConfig.from_dict(data, headers=config.target.headers) == config
