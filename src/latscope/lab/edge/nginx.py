"""A real nginx in front of a lab origin: :class:`NginxEdge`.

Usage::

    async with NginxEdge("http://127.0.0.1:8089", EdgeConfig.from_faults(["proxy-buffering"], tls=True)) as edge:
        ...  # point a client at edge.url ("https://127.0.0.1:PORT/v1"), trusting edge.cert_path

or ``edge.start()`` / ``edge.stop()`` from synchronous code (a CLI).

nginx runs as ``nginx -p PREFIX -c PREFIX/nginx.conf -e PREFIX/logs/error.log`` in a private temporary prefix that
holds everything it writes: the configuration, the pid file, the error and access logs and the temp directories
(client bodies, proxy buffers, and the FastCGI/uwsgi/SCGI ones nginx creates even unused), so it never touches
``/var/lib/nginx`` or ``/var/log/nginx`` and runs the same as root and as an ordinary user.

It runs with ``master_process off``: one process serves (as one worker would) and nothing else is forked, because

- the pid :class:`subprocess.Popen` knows is the only process there is: stopping or killing it can never leave an
  orphaned worker holding the port;
- without a master there is no privilege drop to ``user nobody``, so as root the private prefix can stay mode 0700
  and no worker needs access to it.

The request path through nginx is the same code in either mode, so what a client measures is what a stock nginx
with one worker does.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from latscope.lab.certs import CertFiles, generate_self_signed
from latscope.lab.edge.config import EdgeConfig
from latscope.lab.edge.errors import EdgeStartError, EdgeUnavailable
from latscope.lab.managed import ManagedProcess
from latscope.lab.serving import Served

#: Where distributions install nginx; ``/usr/sbin`` is not on an ordinary user's PATH on Debian.
SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/local/nginx/sbin", "/opt/homebrew/bin")
INSTALL_HINT = "install it (Debian: apt-get install nginx-light)"

#: How often readiness is polled, s: nginx binds and writes its pid file within milliseconds.
POLL_INTERVAL_S = 0.01
#: How long nginx gets to start serving, s.
READY_TIMEOUT_S = 10.0
#: How long nginx gets to exit after each stop signal (SIGQUIT, then SIGTERM) before SIGKILL, s.
STOP_GRACE_S = 3.0
#: Start attempts when another process takes the chosen free port between our probe and nginx's bind.
BIND_ATTEMPTS = 3
#: How much of the error log a start failure quotes, bytes.
LOG_TAIL_BYTES = 4000

#: First nginx version where ``listen ... http2`` is deprecated in favour of the ``http2 on;`` directive.
HTTP2_DIRECTIVE_VERSION = (1, 25, 1)
#: First nginx version with the ``-e`` option (error log used before the configuration is read).
ERROR_LOG_OPTION_VERSION = (1, 19, 5)

_VERSION = re.compile(rb"nginx/(\d+)\.(\d+)\.(\d+)")
_UPSTREAM = "latscope_origin"
#: The shared-memory zone of the ``response-cache`` faults' keys (1 MB: about 8 000 entries).
_CACHE_ZONE = "latscope_cache"
#: Request bodies the ``response-cache`` faults keep in memory, bytes: nginx keys the cache on ``$request_body``,
#: which is empty for a body spooled to a file (such requests bypass the cache).
CACHE_BODY_BUFFER_BYTES = 1024 * 1024
#: The shared-memory zone of the edge's ``limit_req`` (1 MB: state for about 16 000 client addresses).
_RATE_ZONE = "latscope_rate"


def find_nginx(path: str | None = None) -> str:
    """The nginx executable: ``path`` when given, else ``nginx`` on PATH or in the usual sbin directories.

    Raises :class:`EdgeUnavailable` when there is none.
    """
    if path is not None:
        found = shutil.which(path)
        if found is None:
            raise EdgeUnavailable(f"nginx not found at {path!r}: {INSTALL_HINT}")
        return found
    found = shutil.which("nginx") or shutil.which("nginx", path=os.pathsep.join(SBIN_DIRS))
    if found is None:
        raise EdgeUnavailable(f"nginx not found: {INSTALL_HINT}")
    return found


@functools.cache
def nginx_version(executable: str) -> tuple[int, int, int]:
    """``(major, minor, patch)`` from ``nginx -v`` (which prints ``nginx version: nginx/1.22.1`` on stderr).

    Raises :class:`EdgeUnavailable` when the executable does not run or does not say which nginx it is.
    """
    try:
        done = subprocess.run([executable, "-v"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EdgeUnavailable(f"cannot run {executable} -v: {exc}") from None
    match = _VERSION.search(done.stderr + done.stdout)
    if match is None:
        output = (done.stderr + done.stdout).decode("utf-8", "replace").strip()
        raise EdgeUnavailable(f"{executable} -v did not report an nginx version: {output or '(no output)'}")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


@dataclass(frozen=True, slots=True)
class PrefixPaths:
    """Every path nginx uses, all inside one private prefix directory."""

    prefix: Path

    @property
    def conf(self) -> Path:
        return self.prefix / "nginx.conf"

    @property
    def pid(self) -> Path:
        return self.prefix / "nginx.pid"

    @property
    def lock(self) -> Path:
        return self.prefix / "nginx.lock"

    @property
    def logs(self) -> Path:
        return self.prefix / "logs"

    @property
    def error_log(self) -> Path:
        return self.logs / "error.log"

    @property
    def access_log(self) -> Path:
        return self.logs / "access.log"

    @property
    def stderr_log(self) -> Path:
        return self.logs / "stderr.log"

    @property
    def temp(self) -> Path:
        return self.prefix / "temp"

    @property
    def tls(self) -> Path:
        return self.prefix / "tls"

    def temp_dir(self, kind: str) -> Path:
        """``client_body``, ``proxy``, ``fastcgi``, ``uwsgi`` or ``scgi``."""
        return self.temp / kind

    @property
    def cache(self) -> Path:
        """Where ``proxy_cache`` keeps its entries (the ``response-cache`` faults)."""
        return self.prefix / "cache"


def _duration(seconds: float) -> str:
    """An nginx time value in whole milliseconds (``"75000ms"``; ``"0"`` for zero)."""
    ms = round(seconds * 1000)
    return f"{ms}ms" if ms else "0"


def _address(host: str, port: int) -> str:
    """``host:port`` with IPv6 literals in brackets, as ``listen`` and ``server`` take it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _quote(path: Path) -> str:
    """A path as one nginx token (double-quoted, so spaces survive)."""
    text = str(path)
    if '"' in text or "\\" in text:
        raise ValueError(f"nginx paths cannot contain quotes or backslashes: {text!r}")
    return f'"{text}"'


