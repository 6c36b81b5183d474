"""A real network path with a chosen one-way delay (and optional bandwidth limit) between a client and servers on
this machine, for tests that need latscope to measure across 20–50 ms of distance.

Topology of one :class:`NetworkPath` number ``N`` (1–254)::

    client namespace lsnet-<pid>-<k>                  root namespace
    lsn<N>c<pid> 198.18.N.1/30  <== TUN ==> relay <== TUN ==>  lsn<N>r<pid> 198.18.N.2/30  (servers bind here)

The client side lives in a new network namespace, servers stay in the root namespace. The two TUN devices are joined
by :mod:`tests.support.tunrelay`, a separate process that forwards each IP packet after the delay, so TCP runs end
to end between the two kernels (handshake, Nagle, delayed ACKs, slow start, retransmissions are all real) and the
test process's GIL never delays a packet. Addresses come from the RFC 2544 benchmarking range 198.18.0.0/15 only;
the namespace has no other address and no default route, so nothing can leave the machine.

Use::

    with NetworkPath(one_way_delay_ms=20) as path:
        server = await asyncio.start_server(handle, path.server_host, 0)   # root namespace, this loop
        t = await path.run(measure(path.server_host, port))               # runs in the client namespace
        path.command(["latscope", "probe", f"http://{path.server_host}:{port}"])  # a process in the namespace

Client code runs on an event loop in a thread that joined the namespace (``setns``): every socket it creates is in
the namespace. ``path.run(coro)`` awaits it from the caller's loop; ``path.run_sync(coro)`` blocks, so call it only
from code whose thread does not also serve the other end. ``path.popen`` / ``path.command`` start processes in the
namespace (``ip netns exec``). **Use IP literals only**: name resolution may run on resolver threads that are not in
the namespace, and the namespace has no DNS server anyway.

Cleanup is unconditional: on exit (also when the body raises or on KeyboardInterrupt) the client thread stops, the
relay stops (which removes both TUN devices, as they are not persistent) and the namespace is deleted. A namespace
left behind by a killed run is removed by the next :class:`NetworkPath` once its creator pid is gone.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import ctypes
import errno
import fcntl
import itertools
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, TypeVar

import pytest

from tests.support.tunrelay import open_tun

_T = TypeVar("_T")

#: name prefix of every namespace this module creates: ``lsnet-<creator pid>-<counter>``
NAMESPACE_PREFIX = "lsnet"
_NAMESPACE_RE = re.compile(rf"^{NAMESPACE_PREFIX}-(\d+)-(\d+)$")
_NETNS_DIR = Path("/run/netns")
#: serialises picking N and creating devices between processes (parallel test runs)
_LOCK_FILE = Path("/run/lsnet.lock")
_RELAY = Path(__file__).with_name("tunrelay.py")
_CLONE_NEWNET = 0x40000000
#: how long setup steps, the relay's start and the teardown of each part may take, s
_STEP_TIMEOUT_S = 10.0
_counter = itertools.count()
_open_paths: set[NetworkPath] = set()


def unsupported_reason() -> str | None:
    """Why a network path cannot be built here (not root, no ``/dev/net/tun``, no ``ip``), or None."""
    if sys.platform != "linux":
        return "network paths need Linux network namespaces"
    if os.geteuid() != 0:
        return "network paths need root (network namespaces, TUN devices)"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun"
    if shutil.which("ip") is None:
        return "no ip binary (iproute2)"
    return None


class PathUnavailable(RuntimeError):
    """The system refused to create a namespace or TUN device (no permission): a reason to skip, not to fail."""


#: Set (to anything) where network paths must work, as in CI: a test that cannot build one then fails, not skips.
REQUIRE_ENV = "LATSCOPE_REQUIRE_NETPATH"


def require_support() -> None:
    """Skip the calling test when this machine cannot build a network path (fail instead under ``$REQUIRE_ENV``)."""
    reason = unsupported_reason()
    if reason is not None:
        _skip_or_fail(reason)


def _skip_or_fail(reason: str) -> NoReturn:
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{reason} (and ${REQUIRE_ENV} says network paths must work here)")
    pytest.skip(reason)


@contextlib.contextmanager
def network_path(
    delay_ms: float = 0.0,
    rate_mbit: float | tuple[float | None, float | None] | None = None,
    *,
    queue_bytes: int | None = None,
    use_uvloop: bool = True,
) -> Iterator[NetworkPath]:
    """``with network_path(delay_ms=20) as path:`` in a test: a :class:`NetworkPath` with ``delay_ms`` one-way
    delay (ms) and ``rate_mbit`` bottleneck (Mbit/s, see there), or ``pytest.skip`` with the reason when this machine
    cannot build one."""
    require_support()
    path = NetworkPath(one_way_delay_ms=delay_ms, rate_mbit=rate_mbit, queue_bytes=queue_bytes, use_uvloop=use_uvloop)
    try:
        path.__enter__()
    except PathUnavailable as exc:
        _skip_or_fail(str(exc))
    try:
        yield path
    except BaseException as exc:
        path.__exit__(type(exc), exc, exc.__traceback__)
        raise
    path.__exit__(None, None, None)


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` runs; a zombie (exited, not yet reaped) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # the state letter follows the command name, which is in parentheses and may itself contain spaces or ')'
    return stat.rpartition(")")[2].split()[0] != "Z"


def _ip(*args: str, namespace: str | None = None, batch: Sequence[str] = ()) -> str:
    """Run ``ip`` (``-n namespace`` when given; ``batch`` lines through ``-batch -``) and return its stdout."""
    argv = ["ip"]
    if namespace is not None:
        argv += ["-n", namespace]
    if batch:
        argv += ["-batch", "-"]
    argv += args
    proc = subprocess.run(
        argv,
        input="".join(f"{line}\n" for line in batch),
        capture_output=True,
        text=True,
        timeout=_STEP_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        message = f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}"
        if "Operation not permitted" in proc.stderr:
            raise PathUnavailable(message)
        raise RuntimeError(message)
    return proc.stdout


def namespace_names() -> list[str]:
    """Names of the network namespaces ``ip netns`` knows (the mounts under /run/netns)."""
    try:
        return sorted(p.name for p in _NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def remove_stale_namespaces() -> list[str]:
    """Delete the ``lsnet-<pid>-<k>`` namespaces whose creator pid no longer runs; return their names."""
    removed = []
    for name in namespace_names():
        match = _NAMESPACE_RE.match(name)
        if match is None or pid_alive(int(match.group(1))):
            continue
        with contextlib.suppress(RuntimeError):
            _ip("netns", "delete", name)
            removed.append(name)
    return removed


def _used_path_numbers() -> set[int]:
    """Path numbers N taken by any process: from root-namespace addresses 198.18.N.2 and lsn<N>r<pid> devices."""
    used = {int(m) for m in re.findall(r"inet 198\.18\.(\d+)\.2/", _ip("-4", "-o", "addr", "show"))}
    used |= {int(m) for m in re.findall(r"\blsn(\d+)[rc]\d+\b", _ip("-o", "link", "show"))}
    return used


def _setns(namespace_file: str) -> None:
    """Move the calling thread (only it) into the network namespace mounted at ``namespace_file``. Python 3.11 has
    no ``os.setns``, hence libc through ctypes."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(namespace_file, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), namespace_file)
    finally:
        os.close(fd)


