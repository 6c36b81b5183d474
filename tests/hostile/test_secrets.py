"""Credentials never leave latscope: not in what it prints, not in a file it writes, not inside a library's error
message or a server's echo of the key. Each case runs the command as a process against a server that echoes every
credential back (tests/support/hostile.py) and searches every byte the process wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from latscope.dialects.openai import chat_request
from latscope.timeline.model import ErrorKind, Phase
from latscope.timeline.redact import (
    REDACTED,
    is_secret_header,
    redact_headers,
    redact_url,
    register_secret,
    register_secret_headers,
    scrub,
)
from latscope.wire import Client
from tests.support.hostile import HostileServer

pytestmark = pytest.mark.timeout(120)

KEY = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"
AZURE = "azure-apim-0123456789abcdef0123456789abcdef"
CUSTOM = "tenant-credential-77f1e2d3c4b5"


# -- the rules, as units ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    ["Authorization", "Cookie", "X-Api-Key", "Ocp-Apim-Subscription-Key", "X-Auth-Token", "X-Amz-Security-Token",
     "x-goog-signature", "X-Client-Secret", "Proxy-Authorization", "X-Auth"],
)  # fmt: skip
def test_credential_like_header_names_are_secret(name: str) -> None:
    assert is_secret_header(name)


@pytest.mark.parametrize(
    "name", ["content-type", "x-ratelimit-remaining-tokens", "idempotency-key", "traceparent", "server-timing"]
)
def test_other_headers_are_shown(name: str) -> None:
    assert not is_secret_header(name)


def test_a_registered_value_is_scrubbed_from_any_text_with_its_parts() -> None:
    register_secret(f"Bearer {KEY}\r")
    text = f"Illegal header value b'Bearer {KEY}\\r' and {KEY} again"  # how a library quotes a refused value
    assert KEY not in scrub(text) and scrub(text).count(REDACTED) == 2
    assert scrub("nothing secret here") == "nothing secret here"


def test_headers_passed_by_hand_are_secret_by_name_and_value() -> None:
    register_secret_headers([("X-Tenant", CUSTOM)], by_hand=True)
    assert redact_headers({"x-tenant": CUSTOM, "accept": "*/*"}) == {"x-tenant": REDACTED, "accept": "*/*"}
    assert CUSTOM not in redact_url(f"https://h/v1?tenant={CUSTOM}&subscription-key=abc")
    assert "abc" not in redact_url("https://h/v1?subscription-key=abcdef")


async def test_a_header_with_a_control_character_is_refused_before_sending_without_showing_it() -> None:
    async with HostileServer("echo-key") as server, Client(headers=[("Authorization", f"Bearer {KEY}\r")]) as c:
        t = await c.request(chat_request("hostile-model", "hi", 4), server.base_url)
    assert t.error is not None and t.error.kind is ErrorKind.INVALID_REQUEST and t.error.phase is Phase.SEND
    assert "carriage return" in t.error.message and f"position {len('Bearer ') + len(KEY)}" in t.error.message
    assert KEY not in t.error.message and not [s for s in server.seen if s.method == "POST"]


async def test_a_key_the_server_echoes_back_is_scrubbed_from_the_error() -> None:
    async with HostileServer("echo-key") as server, Client(headers=[("Authorization", f"Bearer {KEY}")]) as c:
        t = await c.request(chat_request("hostile-model", "hi", 4), server.base_url)
    assert t.error is not None and t.error.status == 401
    assert KEY not in t.error.message and "Incorrect API key provided: [redacted]" in t.error.message


# -- the commands, as processes --------------------------------------------------------------------------------------
@pytest.fixture
def echo_server() -> Iterator[str]:
    """``python -m tests.support.hostile echo-key`` in a process; its base URL."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.hostile", "echo-key"], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait()


def _latscope(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    command = Path(sys.executable).with_name("latscope")
    return subprocess.run([str(command), *args], cwd=cwd, env=env, capture_output=True, timeout=90, check=False)


def _everything_written(done: subprocess.CompletedProcess[bytes], where: Path) -> bytes:
    files = b"".join(p.read_bytes() for p in sorted(where.rglob("*")) if p.is_file())
    return done.stdout + done.stderr + files


SECRETS = (KEY.encode(), AZURE.encode(), CUSTOM.encode())
HEADERS = ("-H", f"Ocp-Apim-Subscription-Key: {AZURE}", "-H", f"X-Tenant: {CUSTOM}")


def test_probe_never_shows_or_saves_a_credential(echo_server: str, tmp_path: Path) -> None:
    done = _latscope("probe", echo_server, "-n", "2", "--api-key", KEY, *HEADERS, "--json", "probe.json", cwd=tmp_path)
    assert done.returncode == 2, done.stdout.decode()
    written = _everything_written(done, tmp_path)
    assert (tmp_path / "probe.json").exists() and b"Incorrect API key provided" in written
    assert not [s for s in SECRETS if s in written]


def test_bench_never_shows_or_saves_a_credential(echo_server: str, tmp_path: Path) -> None:
    done = _latscope(
        "bench", echo_server, "-m", "hostile-model", "-n", "4", "--api-key", KEY, *HEADERS, "--inline", "-o", "run",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout.decode() + done.stderr.decode()  # every request failed
    assert (tmp_path / "run" / "run.json").exists() and (tmp_path / "run" / "requests.parquet").exists()
    assert not [s for s in SECRETS if s in _everything_written(done, tmp_path)]


def test_diagnose_never_shows_or_saves_a_credential(echo_server: str, tmp_path: Path) -> None:
    done = _latscope("diagnose", echo_server, "--quick", "--api-key", KEY, *HEADERS, "--json", "d.json", cwd=tmp_path)
    assert done.returncode == 2
    assert b"401" in done.stdout + done.stderr
    assert not [s for s in SECRETS if s in _everything_written(done, tmp_path)]


def test_a_key_with_a_carriage_return_is_refused_naming_the_character_not_the_key(
    echo_server: str, tmp_path: Path
) -> None:
    done = _latscope("probe", echo_server, "--api-key", KEY + "\r", "--json", "p.json", cwd=tmp_path)
    assert done.returncode == 2
    out = (done.stdout + done.stderr).decode()
    assert "carriage return" in out and f"position {len(KEY)}" in out
    assert KEY.encode() not in _everything_written(done, tmp_path)


def test_a_malformed_header_is_refused_without_echoing_it(echo_server: str, tmp_path: Path) -> None:
    done = _latscope("probe", echo_server, "-H", f"no colon {CUSTOM}", cwd=tmp_path)
    assert done.returncode == 2 and b"header 1 is not 'Name: value'" in done.stdout + done.stderr
    assert CUSTOM.encode() not in done.stdout + done.stderr