def render_config(
    config: EdgeConfig,
    paths: PrefixPaths,
    *,
    host: str,
    port: int,
    origin_host: str,
    origin_port: int,
    cert: CertFiles | None,
    version: tuple[int, int, int],
    worker_connections: int,
) -> str:
    """The nginx.conf text for ``config``: a listener on ``host:port`` proxying everything to the origin.

    ``cert`` is required when ``config.tls``; ``version`` picks the HTTP/2 syntax of that nginx;
    ``worker_connections`` is the connection limit after capping it to the open-file limit.
    """
    if config.tls and cert is None:
        raise ValueError("a TLS edge needs a certificate")
    out = _main_context(config, paths, worker_connections)
    out += _http_directives(config, paths)
    out += _upstream_block(config, origin_host, origin_port)
    out += _server_head(config, host, port, cert, version)
    out += _rate_limited_location(config)
    out += _proxy_location(config)
    out += ["    }", "}", ""]
    return "\n".join(out)


def _main_context(config: EdgeConfig, paths: PrefixPaths, worker_connections: int) -> list[str]:
    """The header comment, the main context (one foreground process) and the events block."""
    faults = ", ".join(sorted(config.faults)) or "none"
    return [
        "# latscope lab edge: nginx in front of a lab origin. Generated on start; edits are lost on stop.",
        f"# edge faults: {faults}",
        "daemon off;  # the Popen pid is nginx itself",
        "master_process off;  # one serving process, no forked workers to orphan, no privilege drop",
        "worker_processes 1;",
        f"pid {_quote(paths.pid)};",
        f"lock_file {_quote(paths.lock)};",
        f"error_log {_quote(paths.error_log)} notice;",
        "",
        "events {",
        f"    worker_connections {worker_connections};",
        "}",
        "",
    ]


