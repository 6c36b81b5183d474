"""``latscope probe`` options for server signals: --metrics-url, --no-metrics, --no-trace-context."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

from latscope.cli.main import cli
from latscope.report.server import server_window
from latscope.signals.prometheus import parse_exposition
from latscope.signals.scrape import MetricsWindow
from tests.support.stream_server import Handler, Received, Reply, ServerThread, paced_stream

VLLM_AFTER = (Path(__file__).resolve().parent.parent / "fixtures" / "prometheus" / "vllm.after.prom").read_bytes()


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["probe", *args], env={"COLUMNS": "160"}, catch_exceptions=False)
    return result.exit_code, result.stdout + result.stderr


def _with_metrics_at(path: str) -> Handler:
    stream = paced_stream(2)

    async def handler(request: Received, reply: Reply) -> None:
        if request.method == "GET" and request.target == path:
            await reply.start(200, [("content-type", "text/plain"), ("content-length", str(len(VLLM_AFTER)))])
            await reply.send(VLLM_AFTER)
            await reply.end()
        elif request.method == "GET":
            await reply.send_json(404, {"error": {"message": "no such route"}})
        else:
            await stream(request, reply)

    return handler


def test_a_missing_metrics_endpoint_is_one_quiet_line() -> None:
    with ServerThread(_with_metrics_at("/elsewhere")) as server:
        code, out = _invoke(server.base_url, "-m", "m", "-n", "1")
    assert code == 0, out
    assert f"server metrics: none ({server.base_url.removesuffix('/v1')}/metrics: it answered HTTP 404)" in out


def test_metrics_url_scrapes_there_and_summarises_the_window() -> None:
    with ServerThread(_with_metrics_at("/custom/metrics")) as server:
        url = server.base_url.removesuffix("/v1") + "/custom/metrics"
        code, out = _invoke(server.base_url, "-m", "m", "-n", "1", "--metrics-url", url)
        scraped = [r.target for r in server.requests if r.method == "GET"]
    assert code == 0, out
    assert scraped == ["/custom/metrics", "/custom/metrics"]
    assert f"server metrics {url}" in out and "read as vllm" in out
    assert "requests finished" in out and "vllm:request_success" in out


def test_no_metrics_and_no_trace_context() -> None:
    with ServerThread(_with_metrics_at("/metrics")) as server:
        code, out = _invoke(server.base_url, "-m", "m", "-n", "1", "--no-metrics", "--no-trace-context")
        requests = list(server.requests)
    assert code == 0, out
    assert [r.method for r in requests] == ["POST"]
    assert requests[0].header("traceparent") is None
    assert "server metrics" not in out


def test_the_trace_context_is_sent_by_default() -> None:
    with ServerThread(paced_stream(1)) as server:
        code, out = _invoke(server.base_url, "-m", "m", "-n", "1", "--no-metrics")
        sent = server.requests[0].header("traceparent")
    assert code == 0, out
    assert sent is not None and sent.startswith("00-")


def test_metrics_url_and_no_metrics_conflict() -> None:
    code, out = _invoke("http://127.0.0.1:9/v1", "--metrics-url", "http://127.0.0.1:9/metrics", "--no-metrics")
    assert code == 2 and "give --metrics-url or --no-metrics, not both" in out


def test_help_teaches_the_signal_options() -> None:
    code, out = _invoke("--help")
    assert code == 0
    for text in ("--metrics-url URL", "--no-metrics", "--no-trace-context", "client-side", "--metrics-url http://"):
        assert text in out, text


def test_metrics_from_an_unknown_server_are_named_as_such() -> None:
    snapshot = parse_exposition("# TYPE myapp_requests_total counter\nmyapp_requests_total 3\n", taken_at_s=1.0)
    window = MetricsWindow("http://h/metrics", snapshot, snapshot, warnings=("prometheus: no adapter for these",))
    console = Console(width=120, record=True, color_system=None)
    console.print(server_window(window))
    text = console.export_text()
    assert "server metrics http://h/metrics · window 0.00 s" in text
    assert "not from a server latscope knows: prometheus: no adapter for these" in text