def _disable_ipv6(device: str) -> None:
    """Switch IPv6 off on ``device`` in the calling thread's namespace (no router solicitations, no DAD noise).
    ``/proc/sys/net`` shows the namespace of the thread that opens it."""
    with contextlib.suppress(FileNotFoundError):  # a kernel without IPv6
        Path(f"/proc/sys/net/ipv6/conf/{device}/disable_ipv6").write_text("1\n")


class _NamespaceLoop:
    """An event loop (uvloop's or asyncio's) running in a thread that joined a network namespace."""

    def __init__(self, namespace_file: str, use_uvloop: bool) -> None:
        self.namespace_file = namespace_file
        self.use_uvloop = use_uvloop
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"netns-{Path(namespace_file).name}", daemon=True)

    def _factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        if self.use_uvloop:
            import uvloop

            return uvloop.new_event_loop
        return asyncio.new_event_loop

    def _main(self) -> None:
        try:
            _setns(self.namespace_file)
            # asyncio.Runner: on stop it cancels what is still running and shuts down the default executor
            with asyncio.Runner(loop_factory=self._factory()) as runner:
                runner.run(self._serve())
        except BaseException as exc:  # reported to the starting thread; a thread has nobody else to tell
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(_STEP_TIMEOUT_S):
            raise RuntimeError("the namespace thread did not start")
        if self._error is not None:
            raise RuntimeError(f"the namespace thread failed: {self._error!r}") from self._error

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        if self.loop is None or not self._thread.is_alive():
            coro.close()
            raise RuntimeError("the namespace loop is not running")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, fn: Callable[[], _T]) -> _T:
        """Run the plain function ``fn`` in the namespace thread and return its result."""

        async def wrapper() -> _T:
            return fn()

        return self.submit(wrapper()).result(_STEP_TIMEOUT_S)

    def stop(self) -> None:
        if self.loop is not None and self._stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self.loop.call_soon_threadsafe(self._stop.set)
        if self._thread.ident is not None:
            self._thread.join(_STEP_TIMEOUT_S)
        if self._thread.is_alive():
            raise RuntimeError("the namespace thread did not stop (a coroutine ignores cancellation?)")


