"""Client CPU per socket read: uvloop's transport against the kernel-stamped reader, and the floors under each.

In a stream whose tokens arrive one per read (a batching engine at 10 ms per step, hundreds of streams), the cost of
one read is most of the client's cost per event. This benchmark opens ``--sockets`` loopback TCP connections in this
process, writes one ``--bytes`` message to each of them per round, and lets the event loop (uvloop) read them all
before the next round, ``--rounds`` rounds. A read is delivered to a receiver that only counts it, so the rows differ
in the read path alone:

* ``uvloop transport`` — what a user-stamped connection does: uvloop reads in C, ``WireProtocol.data_received``
  stamps and hands the bytes over;
* ``kernel-stamped reader`` — what a kernel-stamped connection does (``StampedSocket``): a reader on the loop calls
  ``recvmsg``, converts the kernel's ``SO_TIMESTAMPNS`` stamp to the monotonic clock, stamps the hand-over too and
  delivers both; ``(compiled)`` is the C reader (``latscope.wire._rawread``, built at install time where a C
  compiler was at hand), ``(Python)`` the same in Python (``StampedSocket._on_readable``, the fallback);
* ``floor: add_reader + recv`` and ``floor: add_reader + recvmsg (SO_TIMESTAMPNS)`` — a bare Python reader that reads
  and counts: what calling Python per read costs, without and with the timestamping syscall.

The writes are timed separately (same messages, same sockets) and subtracted: the ``µs/read`` column is the reading
side's CPU (user + system: the receive syscalls are most of it). Best of ``--repeat`` runs, rows interleaved.

Usage::

    .venv/bin/python benchmarks/read_cost.py                 # ~15 s
    .venv/bin/python benchmarks/read_cost.py --sockets 200 --rounds 500 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import time

from latscope.wire import rawsock
from latscope.wire.kstamps import ANCILLARY_BYTES, arm, enable, kernel_stamps_supported
from latscope.wire.loop import new_event_loop
from latscope.wire.rawsock import READ_BYTES, StampedSocket
from latscope.wire.transport import WireProtocol


class Counter:
    """A receiver that counts reads (the HTTP layer's place)."""

    def __init__(self) -> None:
        self.reads = 0

    def data_received(self, data: bytes, at_ns: int, user_ns: int | None = None) -> None:
        self.reads += 1

    def eof_received(self) -> None:
        pass

    def connection_lost(self, exc: BaseException | None) -> None:
        pass


def attach(loop: asyncio.AbstractEventLoop, row: str, sock: socket.socket, counter: Counter) -> StampedSocket | None:
    """Read ``sock`` the way ``row`` says; every read ends in ``counter``. Returns the kernel-stamped reader."""
    if row == "uvloop transport":
        protocol = WireProtocol(sock)
        loop.run_until_complete(loop.create_connection(lambda: protocol, sock=sock))
        protocol.attach(counter)
        return None
    if row.startswith("kernel-stamped reader"):
        protocol = WireProtocol(sock)
        enable(sock)
        native = rawsock._StampedReader
        if row.endswith("(Python)"):
            rawsock._StampedReader = None
        try:
            reader = StampedSocket(loop, sock, protocol)
        finally:
            rawsock._StampedReader = native
        protocol.attach(counter)
        return reader
    if row == "floor: add_reader + recv":
        recv = sock.recv

        def on_readable() -> None:
            recv(READ_BYTES)
            counter.reads += 1

        loop.add_reader(sock.fileno(), on_readable)
        return None
    enable(sock)
    recvmsg = sock.recvmsg

    def on_readable_msg() -> None:
        recvmsg(READ_BYTES, ANCILLARY_BYTES)
        counter.reads += 1

    loop.add_reader(sock.fileno(), on_readable_msg)
    return None


def run_row(row: str, sockets: int, rounds: int, message: bytes) -> float:
    """CPU seconds per read of the reading side."""
    loop = new_event_loop()
    listener = socket.create_server(("127.0.0.1", 0), backlog=sockets)
    counter = Counter()
    clients: list[socket.socket] = []
    servers: list[socket.socket] = []
    readers: list[StampedSocket] = []
    try:
        for _ in range(sockets):
            client = socket.create_connection(listener.getsockname())
            server, _ = listener.accept()
            server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client.setblocking(False)
            clients.append(client)
            servers.append(server)
            reader = attach(loop, row, client, counter)
            if reader is not None:
                readers.append(reader)
        sends = [s.send for s in servers]

        async def rounds_read() -> float:
            cpu0 = time.process_time()
            for r in range(rounds):
                for send in sends:
                    send(message)
                deadline = time.monotonic() + 10
                while counter.reads < (r + 1) * sockets and time.monotonic() < deadline:
                    await asyncio.sleep(0)
            return time.process_time() - cpu0

        total = loop.run_until_complete(rounds_read())
        if counter.reads != rounds * sockets:
            raise RuntimeError(f"{row}: {counter.reads} reads, expected {rounds * sockets}: a read took several")
        unstamped = sum(r.unstamped_reads for r in readers)
        if unstamped:
            raise RuntimeError(f"{row}: {unstamped} reads came without a kernel stamp")
        cpu0 = time.process_time()
        for _ in range(rounds):
            for send in sends:
                send(message)
        writes = time.process_time() - cpu0
        return (total - writes) / (rounds * sockets)
    finally:
        for s in (*clients, *servers, listener):
            s.close()
        loop.close()


ROWS: tuple[str, ...] = (
    "uvloop transport",
    "kernel-stamped reader (compiled)",
    "kernel-stamped reader (Python)",
    "floor: add_reader + recv",
    "floor: add_reader + recvmsg (SO_TIMESTAMPNS)",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--bytes", type=int, default=300, help="message size (a token event is ~200-300 bytes)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = list(ROWS if kernel_stamps_supported() and arm() else (ROWS[0], ROWS[3]))
    if rawsock._StampedReader is None and "kernel-stamped reader (compiled)" in rows:
        rows.remove("kernel-stamped reader (compiled)")
        print("the compiled reader is not built or LATSCOPE_PURE_PYTHON is set: its row is left out")
    message = b"x" * args.bytes
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        for row in rows:
            cost = run_row(row, args.sockets, args.rounds, message)
            best[row] = min(best.get(row, cost), cost)
    print(f"{args.sockets} sockets × {args.rounds} rounds of one {args.bytes}-byte read, best of {args.repeat}")
    print(f"| {'read path':<46} | {'µs/read':>8} |")
    print(f"|{'-' * 48}|{'-' * 9}:|")
    for row, cost in best.items():
        print(f"| {row:<46} | {cost * 1e6:>8.2f} |")


if __name__ == "__main__":
    main()
