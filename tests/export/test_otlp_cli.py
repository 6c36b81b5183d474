"""``--otlp`` and ``--otlp-file`` on probe, bench and diagnose: spans received by a real OTLP/HTTP receiver (decoded
with opentelemetry-proto), their structure, their durations, and the trace context the lab saw on the wire."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from click.testing import CliRunner

from latscope.cli.main import cli
from latscope.export.spans import PHASE_STARTS
from tests.support.otlp_receiver import LabThread, OtlpReceiver, ReceivedSpan, by_trace, read_json_lines, spans_of

pytestmark = pytest.mark.timeout(120)

PHASES = {name for name, _ in PHASE_STARTS}
STATUS_ERROR = 2


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def _check_request_tree(root: ReceivedSpan, children: list[ReceivedSpan]) -> None:
    """Phase spans inside the request span, end to end, adding up to its duration (within 1 µs)."""
    assert children, root.name
    assert {c.name for c in children} <= PHASES
    ordered = sorted(children, key=lambda c: (c.start_ns, c.end_ns))
    assert ordered[0].start_ns == root.start_ns
    assert ordered[-1].end_ns == root.end_ns
    for a, b in itertools.pairwise(ordered):
        assert a.end_ns == b.start_ns
    assert abs(sum(c.end_ns - c.start_ns for c in children) - (root.end_ns - root.start_ns)) <= 1_000


def test_probe_sends_a_span_per_request_whose_context_is_the_traceparent_on_the_wire() -> None:
    with OtlpReceiver() as receiver, LabThread(profile="tuned") as lab:
        code, out = _invoke("probe", lab.url, "-n", "2", "--max-tokens", "6", "--no-metrics", "--otlp", receiver.url)
        wire = [r.traceparent for r in lab.records if r.path.endswith("/chat/completions")]
    assert code == 0, out
    assert f"to {receiver.url}" in out.replace("\n", "")
    spans = spans_of(receiver.requests)
    trees = list(by_trace(spans))
    assert len(trees) == 2
    assert len(wire) == 2 and all(wire)
    for (root, children), traceparent in zip(trees, wire, strict=True):
        assert traceparent is not None
        _, trace_id, parent_id, _ = traceparent.split("-")
        assert (root.trace_id, root.span_id) == (trace_id, parent_id)  # the server's parent is this span
        assert root.parent_span_id == ""
        _check_request_tree(root, children)
        assert {"send", "wait", "first token", "stream"} <= {c.name for c in children}
        assert root.status_code == 0
        a = root.attributes
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] and root.name == f"chat {a['gen_ai.request.model']}"
        assert a["gen_ai.request.max_tokens"] == 6
        assert a["gen_ai.usage.output_tokens"] == 6 and a["gen_ai.usage.input_tokens"] > 0
        assert a["gen_ai.response.finish_reasons"] == ["length"]
        assert a["server.address"] == "127.0.0.1" and a["server.port"] == lab.port
        assert 0 < a["latscope.ttft_ms"] < a["latscope.e2e_ms"]
        assert a["latscope.tpot_ms"] > 0
        assert a["latscope.e2e_ms"] * 1e6 == pytest.approx(root.end_ns - root.start_ns, abs=1)
        assert "latscope.server.queue_ms" in a
        assert root.resource["service.name"] == "latscope"
    first_children = {c.name for c in trees[0][1]}
    assert "connect" in first_children  # the first request opened the connection; the second reused it
    assert "connect" not in {c.name for c in trees[1][1]}


def test_a_failed_request_is_a_span_with_status_error_naming_its_phase(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver, LabThread(profile="tuned") as lab:
        code, out = _invoke("probe", lab.url, "-m", "no-such-model", "-n", "1", "--no-metrics", "--otlp", receiver.url)
    assert code == 2, out
    (root, children), *_ = by_trace(spans_of(receiver.requests))
    assert root.status_code == STATUS_ERROR
    assert root.status_message.split(":")[0] in {"headers", "stream"}
    assert "404" in root.status_message or "no-such-model" in root.status_message
    assert root.attributes["error.type"] == "http-status"
    assert root.attributes["http.response.status_code"] == 404
    _check_request_tree(root, children)
    failed = [c for c in children if c.status_code == STATUS_ERROR]
    assert len(failed) == 1 and failed[0].status_message == root.status_message
    # the error status sits on the phase that failed: waiting for the head, or reading the stream
    assert failed[0].name == {"headers": "wait", "stream": "stream"}[root.attributes["latscope.error.phase"]]


def test_probe_otlp_file_is_otlp_json_lines_with_the_same_structure(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    with LabThread(profile="tuned") as lab:
        code, out = _invoke(
            "probe", lab.url, "-n", "2", "--max-tokens", "4", "--no-metrics", "--api-key", "sk-secret-123",
            "--otlp-file", str(path),
        )  # fmt: skip
        wire = [r.traceparent for r in lab.records if r.path.endswith("/chat/completions")]
    assert code == 0, out
    assert b"sk-secret-123" not in path.read_bytes()
    requests = read_json_lines(path)
    trees = list(by_trace(spans_of(requests)))
    assert [root.trace_id for root, _ in trees] == [str(w).split("-")[1] for w in wire]
    for root, children in trees:
        _check_request_tree(root, children)
        assert root.attributes["gen_ai.usage.output_tokens"] == 4


def test_bench_exports_the_spans_of_its_run_after_it(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver, LabThread(profile="tuned") as lab:
        code, out = _invoke(
            "bench", lab.url, "-c", "2", "-n", "6", "--prompt-tokens", "32", "--output-tokens", "4", "--inline",
            "--no-server-metrics", "-o", str(tmp_path / "run"), "--otlp", receiver.url,
            "--otlp-file", str(tmp_path / "bench.jsonl"),
        )  # fmt: skip
        wire = {str(r.traceparent).split("-")[1] for r in lab.records if r.path.endswith("/chat/completions")}
    assert code == 0, out
    trees = list(by_trace(spans_of(receiver.requests)))
    assert len(trees) == 6
    assert {root.trace_id for root, _ in trees} == wire
    for root, children in trees:
        _check_request_tree(root, children)
        assert root.attributes["gen_ai.usage.output_tokens"] == 4
        assert root.attributes["gen_ai.request.max_tokens"] == 4
        assert root.attributes["latscope.bench.step"] == 0
    assert len(list(by_trace(spans_of(read_json_lines(tmp_path / "bench.jsonl"))))) == 6


def test_diagnose_exports_every_experiment_request(tmp_path: Path) -> None:
    path = tmp_path / "diagnose.jsonl"
    with LabThread(profile="tuned") as lab:
        code, out = _invoke("diagnose", lab.url, "--only", "no-connection-reuse", "--quick", "--otlp-file", str(path))
        sent = sum(1 for r in lab.records if r.path.endswith("/chat/completions"))
    assert code == 0, out
    trees = list(by_trace(spans_of(read_json_lines(path))))
    assert 1 < len(trees) <= sent
    assert trees[0][0].attributes["latscope.label"] == "first contact"
    for root, children in trees:
        _check_request_tree(root, children)
        assert root.attributes.get("latscope.label")


def test_without_the_extra_otlp_fails_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("latscope.cli.otlp.otel_available", lambda: False)
    with LabThread(profile="tuned") as lab:
        for command in ("probe", "bench", "diagnose"):
            code, out = _invoke(command, lab.url, "--otlp", "http://127.0.0.1:9/v1/traces")
            assert code == 2, out
            assert "pip install 'latscope[otel]'" in out
        assert not lab.records


def test_a_receiver_that_refuses_the_spans_is_reported() -> None:
    with OtlpReceiver(status=400) as receiver, LabThread(profile="tuned") as lab:
        code, out = _invoke("probe", lab.url, "-n", "1", "--no-metrics", "--otlp", receiver.url)
    assert code == 0
    assert "OpenTelemetry export failed" in out and receiver.paths == ["/v1/traces"]
