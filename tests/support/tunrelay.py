"""An IP-level delay line between two TUN devices: every packet read from one is written to the other after a fixed
one-way delay, optionally behind a rate-limited, drop-tail bottleneck.

Run as its own process (``python tunrelay.py --fd-a A --fd-b B --delay-ms 20``) so the test process's GIL and event
loops never hold packets back; :class:`tests.support.netpath.NetworkPath` starts it. Packets are forwarded whole and
untouched, so TCP stays end to end: both kernels see each other's segments, ACKs, windows and timers exactly as sent.

Timing: a packet read at ``arrival`` (monotonic ns) leaves the bottleneck at ``departure = max(arrival, previous
departure) + size*8/rate`` (``departure = arrival`` without a rate) and is written ``delay`` after its departure.
A packet that would find more than ``queue_bytes`` waiting in the bottleneck is dropped (drop-tail), like a router's
buffer. One delay per direction means due times only grow, so a FIFO per direction is all the scheduling needed.

The relay stops by itself when its parent dies: it watches a control pipe (EOF when the parent's end closes, which
the kernel does on death) and its parent pid. On exit it prints one JSON line of counters (see
:meth:`Direction.stats`). Only the standard library is used, so it starts with ``python -I -S``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import select
import signal
import struct
import sys
import time
from collections import deque

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
#: largest packet read from a TUN device: the MTU is 1500 and without a vnet header there is no GSO
READ_BYTES = 65536
#: packets read from one device per wake-up before the other device and the due queue get a turn
READ_BATCH = 64
#: how often the parent pid is checked, s: how soon a relay whose parent vanished without closing the pipe notices
PARENT_CHECK_S = 0.5
#: packets held per direction at most, bytes, also without a rate limit: a flood must not exhaust memory
MAX_PENDING_BYTES = 64 << 20
_PR_SET_TIMERSLACK = 29


def open_tun(name: str) -> int:
    """Create the TUN device ``name`` (``IFF_TUN | IFF_NO_PI``: bare IP packets, no vnet header so no GSO) and return
    its fd (close-on-exec, blocking). The device is not persistent: it disappears when the last fd to it closes."""
    if len(name.encode()) > 15:
        raise ValueError(f"interface name {name!r} is longer than 15 bytes")
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI))
    except BaseException:
        os.close(fd)
        raise
    return fd


class Direction:
    """One way of the path: packets read from ``src`` wait in a FIFO until due, then are written to ``dst``.

    ``delay_ns`` is the one-way propagation delay; ``rate_bps`` the bottleneck rate in bit/s (None: unlimited);
    ``queue_bytes`` the bottleneck buffer (bytes waiting to depart) beyond which packets are dropped.
    """

    def __init__(self, src: int, dst: int, delay_ns: int, rate_bps: float | None, queue_bytes: int) -> None:
        self.src = src
        self.dst = dst
        self.delay_ns = delay_ns
        self.rate_bps = rate_bps
        self.queue_bytes = queue_bytes
        self.pending: deque[tuple[int, bytes]] = deque()  # (due monotonic ns, packet), due times ascending
        self.pending_bytes = 0
        self.last_departure_ns = 0
        self.packets = 0
        self.bytes = 0
        self.dropped = 0
        self.write_errors = 0
        self.late_sum_ns = 0
        self.late_max_ns = 0
        self.late_over_1ms = 0

    def arrive(self, packet: bytes, now_ns: int) -> None:
        """Queue ``packet`` read at ``now_ns``, or drop it when the bottleneck buffer is full."""
        if self.pending_bytes + len(packet) > MAX_PENDING_BYTES:
            self.dropped += 1
            return
        if self.rate_bps is None:
            departure = now_ns
        else:
            # bytes still waiting to depart, computed from when the bottleneck frees up: exact for a FIFO
            backlog = max(0, self.last_departure_ns - now_ns) * self.rate_bps / 8e9
            if backlog + len(packet) > self.queue_bytes:
                self.dropped += 1
                return
            start = max(now_ns, self.last_departure_ns)
            departure = start + int(len(packet) * 8e9 / self.rate_bps)
            self.last_departure_ns = departure
        self.pending.append((departure + self.delay_ns, packet))
        self.pending_bytes += len(packet)

    def deliver(self, now_ns: int) -> None:
        """Write every packet due by ``now_ns``, recording how late (after its due time) each write started."""
        pending = self.pending
        while pending and pending[0][0] <= now_ns:
            due, packet = pending.popleft()
            self.pending_bytes -= len(packet)
            # stamped before the write: the write itself runs the receiving kernel's stack (as the wire's far end
            # would), which is not the relay's lateness
            late = time.monotonic_ns() - due
            try:
                os.write(self.dst, packet)
            except OSError:
                # the device went down or away (the path is being torn down): the packet is lost, as on a real link
                self.write_errors += 1
                continue
            self.packets += 1
            self.bytes += len(packet)
            self.late_sum_ns += late
            if late > self.late_max_ns:
                self.late_max_ns = late
            if late > 1_000_000:
                self.late_over_1ms += 1

    def next_due_ns(self) -> int | None:
        return self.pending[0][0] if self.pending else None

    def stats(self) -> dict[str, int]:
        """Counters: packets and bytes delivered, packets dropped by the full buffer, failed writes, and how late
        deliveries were against their due time (mean, max in ns; count later than 1 ms)."""
        return {
            "packets": self.packets,
            "bytes": self.bytes,
            "dropped": self.dropped,
            "write_errors": self.write_errors,
            "late_mean_ns": self.late_sum_ns // self.packets if self.packets else 0,
            "late_max_ns": self.late_max_ns,
            "late_over_1ms": self.late_over_1ms,
        }


def _read_all(direction: Direction) -> bool:
    """Read up to :data:`READ_BATCH` packets from the direction's source, each stamped when it was read. False when
    the device failed for good (deleted from outside): select would report it readable forever."""
    for _ in range(READ_BATCH):
        try:
            packet = os.read(direction.src, READ_BYTES)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not packet:
            return True
        direction.arrive(packet, time.monotonic_ns())
    return True


def relay(ab: Direction, ba: Direction, control_fd: int, parent_pid: int) -> None:
    """Forward packets both ways until the control pipe reaches EOF (or the parent pid changes)."""
    for fd in (ab.src, ba.src):
        os.set_blocking(fd, False)
    sources = {ab.src: ab, ba.src: ba}
    watched = [ab.src, ba.src, control_fd]
    check_ns = int(PARENT_CHECK_S * 1e9)
    next_check = time.monotonic_ns() + check_ns
    while True:
        now = time.monotonic_ns()
        ab.deliver(now)
        ba.deliver(now)
        if now >= next_check:
            if os.getppid() != parent_pid:
                return  # reparented: the parent died, yet the pipe stayed open (its end was inherited somewhere)
            next_check = now + check_ns
        wake = min(d for d in (ab.next_due_ns(), ba.next_due_ns(), next_check) if d is not None)
        # select takes a timeval (µs), where poll/epoll round their timeout up to whole milliseconds
        ready, _, _ = select.select(watched, [], [], max(0, wake - time.monotonic_ns()) / 1e9)
        for fd in ready:
            if fd == control_fd:
                if not os.read(control_fd, 4096):
                    return
            elif not _read_all(sources[fd]):
                watched.remove(fd)  # stop watching it rather than spin on its error; the parent still ends us


def _tight_timers() -> None:
    """Ask for 1 ns timer slack (Linux default: 50 µs) so select wake-ups land on the due time."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--fd-a", type=int, required=True, help="TUN fd of side A (the client side)")
    parser.add_argument("--fd-b", type=int, required=True, help="TUN fd of side B (the server side)")
    parser.add_argument("--control-fd", type=int, default=0, help="pipe from the parent: EOF stops the relay")
    parser.add_argument("--delay-ms", type=float, required=True, help="one-way delay, ms")
    parser.add_argument("--rate-ab-mbit", type=float, default=None, help="A to B bottleneck rate, Mbit/s")
    parser.add_argument("--rate-ba-mbit", type=float, default=None, help="B to A bottleneck rate, Mbit/s")
    parser.add_argument("--queue-bytes", type=int, default=None, help="bottleneck buffer per direction, bytes")
    args = parser.parse_args(argv)

    # the parent decides when the relay stops; a Ctrl-C in the terminal reaches the whole process group
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    _tight_timers()
    delay_ns = round(args.delay_ms * 1e6)

    def direction(src: int, dst: int, rate_mbit: float | None) -> Direction:
        rate_bps = rate_mbit * 1e6 if rate_mbit else None
        queue = args.queue_bytes
        if queue is None:
            bdp = rate_bps * 2 * delay_ns / 8e9 if rate_bps else 0
            queue = max(64 * 1024, int(2 * bdp))
        return Direction(src, dst, delay_ns, rate_bps, queue)

    ab = direction(args.fd_a, args.fd_b, args.rate_ab_mbit)
    ba = direction(args.fd_b, args.fd_a, args.rate_ba_mbit)
    parent = os.getppid()
    # unbuffered writes: a buffered stdout whose reader died would complain again at interpreter exit
    os.write(1, b"ready\n")
    try:
        relay(ab, ba, args.control_fd, parent)
    finally:
        with contextlib.suppress(OSError):  # nobody reads the counters any more
            os.write(1, json.dumps({"ab": ab.stats(), "ba": ba.stats()}).encode() + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
