"""The edge's configuration: lab fault names → nginx directives, rendered without starting nginx."""

from __future__ import annotations

from pathlib import Path

import pytest

from latscope.lab.certs import CertFiles
from latscope.lab.edge.config import EDGE_FAULTS, EdgeConfig, split_faults
from latscope.lab.edge.nginx import PrefixPaths, render_config
from latscope.lab.faults import FAULTS, Stage, UnknownFaultError

PREFIX = Path("/tmp/latscope-edge-test")
CERT = CertFiles(cert_path=PREFIX / "tls/cert.pem", key_path=PREFIX / "tls/key.pem", directory=PREFIX / "tls")


def render(config: EdgeConfig, version: tuple[int, int, int] = (1, 22, 1)) -> str:
    return render_config(
        config,
        PrefixPaths(PREFIX),
        host="127.0.0.1",
        port=8443,
        origin_host="127.0.0.1",
        origin_port=8089,
        cert=CERT if config.tls else None,
        version=version,
        worker_connections=1024,
    )


def directives(text: str) -> list[str]:
    """The configuration's statements, comments and indentation stripped."""
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def test_every_edge_stage_fault_of_the_lab_has_an_nginx_mapping() -> None:
    edge_stage = {name for name, fault in FAULTS.items() if fault.stage is Stage.EDGE}
    assert edge_stage <= EDGE_FAULTS
    # beyond the edge stage, nginx plays only the gateway's limiter and its response cache
    assert EDGE_FAULTS - edge_stage == {"rate-limit", "gateway-queue", "response-cache", "silent-response-cache"}
    assert all(FAULTS[name].stage is Stage.GATEWAY for name in EDGE_FAULTS - edge_stage)


def test_rate_limit_refuses_beyond_the_labs_bucket_with_a_retry_after() -> None:
    assert "limit_req" not in render(EdgeConfig.from_faults([], tls=True))
    config = EdgeConfig.from_faults(["rate-limit"], tls=True)
    text = directives(render(config))
    # the lab's 20 requests per minute, a whole minute's bucket, refused at once
    assert "limit_req_zone $binary_remote_addr zone=latscope_rate:1m rate=20r/m;" in text
    assert "limit_req zone=latscope_rate burst=19 nodelay;" in text
    assert "limit_req_status 429;" in text and "error_page 429 = @rate_limited;" in text
    assert "add_header Retry-After 3 always;" in text  # one request's share of the minute
    assert split_faults(["rate-limit", "slow-parse"]) == (frozenset({"rate-limit"}), frozenset({"slow-parse"}))


def test_gateway_queue_holds_requests_beyond_the_rate_in_nginx() -> None:
    text = directives(render(EdgeConfig.from_faults(["gateway-queue"], tls=False)))
    # 10 requests per second, 3 beyond it at once, then up to 2 s (20 requests) of waiting before a 429
    assert "limit_req_zone $binary_remote_addr zone=latscope_rate:1m rate=10r/s;" in text
    assert "limit_req zone=latscope_rate burst=23 delay=3;" in text
    assert not any(line.startswith("limit_req ") and "nodelay" in line for line in text)


def test_the_tuned_edge_streams_unbuffered_keeps_connections_and_resumes_tls() -> None:
    text = directives(render(EdgeConfig.from_faults([], tls=True)))
    assert "listen 127.0.0.1:8443 ssl http2;" in text
    assert "proxy_buffering off;" in text
    assert "tcp_nodelay on;" in text
    assert "ssl_session_tickets on;" in text
    assert "ssl_session_cache shared:latscope_tls:1m;" in text
    assert "keepalive_timeout 75000ms;" in text
    # keep-alive to the origin too
    assert "keepalive 32;" in text and "proxy_http_version 1.1;" in text and 'proxy_set_header Connection "";' in text


@pytest.mark.parametrize(
    ("fault", "expected", "absent"),
    [
        ("proxy-buffering", ["proxy_buffering on;", "proxy_ignore_headers X-Accel-Buffering;"], "proxy_buffering off;"),
        ("tls-no-tickets", ["ssl_session_tickets off;", "ssl_session_cache off;"], "ssl_session_tickets on;"),
        ("no-h2", ["listen 127.0.0.1:8443 ssl;"], "listen 127.0.0.1:8443 ssl http2;"),
        ("no-keepalive", ["keepalive_timeout 0;"], "keepalive_timeout 75000ms;"),
        ("short-keepalive", ["keepalive_timeout 200ms;"], "keepalive_timeout 75000ms;"),
        ("nagle", ["tcp_nodelay off;"], "tcp_nodelay on;"),
    ],
)
def test_each_edge_fault_switches_the_nginx_directive_that_causes_it(
    fault: str, expected: list[str], absent: str
) -> None:
    config = EdgeConfig.from_faults([fault], tls=True)
    text = directives(render(config))
    for line in expected:
        assert line in text
    assert absent not in text
    assert config.faults == {fault}


