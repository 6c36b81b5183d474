"""``--dialect``: every command reaches a server of another API through the dialect registry (here an Ollama-style
server speaking NDJSON at its root), and the older options (``--completions``, ``--api``) mean a dialect."""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd
from click.testing import CliRunner

from latscope.cli.main import cli
from latscope.dialects import get_dialect
from latscope.lab.process import LabProcess
from latscope.wire import Client
from tests.support.ollama_server import EVAL_NS_PER_TOKEN, MODEL, PROMPT_EVAL_NS, ollama_handler, root_url
from tests.support.stream_server import ServerThread, StreamServer, models_handler, paced_stream


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_probe_speaks_ollama_chat_at_the_server_root() -> None:
    with ServerThread(ollama_handler()) as server:
        root = root_url(server.base_url)
        code, out, err = _invoke(
            "probe", root, "--dialect", "ollama.chat", "-n", "2", "--max-tokens", "5", "--json", "-"
        )
        paths = [r.target for r in server.requests if r.target != "/metrics"]  # the scrapes before and after
    assert code == 0, err
    assert paths == ["/api/tags", "/api/chat", "/api/chat"]  # the model came from Ollama's own list
    data = orjson.loads(out)
    assert data["target"]["dialect"] == "ollama.chat" and data["target"]["model"] == MODEL
    first = data["requests"][0]
    assert first["metrics"]["output_tokens"] == 5
    assert first["timeline"]["dialect"] == "ollama.chat"
    # Ollama's nanosecond durations are joined as server phases (ms)
    server_ms = {m["name"]: m["ms"] for m in first["timeline"]["server"]}
    assert server_ms["prefill"] == PROMPT_EVAL_NS / 1e6 and server_ms["decode"] == 5 * EVAL_NS_PER_TOKEN / 1e6


def test_bench_speaks_ollama_generate(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with ServerThread(ollama_handler(interval_s=0.0)) as server:
        code, _, err = _invoke(
            "bench",
            root_url(server.base_url),
            "--dialect",
            "ollama.generate",
            "-n",
            "3",
            "--output-tokens",
            "4",
            "--prompt-tokens",
            "8",
            "--inline",
            "--out",
            str(out),
        )
        paths = {r.target for r in server.requests}
    assert code == 0, err
    assert paths - {"/metrics"} == {"/api/tags", "/api/generate"}  # and the gauge sampler's one try
    run = orjson.loads((out / "run.json").read_bytes())
    assert run["config"]["dialect"] == "ollama.generate"
    requests = pd.read_parquet(out / "requests.parquet")
    assert requests["ok"].all() and list(requests["output_tokens"]) == [4, 4, 4]


def test_bench_refuses_ignore_eos_for_an_api_without_it() -> None:
    code, _, err = _invoke("bench", "http://127.0.0.1:9", "--dialect", "ollama.chat", "--ignore-eos", "-n", "1")
    assert code == 2 and "ignore_eos" in err


def test_diagnose_speaks_ollama_chat() -> None:
    with ServerThread(ollama_handler(interval_s=0.0)) as server:
        code, out, err = _invoke(
            "diagnose", root_url(server.base_url), "--dialect", "ollama.chat", "--only", "no-connection-reuse",
            "--quick", "--json", "-",
        )  # fmt: skip
        paths = {r.target for r in server.requests}
    assert code == 0, err
    assert paths == {"/api/tags", "/api/chat"}
    data = orjson.loads(out)
    assert data["target"]["model"] == MODEL
    assert [c["id"] for c in data["clear"]] == ["no-connection-reuse"]


def test_the_embedded_lab_is_diagnosed_in_any_dialect() -> None:
    # the lab serves Ollama's API at its root: diagnose without a URL speaks it there
    code, out, err = _invoke(
        "diagnose", "--dialect", "ollama.chat", "--only", "no-connection-reuse", "--quick", "--json", "-"
    )
    assert code == 0, err
    data = orjson.loads(out)
    assert not data["target"]["url"].endswith("/v1")
    assert [f["id"] for f in data["findings"]] == ["no-connection-reuse"]  # the naive lab's short keep-alive


async def test_a_streamed_ollama_request_answered_with_an_event_stream_names_what_was_expected() -> None:
    async with StreamServer(paced_stream(2)) as server, Client() as client:
        t = await client.request(get_dialect("ollama.chat").build_request("m", "hi", 2), root_url(server.base_url))
    assert t.error is not None and t.error.kind == "content-type"
    assert "an NDJSON stream (application/x-ndjson" in t.error.message and "text/event-stream" in t.error.message


def test_completions_flag_and_dialect_must_agree() -> None:
    code, _, err = _invoke("probe", "http://127.0.0.1:9", "--completions", "--dialect", "ollama.chat")
    assert code == 2 and "--completions means --dialect openai.completions" in err


def test_probe_completions_flag_is_the_completions_dialect() -> None:
    with ServerThread(models_handler(paced_stream(2))) as server:
        code, out, err = _invoke("probe", server.base_url, "--completions", "-n", "1", "--json", "-")
        path = server.requests[-1].target
    assert code == 0, err
    assert path == "/v1/completions" and orjson.loads(out)["target"]["dialect"] == "openai.completions"


def test_bench_api_option_is_the_openai_dialect_of_that_name() -> None:
    code, _, err = _invoke("bench", "http://127.0.0.1:9", "--api", "completions", "--dialect", "ollama.chat")
    assert code == 2 and "--api means --dialect openai.completions" in err


def test_probe_and_bench_speak_the_labs_other_apis_with_the_key_where_each_takes_it(tmp_path: Path) -> None:
    key = "k-cli-7730"
    with LabProcess(zero_cost=True, args=["--api-key", key]) as lab:
        assert lab.url is not None
        root = lab.url.removesuffix("/v1")
        code, out, err = _invoke(
            "probe", root, "--dialect", "anthropic.messages", "--api-key", key, "-n", "1", "--max-tokens", "4",
            "--json", "-",
        )  # fmt: skip
        run_dir = tmp_path / "run"
        bench_code, _, bench_err = _invoke(
            "bench", root, "--dialect", "tgi.generate", "--api-key", key, "-n", "2", "--output-tokens", "3",
            "--prompt-tokens", "8", "--inline", "--out", str(run_dir),
        )  # fmt: skip
    assert code == 0, err
    assert key not in out and key not in err  # x-api-key is redacted like every credential
    request = orjson.loads(out)["requests"][0]
    assert request["metrics"]["output_tokens"] == 4
    assert request["timeline"]["url"].endswith("/v1/messages")
    assert "x-api-key" in request["timeline"]["request_headers"]
    assert bench_code == 0, bench_err
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert requests["ok"].all() and list(requests["output_tokens"]) == [3, 3]
