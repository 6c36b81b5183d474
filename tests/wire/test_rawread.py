"""The kernel-stamped read path, compiled (``latscope.wire._rawread``) and in Python: the same cases through each.

Every case runs on a real loopback TCP connection with ``SO_TIMESTAMPNS``; the clock the reader converts stamps
with is swapped for one that a case controls where it is about the offset's rules.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator

import pytest

from latscope.wire import rawsock
from latscope.wire.kstamps import CLOCK, arm, enable, kernel_stamps_supported, measure_offset
from latscope.wire.rawsock import StampedSocket
from tests.support.compiled import required

pytestmark = pytest.mark.skipif(not kernel_stamps_supported(), reason="kernel receive stamps need 64-bit Linux")

COMPILED = rawsock._compiled_reader() is not None


class Recorder:
    """Stands in for the WireProtocol: records what the reader hands over."""

    def __init__(self) -> None:
        self.reads: list[tuple[bytes, int, int | None]] = []
        self.eof = 0
        self.lost: list[BaseException | None] = []
        self.done = asyncio.Event()

    def connection_made(self, transport: object) -> None:
        pass

    def stamped_data_received(self, data: bytes, at_ns: int, user_ns: int | None) -> None:
        self.reads.append((data, at_ns, user_ns))

    def eof_received(self) -> bool:
        self.eof += 1
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost.append(exc)
        self.done.set()

    @property
    def data(self) -> bytes:
        return b"".join(d for d, _, _ in self.reads)


class FakeClock:
    """A ClockOffset whose measurements a case chooses: ``refresh`` returns the next of ``offsets``."""

    def __init__(self, offsets: list[int], offset_ns: int = 0, next_ns: int = 0) -> None:
        self.offsets = offsets
        self.offset_ns = offset_ns
        self.next_ns = next_ns
        self.refreshes: list[int] = []

    def refresh(self, now_ns: int) -> int:
        self.refreshes.append(now_ns)
        self.offset_ns = self.offsets[min(len(self.refreshes), len(self.offsets)) - 1]
        self.next_ns = now_ns + 1_000_000_000
        return self.offset_ns


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(client, server): a connected loopback pair, the client non-blocking and asking for kernel stamps."""
    assert arm(), "the kernel does not stamp incoming packets"
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.socket()
        assert enable(client)
        client.connect(listener.getsockname())
        server, _ = listener.accept()
    server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.setblocking(False)
    try:
        yield client, server
    finally:
        server.close()
        client.close()


def attach(client: socket.socket, recorder: Recorder | None = None) -> tuple[StampedSocket, Recorder]:
    """A StampedSocket reading ``client`` on the running loop for ``recorder`` (a new one by default)."""
    recorder = Recorder() if recorder is None else recorder
    return StampedSocket(asyncio.get_running_loop(), client, recorder), recorder  # type: ignore[arg-type]