def _http_directives(config: EdgeConfig, paths: PrefixPaths) -> list[str]:
    """The opening of the http block: logging, temp paths, connection handling, the cache and rate-limit zones."""
    out = [
        "http {",
        "    log_format latscope '$remote_addr:$remote_port \"$request\" $status $body_bytes_sent '",
        "                        'request_time=$request_time upstream_connect=$upstream_connect_time '",
        "                        'upstream_header=$upstream_header_time upstream_response=$upstream_response_time '",
        "                        'connection=$connection requests=$connection_requests '",
        "                        'request_id=$upstream_http_x_request_id';",
        f"    access_log {_quote(paths.access_log)} latscope;",
        f"    client_body_temp_path {_quote(paths.temp_dir('client_body'))};",
        f"    proxy_temp_path {_quote(paths.temp_dir('proxy'))};",
        f"    fastcgi_temp_path {_quote(paths.temp_dir('fastcgi'))};",
        f"    uwsgi_temp_path {_quote(paths.temp_dir('uwsgi'))};",
        f"    scgi_temp_path {_quote(paths.temp_dir('scgi'))};",
        "    default_type application/octet-stream;",
        f"    tcp_nodelay {'on' if config.tcp_nodelay else 'off'};",
        f"    keepalive_timeout {_duration(config.keepalive_timeout_s)};",
        f"    keepalive_requests {config.keepalive_requests};",
        f"    client_max_body_size {config.client_max_body_bytes};",
        f"    send_timeout {_duration(config.proxy_read_timeout_s)};",
    ]
    if config.response_cache:
        out += [
            f"    proxy_cache_path {_quote(paths.cache)} levels=1:2 keys_zone={_CACHE_ZONE}:1m max_size=64m "
            "inactive=10m use_temp_path=off;",
            # a body nginx had to spool to a file leaves $request_body empty: such a request must not share a key
            "    map $request_body $latscope_body_unseen {",
            '        "" 1;',
            "        default 0;",
            "    }",
        ]
    if config.rate_limit is not None:
        out += [
            f"    limit_req_zone $binary_remote_addr zone={_RATE_ZONE}:1m rate={config.rate_limit.rate};",
            "    limit_req_status 429;",
            "    limit_req_log_level warn;",
        ]
    return out


def _upstream_block(config: EdgeConfig, origin_host: str, origin_port: int) -> list[str]:
    """The origin as an upstream, with a pool of idle connections to it when the config keeps them."""
    out = [
        "",
        f"    upstream {_UPSTREAM} {{",
        f"        server {_address(origin_host, origin_port)};",
    ]
    if config.upstream_keepalive:
        out += [
            f"        keepalive {config.upstream_keepalive};",
            f"        keepalive_timeout {_duration(config.upstream_keepalive_timeout_s)};",
        ]
    out += ["    }", ""]
    return out


def _server_head(
    config: EdgeConfig, host: str, port: int, cert: CertFiles | None, version: tuple[int, int, int]
) -> list[str]:
    """The server block's opening: the listener (TLS and HTTP/2 in the syntax of nginx ``version``) and TLS."""
    listen = f"listen {_address(host, port)}"
    http2_directive = False
    if config.tls:
        listen += " ssl"
        if config.http2_enabled:
            if version >= HTTP2_DIRECTIVE_VERSION:
                http2_directive = True
            else:
                listen += " http2"
    out = [
        "    server {",
        f"        {listen};",
        "        server_name localhost;",
    ]
    if http2_directive:
        out.append("        http2 on;")
    if config.tls and cert is not None:
        out += [
            f"        ssl_certificate {_quote(cert.cert_path)};",
            f"        ssl_certificate_key {_quote(cert.key_path)};",
            "        ssl_protocols TLSv1.2 TLSv1.3;",
            "        ssl_session_cache " + ("shared:latscope_tls:1m;" if config.session_cache else "off;"),
            f"        ssl_session_tickets {'on' if config.session_tickets else 'off'};",
            "        ssl_session_timeout 1h;",
        ]
    return out