def test_drop_trace_context_removes_the_trace_headers_the_tuned_edge_passes_on() -> None:
    assert "traceparent" not in directives(render(EdgeConfig.from_faults([], tls=True)))
    config = EdgeConfig.from_faults(["drop-trace-context"], tls=True)
    text = directives(render(config))
    assert 'proxy_set_header traceparent "";' in text and 'proxy_set_header tracestate "";' in text
    assert config.faults == {"drop-trace-context"}


def test_origin_faults_are_left_to_the_origin() -> None:
    config = EdgeConfig.from_faults(["slow-parse", "queue-hol", "batching-window", "nagle"], tls=True)
    assert config == EdgeConfig.from_faults(["nagle"], tls=True)
    assert split_faults(["slow-parse", "nagle"]) == (frozenset({"nagle"}), frozenset({"slow-parse"}))


def test_unknown_faults_are_rejected_with_the_known_names() -> None:
    with pytest.raises(UnknownFaultError, match="known faults"):
        EdgeConfig.from_faults(["gremlins"], tls=True)


def test_a_plain_edge_has_no_tls_and_no_http2() -> None:
    config = EdgeConfig.from_faults([], tls=False)
    text = directives(render(config))
    assert "listen 127.0.0.1:8443;" in text
    assert not [line for line in text if line.startswith("ssl_")]
    assert not config.http2_enabled  # h2c by prior knowledge only would lock HTTP/1.1 clients out


def test_newer_nginx_gets_the_http2_directive_instead_of_the_listen_parameter() -> None:
    text = directives(render(EdgeConfig(), version=(1, 25, 1)))
    assert "listen 127.0.0.1:8443 ssl;" in text and "http2 on;" in text


def test_everything_nginx_writes_stays_inside_the_prefix() -> None:
    text = render(EdgeConfig())
    for directive in (
        "pid",
        "lock_file",
        "error_log",
        "access_log",
        "client_body_temp_path",
        "proxy_temp_path",
        "fastcgi_temp_path",
        "uwsgi_temp_path",
        "scgi_temp_path",
    ):
        line = next(line for line in directives(text) if line.startswith(directive + " "))
        assert f'"{PREFIX}/' in line, line
    assert "/var/" not in text


def test_upstream_keepalive_zero_leaves_nginx_defaults_to_the_origin() -> None:
    text = directives(render(EdgeConfig(upstream_keepalive=0)))
    assert not [line for line in text if line.startswith("keepalive ")]
    assert "proxy_http_version 1.1;" not in text


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="keepalive_timeout_s"):
        EdgeConfig(keepalive_timeout_s=-1.0)
    with pytest.raises(ValueError, match="upstream_keepalive"):
        EdgeConfig(upstream_keepalive=-1)


def test_response_cache_keys_on_the_body_and_buffers_what_it_caches() -> None:
    assert "proxy_cache" not in render(EdgeConfig.from_faults([], tls=True))
    text = directives(render(EdgeConfig.from_faults(["response-cache"], tls=True)))
    assert 'proxy_cache_key "$request_method $request_uri $request_body";' in text
    assert "proxy_cache_methods GET HEAD POST;" in text
    # nginx caches only buffered answers; the origin's no-cache and X-Accel-Buffering would keep streams out
    assert "proxy_buffering on;" in text and "proxy_buffering off;" not in text
    assert "proxy_ignore_headers X-Accel-Buffering Cache-Control Expires Set-Cookie;" in text
    # a body spooled to a file has no $request_body: it must never share the empty key
    assert "proxy_no_cache $latscope_body_unseen;" in text and "proxy_cache_bypass $latscope_body_unseen;" in text
    assert "add_header X-Cache-Status $upstream_cache_status always;" in text
    silent = directives(render(EdgeConfig.from_faults(["silent-response-cache"], tls=True)))
    assert "proxy_cache latscope_cache;" in silent
    assert not any("X-Cache-Status" in line for line in silent)