async def until(predicate: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:  # type: ignore[operator]
        await asyncio.sleep(0.001)


async def test_every_read_carries_its_kernel_stamp_no_later_than_its_user_stamp(
    read_path: str, tcp_pair: tuple[socket.socket, socket.socket]
) -> None:
    client, server = tcp_pair
    reader, recorder = attach(client)
    messages = [b"first", b"second" * 1000, b"third"]
    for m in messages:
        server.sendall(m)
        expected = len(recorder.data) + len(m)
        await until(lambda expected=expected: len(recorder.data) >= expected)
    assert recorder.data == b"".join(messages)
    for _, at_ns, user_ns in recorder.reads:
        assert user_ns is not None, "a read fell back to its user-space stamp"
        assert 0 <= user_ns - at_ns < 1_000_000_000
    assert reader.unstamped_reads == 0
    server.close()
    await asyncio.wait_for(recorder.done.wait(), 5)
    assert recorder.eof == 1 and recorder.lost == [None]


async def test_the_stamp_is_the_kernel_s_and_the_wait_before_the_read_is_seen(
    read_path: str, tcp_pair: tuple[socket.socket, socket.socket]
) -> None:
    """Data that waited in the kernel while the loop was blocked keeps the arrival's stamp, not the read's."""
    client, server = tcp_pair
    _, recorder = attach(client)
    server.sendall(b"early")
    time.sleep(0.05)  # the loop is blocked: the bytes wait in the kernel
    await until(lambda: recorder.reads)
    (_, at_ns, user_ns) = recorder.reads[0]
    assert user_ns is not None
    assert user_ns - at_ns >= 40_000_000  # the 50 ms the read waited, seen from the kernel's stamp


async def test_a_stamp_later_than_the_read_after_measuring_again_is_not_used(
    read_path: str, tcp_pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, server = tcp_pair
    wrong = measure_offset()[0] - 10_000_000_000  # puts every stamp 10 s in the future
    clock = FakeClock([wrong, wrong])
    monkeypatch.setattr(rawsock, "CLOCK", clock)
    reader, recorder = attach(client)
    server.sendall(b"x")
    await until(lambda: recorder.reads)
    (data, at_ns, user_ns) = recorder.reads[0]
    assert data == b"x" and user_ns is None  # kept with its user-space stamp alone
    assert at_ns <= time.monotonic_ns()
    assert len(clock.refreshes) == 2  # measured because it was due, and again because the stamp was impossible
    assert reader.unstamped_reads == 1


async def test_a_clock_step_is_caught_by_measuring_again(
    read_path: str, tcp_pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, server = tcp_pair
    true_offset = measure_offset()[0]
    # the cached offset is stale (as after an NTP step) and not yet due: the stamp lands after the read
    clock = FakeClock([true_offset], offset_ns=true_offset - 10_000_000_000, next_ns=time.monotonic_ns() + 10**12)
    monkeypatch.setattr(rawsock, "CLOCK", clock)
    reader, recorder = attach(client)
    server.sendall(b"x")
    await until(lambda: recorder.reads)
    (_, at_ns, user_ns) = recorder.reads[0]
    assert user_ns is not None and 0 <= user_ns - at_ns < 1_000_000_000
    assert len(clock.refreshes) == 1
    assert reader.unstamped_reads == 0


async def test_an_offset_measured_by_another_connection_is_used_without_measuring(
    read_path: str, tcp_pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, server = tcp_pair
    clock = FakeClock([], offset_ns=measure_offset()[0], next_ns=time.monotonic_ns() + 10**12)
    monkeypatch.setattr(rawsock, "CLOCK", clock)
    _, recorder = attach(client)
    for m in (b"a", b"b"):
        server.sendall(m)
        await until(lambda m=m: recorder.data.endswith(m))
    assert clock.refreshes == []
    assert all(user is not None and 0 <= user - at < 1_000_000_000 for _, at, user in recorder.reads)


async def test_a_reset_connection_is_lost_with_the_os_error(
    read_path: str, tcp_pair: tuple[socket.socket, socket.socket]
) -> None:
    client, server = tcp_pair
    reader, recorder = attach(client)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    server.close()  # an RST
    await asyncio.wait_for(recorder.done.wait(), 5)
    assert len(recorder.lost) == 1 and isinstance(recorder.lost[0], ConnectionResetError)
    assert recorder.eof == 0
    assert reader.is_closing()


async def test_nothing_is_delivered_after_abort(read_path: str, tcp_pair: tuple[socket.socket, socket.socket]) -> None:
    client, server = tcp_pair
    reader, recorder = attach(client)
    server.sendall(b"before")
    await until(lambda: recorder.reads)
    reader.abort()
    await asyncio.wait_for(recorder.done.wait(), 5)
    server.sendall(b"after")
    await asyncio.sleep(0.02)
    assert recorder.data == b"before" and recorder.lost == [None]


def test_the_process_says_which_read_path_it_uses() -> None:
    in_use = rawsock.READ_PATH
    assert in_use == ("compiled" if COMPILED else "python")
    if required():
        assert in_use == "compiled", "latscope.wire._rawread was not built"


def test_the_process_clock_is_what_a_reader_converts_with() -> None:
    assert rawsock.CLOCK is CLOCK


async def test_a_reader_finished_while_it_delivers_stops_cleanly(
    read_path: str, tcp_pair: tuple[socket.socket, socket.socket]
) -> None:
    client, server = tcp_pair

    class Finishing(Recorder):
        def stamped_data_received(self, data: bytes, at_ns: int, user_ns: int | None) -> None:
            super().stamped_data_received(data, at_ns, user_ns)
            reader._finish(None)  # the connection ends inside the hand-over, as a fatal protocol error would

    reader, recorder = attach(client, Finishing())
    server.sendall(b"only")
    await asyncio.wait_for(recorder.done.wait(), 5)
    server.sendall(b"more")
    await asyncio.sleep(0.02)
    assert recorder.data == b"only" and recorder.lost == [None]
