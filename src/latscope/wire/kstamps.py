"""Kernel receive timestamps (Linux ``SO_TIMESTAMPNS``) and the realtime→monotonic conversion they need.

With ``SO_TIMESTAMPNS`` set on a socket, every ``recvmsg`` that returns data also returns an ``SCM_TIMESTAMPNS``
control message: a ``struct timespec`` (two 64-bit fields on 64-bit Linux) holding the software receive stamp the
kernel put on the packet when the network stack took it in (``skb->tstamp``, taken on ``CLOCK_REALTIME``; for
loopback, when the sender's segment was queued to the receiving side). See Linux
``Documentation/networking/timestamping.rst``.

TCP semantics (``tcp_recvmsg``): one read may return the data of several segments, and the stamp is the one of the
*last* segment whose data it copied. Events that arrived in separate segments but were read together therefore
share the last one's stamp, just as they share the user-space stamp, only earlier; the kernel gives no per-segment
stamps to a TCP reader. A read whose stamp may cover several segments is any kernel-stamped read that carried more
than one stream event (``StreamEvent.read_index`` tells them apart).

Every latscope mark is on ``CLOCK_MONOTONIC``, so a kernel stamp is converted with the offset between the two clocks,
measured here as the best of several paired reads (the pair with the smallest gap between its two monotonic reads
bounds the error by half that gap) and measured again every :data:`REMEASURE_NS` while stamps are converted.
:class:`ClockOffset` keeps the first and latest offset, so a run can say how far the clocks drifted apart (an NTP
step moves ``CLOCK_REALTIME`` but not ``CLOCK_MONOTONIC``; slewing moves both alike).
"""

from __future__ import annotations

import platform
import socket
import struct
import sys
import time
from dataclasses import dataclass

#: Linux ``SO_TIMESTAMPNS`` / ``SCM_TIMESTAMPNS`` (``SO_TIMESTAMPNS_OLD`` in include/uapi/asm-generic/socket.h): the
#: value every architecture but alpha, mips, parisc and sparc uses; Python's socket module does not export it.
SO_TIMESTAMPNS = 35
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
#: ``struct timespec`` of a 64-bit kernel: ``tv_sec`` and ``tv_nsec``, both 64-bit
TIMESPEC = struct.Struct("=qq")
#: room for the ancillary data of one read: one ``cmsghdr`` (16 bytes) and one timespec, with slack
ANCILLARY_BYTES = 64
#: architectures whose ``SO_TIMESTAMPNS`` is the asm-generic value and whose ``long`` is 64-bit
_GENERIC_64BIT = frozenset(
    {"x86_64", "amd64", "aarch64", "arm64", "riscv64", "ppc64le", "ppc64", "s390x", "loongarch64"}
)

#: what ``Client(stamps=...)``, ``probe --stamps`` and ``bench --stamps`` accept: ``kernel`` (kernel receive stamps
#: where the platform gives them, user-space ones elsewhere) or ``user`` (the event loop's hand-over)
STAMP_CHOICES = ("kernel", "user")
#: the default: kernel stamps are more exact, but reading the socket ourselves costs more CPU per read than uvloop's
#: C transport when each read carries one event, so they are opt-in (benchmarks/fidelity.py, benchmarks/read_cost.py)
DEFAULT_STAMPS = "user"

#: how often the realtime→monotonic offset is measured again while stamps are converted (ns): often enough to see
#: an NTP step within a second, rarely enough to cost nothing (one measurement is ~1 µs)
REMEASURE_NS = 1_000_000_000
#: paired clock reads per offset measurement; the pair with the smallest gap wins
OFFSET_SAMPLES = 7

_MONOTONIC = time.CLOCK_MONOTONIC
_REALTIME = time.CLOCK_REALTIME
_clock_ns = time.clock_gettime_ns


def kernel_stamps_supported() -> bool:
    """True on platforms where :func:`enable` can work: 64-bit Linux with the asm-generic socket option numbers."""
    return sys.platform == "linux" and platform.machine().lower() in _GENERIC_64BIT and TIMESPEC.size == 16


#: a socket of this process that keeps receive stamping on in the kernel (see :func:`arm`)
_keeper: socket.socket | None = None
#: how long :func:`arm` waits at most for the kernel to start stamping (s)
ARM_TIMEOUT_S = 0.2


def arm() -> bool:
    """Make sure the kernel stamps incoming packets before the first connection is opened; False where it cannot.

    The kernel stamps packets only while some socket asks for stamps, and turns stamping on through a deferred work
    item (``net_enable_timestamp``): packets that arrive in between carry no stamp, so the first response bytes of
    a first connection could come unstamped. This opens one UDP socket with ``SO_TIMESTAMPNS`` and keeps it for the
    life of the process (stamping then stays on between connections too), then sends bytes over a loopback TCP
    connection until one comes back stamped, for up to :data:`ARM_TIMEOUT_S`. TCP, not a datagram to itself: for a
    datagram that arrived unstamped the kernel stamps it when it is read (``__sock_recv_timestamp``), which would
    say stamping is on when it is not; a TCP read gets a stamp only if its segment got one on arrival. Blocks: call
    it before any clock starts (``Client(stamps="kernel")`` does, when it is built).
    """
    global _keeper
    if not kernel_stamps_supported():
        return False
    if _keeper is not None:
        return True
    try:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        _keeper = keeper
        return _tcp_reads_are_stamped(ARM_TIMEOUT_S)
    except OSError:
        return False