class NetworkPath:
    """A delayed IP path between a fresh client network namespace and the root namespace. See the module docstring.

    ``one_way_delay_ms``: delay each packet gets in each direction, ms (RTT = 2× that). ``rate_mbit``: bottleneck
    rate in Mbit/s, one number for both directions or ``(client→server, server→client)``; None for no limit.
    ``queue_bytes``: the bottleneck's drop-tail buffer per direction, bytes (default: max(64 KiB, 2 × the
    bandwidth-delay product)). ``use_uvloop``: run client code on uvloop (latscope's default loop); the path falls
    back to asyncio's loop by itself if sockets made by uvloop in the namespace thread were not in the namespace.

    After entering: ``server_host`` (198.18.N.2, root namespace: bind servers here), ``client_host`` (198.18.N.1),
    ``namespace`` (its name), ``client_device`` / ``server_device`` (TUN names), ``relay_pid``, ``loop_kind``
    ("uvloop" or "asyncio"). After exiting: ``relay_stats``, the relay's counters per direction (``"up"``: client
    to server, ``"down"``), see :meth:`tests.support.tunrelay.Direction.stats`.
    """

    def __init__(
        self,
        one_way_delay_ms: float = 0.0,
        rate_mbit: float | tuple[float | None, float | None] | None = None,
        *,
        queue_bytes: int | None = None,
        use_uvloop: bool = True,
    ) -> None:
        if one_way_delay_ms < 0:
            raise ValueError("one_way_delay_ms must not be negative")
        up, down = rate_mbit if isinstance(rate_mbit, tuple) else (rate_mbit, rate_mbit)
        if any(r is not None and r <= 0 for r in (up, down)):
            raise ValueError("rates must be positive (None for no limit)")
        self.one_way_delay_ms = one_way_delay_ms
        self.rate_up_mbit = up
        self.rate_down_mbit = down
        self.queue_bytes = queue_bytes
        self.use_uvloop = use_uvloop
        self.number = 0
        self.namespace = ""
        self.server_host = ""
        self.client_host = ""
        self.client_device = ""
        self.server_device = ""
        self.loop_kind = ""
        self.relay_pid: int | None = None
        self.relay_stats: dict[str, dict[str, int]] | None = None
        self._relay: subprocess.Popen[bytes] | None = None
        self._control_w: int | None = None
        self._loop: _NamespaceLoop | None = None
        self._namespace_made = False
        self._children: list[subprocess.Popen[Any]] = []

    @property
    def rtt_ms(self) -> float:
        """The configured round-trip time, ms."""
        return 2 * self.one_way_delay_ms

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def __enter__(self) -> NetworkPath:
        if self._relay is not None or self._namespace_made:
            raise RuntimeError("a NetworkPath can be entered once")
        _open_paths.add(self)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.close()
        except Exception as err:
            if exc is None:
                raise
            # the body's own error is what the test needs to see; a teardown problem on top only as a warning
            warnings.warn(f"NetworkPath cleanup failed: {err!r}", RuntimeWarning, stacklevel=2)

    def _build(self) -> None:
        self.namespace = f"{NAMESPACE_PREFIX}-{os.getpid()}-{next(_counter)}"
        fds: list[int] = []
        try:
            _LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
            with open(_LOCK_FILE, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                remove_stale_namespaces()
                _ip("netns", "add", self.namespace)
                self._namespace_made = True
                fds = self._make_devices()
                # the root side is configured under the lock: its address is what marks N as taken
                _disable_ipv6(self.server_device)
                _ip(
                    batch=[
                        f"link set dev {self.client_device} netns {self.namespace}",
                        f"addr add {self.server_host}/30 dev {self.server_device}",
                        f"link set dev {self.server_device} mtu 1500 up",
                    ]
                )
            self._start_loop(self.use_uvloop)
            assert self._loop is not None
            self._loop.call(lambda: _disable_ipv6(self.client_device))
            _ip(
                namespace=self.namespace,
                batch=[
                    "link set dev lo up",
                    f"addr add {self.client_host}/30 dev {self.client_device}",
                    f"link set dev {self.client_device} mtu 1500 up",
                ],
            )
            self._start_relay(fds)
        finally:
            for fd in fds:  # the relay holds its own copies; ours would keep the devices alive after it stops
                os.close(fd)
        if self._probe():
            return
        if self.loop_kind == "uvloop":
            # sockets made by uvloop in the namespace thread did not land in the namespace: use asyncio's loop
            self._loop.stop()
            self._start_loop(False)
            if self._probe():
                return
        raise RuntimeError(f"client sockets are not in namespace {self.namespace}")

    def _make_devices(self) -> list[int]:
        """Pick a free path number N and create the TUN pair ``lsn<N>c<pid>`` / ``lsn<N>r<pid>`` (the creator's
        pid in the name: a name is never reused by another process a moment after this one freed it, and a leftover
        says whose it is); return their fds."""
        used = _used_path_numbers()
        pid = os.getpid()
        for number in range(1, 255):
            if number in used:
                continue
            client_name, server_name = f"lsn{number}c{pid}", f"lsn{number}r{pid}"
            try:
                client_fd = open_tun(client_name)
            except PermissionError as exc:
                raise PathUnavailable(f"cannot create a TUN device: {exc}") from exc
            except OSError as exc:
                if exc.errno == errno.EBUSY:  # a device of that name still exists (a relay that is stopping)
                    continue
                raise
            try:
                server_fd = open_tun(server_name)
            except OSError as exc:
                os.close(client_fd)
                if exc.errno == errno.EBUSY:
                    continue
                raise
            self.number = number
            self.client_device, self.server_device = client_name, server_name
            self.client_host, self.server_host = f"198.18.{number}.1", f"198.18.{number}.2"
            return [client_fd, server_fd]
        raise RuntimeError("no free path number in 198.18.1.0–198.18.254.0")

    def _start_loop(self, use_uvloop: bool) -> None:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            use_uvloop = False
        self._loop = _NamespaceLoop(str(_NETNS_DIR / self.namespace), use_uvloop)
        self._loop.start()
        self.loop_kind = "uvloop" if use_uvloop else "asyncio"

    def _start_relay(self, fds: list[int]) -> None:
        control_r, control_w = os.pipe()
        self._control_w = control_w
        argv = [sys.executable, "-I", "-S", str(_RELAY), "--fd-a", str(fds[0]), "--fd-b", str(fds[1])]
        argv += ["--control-fd", str(control_r), "--delay-ms", repr(self.one_way_delay_ms)]
        if self.rate_up_mbit is not None:
            argv += ["--rate-ab-mbit", repr(self.rate_up_mbit)]
        if self.rate_down_mbit is not None:
            argv += ["--rate-ba-mbit", repr(self.rate_down_mbit)]
        if self.queue_bytes is not None:
            argv += ["--queue-bytes", str(self.queue_bytes)]
        try:
            self._relay = subprocess.Popen(
                argv, pass_fds=(fds[0], fds[1], control_r), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
            )
        finally:
            os.close(control_r)
        self.relay_pid = self._relay.pid
        assert self._relay.stdout is not None
        ready, _, _ = select.select([self._relay.stdout], [], [], _STEP_TIMEOUT_S)
        line = self._relay.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            raise RuntimeError(f"the relay did not start (said {line!r}, exit status {self._relay.poll()})")

    def _probe(self) -> bool:
        """Open a TCP connection with the loop's own ``create_connection`` from the namespace thread to a listener
        on ``server_host``: proves the path carries traffic, and that the loop's sockets are in the namespace (their
        local address is ``client_host``). Costs one RTT."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind((self.server_host, 0))
            listener.listen(1)
            port = listener.getsockname()[1]

            async def connect() -> str:
                loop = asyncio.get_running_loop()
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(asyncio.Protocol, self.server_host, port), _STEP_TIMEOUT_S
                )
                try:
                    local: str = transport.get_extra_info("sockname")[0]
                finally:
                    transport.abort()
                return local

            assert self._loop is not None
            return self._loop.submit(connect()).result(_STEP_TIMEOUT_S + 1) == self.client_host
        finally:
            listener.close()

    def close(self) -> None:
        """Tear everything down; every step runs even when an earlier one fails (the first failure is raised)."""
        errors: list[BaseException] = []

        def attempt(step: Callable[[], None]) -> None:
            try:
                step()
            except Exception as exc:
                errors.append(exc)

        attempt(self._stop_loop)
        attempt(self._stop_children)
        attempt(self._stop_relay)
        attempt(self._delete_namespace)
        _open_paths.discard(self)
        if errors:
            raise errors[0]

    def _stop_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.stop()

    def _stop_children(self) -> None:
        children, self._children = self._children, []
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(_STEP_TIMEOUT_S / 2)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(_STEP_TIMEOUT_S / 2)

    def _stop_relay(self) -> None:
        control_w, self._control_w = self._control_w, None
        if control_w is not None:
            os.close(control_w)  # EOF on the control pipe: the relay prints its counters and exits
        relay, self._relay = self._relay, None
        if relay is None:
            return
        try:
            out, _ = relay.communicate(timeout=_STEP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            relay.kill()
            out, _ = relay.communicate(timeout=_STEP_TIMEOUT_S)
        for line in out.splitlines():
            with contextlib.suppress(ValueError):
                stats = json.loads(line)
                self.relay_stats = {"up": stats["ab"], "down": stats["ba"]}

    def _delete_namespace(self) -> None:
        if self._namespace_made:
            self._namespace_made = False
            if (_NETNS_DIR / self.namespace).exists():
                _ip("netns", "delete", self.namespace)

    # --- running client code in the namespace -------------------------------------------------------------------

    def _namespace_loop(self) -> _NamespaceLoop:
        if self._loop is None:
            raise RuntimeError("the NetworkPath is not open")
        return self._loop

    async def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the client namespace's loop and await its result from the caller's loop. Cancelling the
        await cancels ``coro``."""
        return await asyncio.wrap_future(self._namespace_loop().submit(coro))

    def run_sync(self, coro: Coroutine[Any, Any, _T], timeout_s: float | None = 60.0) -> _T:
        """Run ``coro`` on the client namespace's loop and block until it is done (``timeout_s`` s, None: no limit).
        Not from a coroutine whose loop serves the other end: blocking that loop would stall the exchange."""
        future = self._namespace_loop().submit(coro)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the client namespace (``ip netns exec``), with :class:`subprocess.Popen`'s keyword
        arguments. Still running at exit, it is terminated."""
        if not self._namespace_made:
            raise RuntimeError("the NetworkPath is not open")
        child: subprocess.Popen[Any] = subprocess.Popen(["ip", "netns", "exec", self.namespace, *argv], **kwargs)
        self._children.append(child)
        return child

    def command(self, argv: Sequence[str], timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the client namespace to completion (``timeout_s`` s); text stdout/stderr captured."""
        child = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise
        return subprocess.CompletedProcess(child.args, child.returncode, out, err)


@atexit.register
def _close_open_paths() -> None:
    """Close paths a caller left open (no ``with``); a killed process leaves only its namespace, which the next
    :class:`NetworkPath` removes."""
    for path in list(_open_paths):
        with contextlib.suppress(Exception):
            path.close()