def _rate_limited_location(config: EdgeConfig) -> list[str]:
    """Where a request the edge's limiter refuses goes (nothing without a limiter)."""
    limit = config.rate_limit
    if limit is None:
        return []
    # nginx refuses with an empty page and no Retry-After; operators add both, as here
    body = '{"error":{"message":"rate limit exceeded at the edge","type":"rate_limit_exceeded"}}'
    return [
        "",
        "        location @rate_limited {",
        f"            add_header Retry-After {limit.retry_after_s} always;",
        "            default_type application/json;",
        f"            return 429 '{body}';",
        "        }",
    ]


def _proxy_location(config: EdgeConfig) -> list[str]:
    """``location /``: everything proxied to the origin, with the edge faults' limiter, header handling and
    buffering."""
    out = [
        "",
        "        location / {",
        f"            proxy_pass http://{_UPSTREAM};",
        "            proxy_set_header Host $host;",
        "            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
        "            proxy_set_header X-Forwarded-Proto $scheme;",
    ]
    if config.upstream_keepalive:
        # Keep-alive to the origin needs HTTP/1.1 and no "Connection: close" from nginx's HTTP/1.0 default.
        out += [
            "            proxy_http_version 1.1;",
            '            proxy_set_header Connection "";',
        ]
    limit = config.rate_limit
    if limit is not None:
        mode = "nodelay" if limit.delay is None else f"delay={limit.delay}"
        out += [
            f"            limit_req zone={_RATE_ZONE} burst={limit.burst} {mode};",
            "            error_page 429 = @rate_limited;",
        ]
    if not config.propagate_trace_context:
        # An empty value makes nginx leave the header out of the proxied request.
        out += [
            '            proxy_set_header traceparent "";',
            '            proxy_set_header tracestate "";',
        ]
    out += _buffering(config)
    out += [
        "            proxy_connect_timeout 5s;",
        f"            proxy_read_timeout {_duration(config.proxy_read_timeout_s)};",
        f"            proxy_send_timeout {_duration(config.proxy_read_timeout_s)};",
        "        }",
    ]
    return out


def _buffering(config: EdgeConfig) -> list[str]:
    """What ``location /`` does with a response body: cache it, buffer it, or pass each piece on at once."""
    if config.response_cache:
        # nginx caches only what it buffers: the origin's "X-Accel-Buffering: no" and "Cache-Control: no-cache"
        # would each keep its streams out of the cache
        out = [
            f"            proxy_cache {_CACHE_ZONE};",
            "            proxy_cache_methods GET HEAD POST;",
            '            proxy_cache_key "$request_method $request_uri $request_body";',
            "            proxy_cache_valid 200 10m;",
            "            proxy_cache_lock on;",
            "            proxy_no_cache $latscope_body_unseen;",
            "            proxy_cache_bypass $latscope_body_unseen;",
            f"            client_body_buffer_size {CACHE_BODY_BUFFER_BYTES};",
            "            proxy_buffering on;",
            "            proxy_ignore_headers X-Accel-Buffering Cache-Control Expires Set-Cookie;",
        ]
        if config.cache_status_header:
            out.append("            add_header X-Cache-Status $upstream_cache_status always;")
        return out
    if config.proxy_buffering:
        # The lab origin sends "X-Accel-Buffering: no", which would switch buffering back off per response.
        return [
            "            proxy_buffering on;",
            "            proxy_ignore_headers X-Accel-Buffering;",
        ]
    return ["            proxy_buffering off;"]