def _tcp_reads_are_stamped(timeout_s: float) -> bool:
    """Send single bytes over a loopback TCP connection until a read carries a kernel stamp (True) or ``timeout_s``
    passed (False)."""
    with socket.socket() as listener, socket.socket() as receiver:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        receiver.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        receiver.settimeout(timeout_s)
        receiver.connect(listener.getsockname())
        sender, _ = listener.accept()
        with sender:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                sender.send(b"\0")
                _data, ancdata, _flags, _address = receiver.recvmsg(1, ANCILLARY_BYTES)
                if realtime_ns(ancdata) is not None:
                    return True
                time.sleep(0.001)
    return False


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp the data ``sock`` receives (``SO_TIMESTAMPNS``); False where it cannot. Call it before
    ``connect``, after :func:`arm`."""
    if not kernel_stamps_supported():
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        return bool(sock.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS))
    except OSError:
        return False


def realtime_ns(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    """The ``SCM_TIMESTAMPNS`` stamp (``CLOCK_REALTIME`` ns) in one ``recvmsg``'s ancillary data, None without one."""
    for level, kind, data in ancdata:
        if kind == SCM_TIMESTAMPNS and level == socket.SOL_SOCKET and len(data) >= 16:
            sec, nsec = TIMESPEC.unpack_from(data)
            return int(sec * 1_000_000_000 + nsec)
    return None


def measure_offset(samples: int = OFFSET_SAMPLES) -> tuple[int, int]:
    """``CLOCK_REALTIME − CLOCK_MONOTONIC`` in ns, and its uncertainty: the gap (ns) between the two monotonic reads
    around the realtime read of the best of ``samples`` pairs; the offset's error is at most half of it."""
    best_gap = -1
    best_offset = 0
    clock = _clock_ns
    for _ in range(samples):
        before = clock(_MONOTONIC)
        real = clock(_REALTIME)
        after = clock(_MONOTONIC)
        gap = after - before
        if best_gap < 0 or gap < best_gap:
            best_gap = gap
            best_offset = real - (before + after) // 2
    return best_offset, best_gap


@dataclass(frozen=True, slots=True)
class ClockReport:
    """How kernel stamps were put on the monotonic clock during a run (:meth:`ClockOffset.report`). Times in ns."""

    first_offset_ns: int  #: ``CLOCK_REALTIME − CLOCK_MONOTONIC`` when the first stamp was converted
    last_offset_ns: int  #: the same at the latest measurement
    drift_ns: int  #: ``last − first``: how far the clocks moved apart over the run (0 without an NTP step)
    max_step_ns: int  #: the largest change between two consecutive measurements
    uncertainty_ns: int  #: the largest gap of a measurement's best pair: the offset's error is at most half of it
    measurements: int  #: how many times the offset was measured
    span_ns: int  #: monotonic time from the first to the latest measurement

    def to_dict(self) -> dict[str, int]:
        """A JSON-ready dict (``run.json``)."""
        return {
            "first_offset_ns": self.first_offset_ns,
            "last_offset_ns": self.last_offset_ns,
            "drift_ns": self.drift_ns,
            "max_step_ns": self.max_step_ns,
            "uncertainty_ns": self.uncertainty_ns,
            "measurements": self.measurements,
            "span_ns": self.span_ns,
        }


class ClockOffset:
    """The realtime→monotonic offset of this process, measured at first use and again every :data:`REMEASURE_NS`.

    One per process (:data:`CLOCK`): every connection converts its kernel stamps with it.
    """

    __slots__ = ("_first", "_first_at", "_gap", "_last_at", "_max_step", "_measurements", "next_ns", "offset_ns")

    def __init__(self) -> None:
        self.offset_ns = 0  #: the latest ``CLOCK_REALTIME − CLOCK_MONOTONIC``
        self.next_ns = 0  #: monotonic ns at which :meth:`refresh` measures again (0: never measured)
        self._first: int | None = None
        self._first_at = 0
        self._last_at = 0
        self._gap = 0
        self._max_step = 0
        self._measurements = 0

    def refresh(self, now_ns: int) -> int:
        """Measure the offset again (called when ``now_ns`` passed :attr:`next_ns`); the new offset."""
        offset, gap = measure_offset()
        if self._first is None:
            self._first = offset
            self._first_at = now_ns
        else:
            self._max_step = max(self._max_step, abs(offset - self.offset_ns))
        self.offset_ns = offset
        self._gap = max(self._gap, gap)
        self._measurements += 1
        self._last_at = now_ns
        self.next_ns = now_ns + REMEASURE_NS
        return offset

    def to_monotonic(self, realtime_ns: int, now_ns: int) -> int:
        """``realtime_ns`` (a kernel stamp) on the monotonic clock; ``now_ns`` is the current monotonic time."""
        offset = self.offset_ns if now_ns < self.next_ns else self.refresh(now_ns)
        return realtime_ns - offset

    def report(self) -> ClockReport | None:
        """What the conversion did so far; None when no stamp was converted."""
        if self._first is None:
            return None
        return ClockReport(
            first_offset_ns=self._first,
            last_offset_ns=self.offset_ns,
            drift_ns=self.offset_ns - self._first,
            max_step_ns=self._max_step,
            uncertainty_ns=self._gap,
            measurements=self._measurements,
            span_ns=self._last_at - self._first_at,
        )

    def reset(self) -> None:
        """Forget every measurement (a new run starts its report afresh)."""
        self.__init__()  # type: ignore[misc]


#: the process's offset, shared by every kernel-stamped connection
CLOCK = ClockOffset()
