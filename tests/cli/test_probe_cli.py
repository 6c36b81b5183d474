"""``latscope probe`` through click's CliRunner against a test server in a background thread."""

from __future__ import annotations

import socket

import orjson
from click.testing import CliRunner

from latscope.cli.main import cli
from tests.support.stream_server import Received, Reply, ServerThread, models_handler, paced_stream


def _invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(cli, ["probe", *args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_probe_draws_a_waterfall_per_request_and_a_table() -> None:
    with ServerThread(models_handler(paced_stream(4))) as server:
        code, out, _ = _invoke(server.base_url.removesuffix("/v1"), "-n", "2")
    assert code == 0, out
    assert "model test-model" in out
    assert out.count("request 1/2") == 1 and out.count("request 2/2") == 1
    assert "new connection #" in out and "reused connection #" in out
    assert "first token" in out and "4 tokens" in out
    assert "1 connection(s) opened for 2 request(s), 1 reused" in out


def test_probe_json_to_stdout_is_the_timelines_and_metrics() -> None:
    with ServerThread(paced_stream(3)) as server:
        code, out, err = _invoke(server.base_url, "--model", "m", "-n", "1", "--json", "-")
    assert code == 0, err
    data = orjson.loads(out)
    assert data["schema"] == "latscope.probe/1"
    assert data["requests"][0]["metrics"]["output_tokens"] == 3
    assert "request 1/1" in err  # the report went to stderr


def test_probe_json_file_and_the_api_key_never_shows(tmp_path: object) -> None:
    path = f"{tmp_path}/probe.json"
    with ServerThread(paced_stream(2)) as server:
        code, out, _ = _invoke(
            server.base_url, "-m", "m", "-n", "1", "--json", path, env={"OPENAI_API_KEY": "sk-very-secret"}
        )
        sent = server.requests[0].header("authorization")
    assert code == 0
    assert sent == "Bearer sk-very-secret"
    with open(path, "rb") as fh:
        saved = fh.read()
    assert b"sk-very-secret" not in saved and "sk-very-secret" not in out
    assert orjson.loads(saved)["requests"][0]["timeline"]["request_headers"]["authorization"] == "[redacted]"


def test_headers_completions_and_http1_options() -> None:
    with ServerThread(paced_stream(1)) as server:
        code, out, _ = _invoke(
            server.base_url, "-m", "m", "-n", "1", "--completions", "-H", "X-Tenant: blue", "--http1"
        )
        request = next(r for r in server.requests if r.method == "POST")  # not the /metrics scrape
    assert code == 0, out
    assert request.target == "/v1/completions" and request.header("x-tenant") == "blue"


def test_an_unreachable_target_exits_2_naming_the_phase() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out, _ = _invoke(f"http://127.0.0.1:{port}", "-m", "m")
    assert code == 2
    assert "error: cannot reach the target: connect failed: TCP connect to" in out
    assert "Traceback" not in out


def test_an_unreachable_model_list_exits_2_naming_the_phase() -> None:
    code, out, _ = _invoke("http://no-such-host.invalid:8000")
    assert code == 2
    assert "error: could not list the models" in out and "dns failed" in out


def test_an_http_error_exits_2_with_the_api_message() -> None:
    async def unauthorized(request: Received, reply: Reply) -> None:
        await reply.send_json(401, {"error": {"message": "Invalid API key", "type": "auth"}})

    with ServerThread(unauthorized) as server:
        code, out, _ = _invoke(server.base_url, "-m", "m", "-n", "1")
    assert code == 2
    assert "HTTP 401: Invalid API key" in out


def test_a_malformed_header_is_a_usage_error() -> None:
    code, out, err = _invoke("http://127.0.0.1:9/v1", "-H", "no-colon")
    assert code == 2 and "is not 'Name: value'" in (out + err) and "no-colon" not in (out + err)


def test_help_teaches_with_examples() -> None:
    code, out, _ = _invoke("--help")
    assert code == 0
    assert "Examples:" in out and "latscope probe http://127.0.0.1:8000" in out and "OPENAI_API_KEY" in out


def test_browser_sends_twelve_at_once_over_six_connections_and_says_how_many_waited() -> None:
    with ServerThread(paced_stream(4, interval_s=0.02)) as server:
        code, out, err = _invoke(server.base_url, "-m", "m", "--browser", "--http1", "--no-metrics", "--json", "-")
    assert code == 0, err
    data = orjson.loads(out)
    assert data["browser"] is True and len(data["requests"]) == 12
    (pool,) = data["pool"].values()
    assert pool["connections_opened"] == 6, pool
    said = " ".join(err.split())  # the report wraps at the terminal's width
    line = "browser pool: 12 requests at once, at most 6 connections per host: 6 waited for a connection"
    assert line in said, said[-600:]