def _free_port(host: str) -> int:
    """A port that is free on ``host`` right now (the kernel's pick for a bind to port 0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
    return port


def _split_origin(origin_url: str) -> tuple[str, int]:
    """``(host, port)`` of a plain-HTTP origin URL; its path (``/v1``) is ignored: the edge proxies every path."""
    parts = urlsplit(origin_url)
    if parts.scheme != "http" or parts.hostname is None:
        raise ValueError(f"the edge proxies to a plain-HTTP origin (http://HOST:PORT), got {origin_url!r}")
    return parts.hostname, parts.port if parts.port is not None else 80


def _tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode("utf-8", "replace").strip()


class NginxEdge(Served, ManagedProcess):
    """nginx as a reverse proxy in front of a lab origin, configured by an :class:`EdgeConfig`.

    ``origin_url`` is the origin's plain-HTTP address (``http://127.0.0.1:PORT``, a trailing ``/v1`` is fine).
    ``host``/``port`` is where the edge listens (port 0: a free one). ``nginx`` is the executable (default: found
    on PATH or in the sbin directories). ``keep_prefix`` keeps the prefix (config, logs) after :meth:`stop`.

    Attributes once started: :attr:`url` (``https://127.0.0.1:PORT/v1``), :attr:`origin` (without ``/v1``),
    :attr:`port`, :attr:`cert_path` (TLS: the certificate to trust), :attr:`config_text` (the nginx.conf
    written), :attr:`prefix`, :attr:`pid`.
    """

    def __init__(
        self,
        origin_url: str,
        config: EdgeConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        nginx: str | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
        keep_prefix: bool = False,
    ) -> None:
        self.origin_url = origin_url
        self.origin_host, self.origin_port = _split_origin(origin_url)
        self.config = config if config is not None else EdgeConfig()
        try:
            ipaddress.ip_address(host)  # a literal: nginx would resolve a name, maybe to several addresses
        except ValueError:
            raise ValueError(f"the edge listens on an IP address literal (127.0.0.1, ::1), got {host!r}") from None
        self.host = host
        self.requested_port = port
        self.port = 0
        self.nginx_path = nginx
        self.ready_timeout_s = ready_timeout_s
        self.keep_prefix = keep_prefix
        self.config_text = ""
        self.prefix: Path | None = None
        self._paths: PrefixPaths | None = None
        self._cert: CertFiles | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    # -- addresses -------------------------------------------------------------------------------------------------
    @property
    def origin(self) -> str:
        """``scheme://host:port`` of the edge (IPv6 hosts in brackets)."""
        scheme = "https" if self.config.tls else "http"
        return f"{scheme}://{_address(self.host, self.port)}"

    @property
    def pid(self) -> int | None:
        """The nginx process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    @property
    def access_log_path(self) -> Path | None:
        return self._paths.access_log if self._paths is not None else None

    def error_log_tail(self, limit: int = LOG_TAIL_BYTES) -> str:
        """The last ``limit`` bytes of nginx's error log and of anything it printed (for failure messages)."""
        if self._paths is None:
            return "(no nginx prefix: not started yet, or stopped and removed)"
        if self._stderr is not None:
            self._stderr.flush()
        parts = [text for text in (_tail(self._paths.error_log, limit), _tail(self._paths.stderr_log, limit)) if text]
        return "\n".join(parts) or "(the error log is empty)"

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> str:
        """Write the prefix, start nginx and wait until it serves; return :attr:`url`.

        Raises :class:`EdgeUnavailable` without nginx, :class:`EdgeStartError` when it exits or does not serve
        within ``ready_timeout_s`` (the prefix is then kept and named in the message, for its logs).
        """
        if self._proc is not None:
            return self.url
        executable = find_nginx(self.nginx_path)
        version = nginx_version(executable)
        self._make_prefix()
        try:
            failure = self._start_attempts(executable, version)
        except BaseException:
            self._terminate()
            self._cleanup()
            raise
        if failure is None:
            return self.url
        prefix = self.prefix
        self._cleanup(keep_prefix=True)  # its logs are what explains the failure
        raise EdgeStartError(f"{failure} (config and logs kept in {prefix})")

    def _start_attempts(self, executable: str, version: tuple[int, int, int]) -> str | None:
        """Write the config and launch nginx, again on a new port when the probed one was taken meanwhile.

        None once nginx serves, else why the last attempt failed.
        """
        assert self._paths is not None
        attempts = BIND_ATTEMPTS if self.requested_port == 0 else 1
        failure = None
        for _ in range(attempts):
            self.port = self.requested_port or _free_port(self.host)
            self.config_text = render_config(
                self.config,
                self._paths,
                host=self.host,
                port=self.port,
                origin_host=self.origin_host,
                origin_port=self.origin_port,
                cert=self._cert,
                version=version,
                worker_connections=self._worker_connections(),
            )
            self._paths.conf.write_text(self.config_text)
            argv = [executable, "-p", f"{self._paths.prefix}/", "-c", str(self._paths.conf)]
            if version >= ERROR_LOG_OPTION_VERSION:
                argv += ["-e", str(self._paths.error_log)]  # startup errors land in the prefix too
            failure = self._launch(argv)
            if failure is None or "Address already in use" not in failure:
                break  # serving, or a failure another port would not cure
        return failure

    def stop(self) -> int | None:
        """Stop nginx (SIGQUIT, then SIGTERM, then SIGKILL, :data:`STOP_GRACE_S` apart) and remove the prefix.

        Returns nginx's exit status, None when it was not running.
        """
        code = self._terminate()
        self._cleanup()
        return code

    def _launch(self, argv: list[str]) -> str | None:
        """Start nginx and wait for it to serve. None when it serves, else why it does not (log tail included)."""
        assert self._paths is not None
        self._paths.pid.unlink(missing_ok=True)
        self._paths.error_log.write_bytes(b"")  # a retry's log starts clean, so its failure is its own
        if self._stderr is None:
            self._stderr = self._paths.stderr_log.open("ab")
        # Same process group as ours: a Ctrl-C in the terminal reaches nginx too (SIGINT is its fast shutdown),
        # so an interrupted CLI never leaves it behind.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr)
        self._proc = proc
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            code = proc.poll()
            if code is not None:
                self._proc = None
                return f"nginx exited with status {code} on start: {self.error_log_tail()}"
            if self._serving(proc.pid):
                return None
            time.sleep(POLL_INTERVAL_S)
        self._terminate()
        return f"nginx did not serve on {_address(self.host, self.port)} within {self.ready_timeout_s:g} s: " + (
            self.error_log_tail()
        )

    def _serving(self, pid: int) -> bool:
        """True once nginx has written its pid file (it does so after binding and listening) and the port accepts.

        The pid file check tells our nginx from another process that might hold the probed port.
        """
        assert self._paths is not None
        try:
            if self._paths.pid.read_text().strip() != str(pid):
                return False
        except OSError:
            return False
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _terminate(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        for signum in (signal.SIGQUIT, signal.SIGTERM):
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(STOP_GRACE_S)
        if proc.poll() is None:
            proc.kill()
            proc.wait(STOP_GRACE_S)
        return proc.returncode

    def _make_prefix(self) -> None:
        prefix = Path(tempfile.mkdtemp(prefix="latscope-edge-"))  # mode 0700: only this user reads keys and logs
        paths = PrefixPaths(prefix)
        paths.logs.mkdir()
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            paths.temp_dir(kind).mkdir(parents=True)
        paths.cache.mkdir()
        if self.config.tls:
            paths.tls.mkdir()
            self._cert = generate_self_signed(paths.tls, hosts=(self.host,))
        self.prefix = prefix
        self._paths = paths

    def _cleanup(self, *, keep_prefix: bool = False) -> None:
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self.prefix is not None and not (self.keep_prefix or keep_prefix):
            shutil.rmtree(self.prefix, ignore_errors=True)
        self.prefix = None
        self._paths = None
        self._cert = None

    def _worker_connections(self) -> int:
        """The configured limit, capped by the open-file limit nginx inherits (it warns, then fails, above it)."""
        try:
            import resource  # POSIX only; elsewhere there is no limit to read
        except ImportError:
            return self.config.worker_connections
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.config.worker_connections
        return max(16, min(self.config.worker_connections, soft - 32))  # leave room for logs and listeners

    # -- context managers ------------------------------------------------------------------------------------------
