"""Kernel TCP facts about a connected socket: ``TCP_INFO`` snapshots and the ``TCP_QUICKACK`` switch (Linux only).

``struct tcp_info`` (include/uapi/linux/tcp.h) is read with ``getsockopt(IPPROTO_TCP, TCP_INFO, 232)``; the offsets
below are those of that struct, stable since it was introduced (fields are only ever appended). Kernels older than 4.6
return a shorter struct without ``tcpi_min_rtt``.
"""

from __future__ import annotations

import socket
import struct

from latscope.timeline.model import TcpInfo

#: bytes asked from the kernel: the struct up to and past ``tcpi_min_rtt``; the kernel returns what it has.
TCP_INFO_BYTES = 232

_TCP_INFO = getattr(socket, "TCP_INFO", None)
_TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)
#: the ``TCP_QUICKACK`` option number, None off Linux
TCP_QUICKACK: int | None = _TCP_QUICKACK
_U32 = struct.Struct("=I")

# Byte offsets of the fields we read in struct tcp_info (u32 unless said).
_ATO = 12  # tcpi_ato, µs
_SND_MSS = 16  # tcpi_snd_mss, bytes
_RCV_MSS = 20  # tcpi_rcv_mss, bytes
_UNACKED = 24  # tcpi_unacked, segments
_RTT = 68  # tcpi_rtt, µs
_RTTVAR = 72  # tcpi_rttvar, µs
_SND_CWND = 80  # tcpi_snd_cwnd, segments
_TOTAL_RETRANS = 100  # tcpi_total_retrans, segments
_NOTSENT_BYTES = 144  # tcpi_notsent_bytes, bytes (kernel ≥ 4.6)
_MIN_RTT = 148  # tcpi_min_rtt, µs (kernel ≥ 4.6)
_DELIVERY_RATE = 160  # tcpi_delivery_rate, u64 bytes/s (kernel ≥ 4.9)
_U64 = struct.Struct("=Q")


def _fields_struct(offsets: tuple[int, ...]) -> struct.Struct:
    """One Struct reading the u32 fields at ``offsets`` (ascending) in one call, padding skipped: read twice per
    request, where one ``unpack_from`` per field cost twice as much."""
    fmt, pos = "=", 0
    for offset in offsets:
        fmt += f"{offset - pos}xI" if offset > pos else "I"
        pos = offset + 4
    return struct.Struct(fmt)


#: ato, snd_mss, rcv_mss, unacked, rtt, rttvar, snd_cwnd, total_retrans, min_rtt, in this order
_ALL_FIELDS = _fields_struct((_ATO, _SND_MSS, _RCV_MSS, _UNACKED, _RTT, _RTTVAR, _SND_CWND, _TOTAL_RETRANS, _MIN_RTT))
#: unacked and notsent_bytes: what a sender still owes its peer
_BACKLOG_FIELDS = _fields_struct((_UNACKED, _NOTSENT_BYTES))


def quickack_supported() -> bool:
    """True when this platform has ``TCP_QUICKACK`` (Linux)."""
    return _TCP_QUICKACK is not None


def set_quickack(sock: socket.socket) -> None:
    """Ask the kernel to ACK immediately instead of delaying. The kernel clears it again by itself, which is why the
    client re-arms it before every read. A no-op where the option does not exist."""
    if _TCP_QUICKACK is not None:
        sock.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 1)


def delayed_ack_supported() -> bool:
    """True where the kernel lets a client switch quick ACKs off (Linux ``TCP_QUICKACK``)."""
    return _TCP_QUICKACK is not None


def set_delayed_ack(sock: socket.socket) -> bool:
    """Put the connection in delayed-ACK mode (Linux ``tcp(7)``: ``TCP_QUICKACK`` 0), the mode the kernel enters by
    itself once a connection has carried a request/response exchange, so a fresh connection ACKs like a reused one.
    The kernel leaves it again when a delayed ACK's timer runs out, which is why the client re-enters it after every
    read. False where the option does not exist."""
    if _TCP_QUICKACK is None:
        return False
    sock.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 0)
    return True


def quickack_enabled(sock: socket.socket) -> bool | None:
    """The current ``TCP_QUICKACK`` value, or None where the option does not exist."""
    if _TCP_QUICKACK is None:
        return None
    return bool(sock.getsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK))


def parse_tcp_info(raw: bytes) -> TcpInfo | None:
    """Unpack the fields latscope uses from a raw ``struct tcp_info``; None when the struct is too short."""
    if len(raw) >= _ALL_FIELDS.size:
        ato, snd_mss, rcv_mss, unacked, rtt, rttvar, snd_cwnd, total_retrans, min_rtt = _ALL_FIELDS.unpack_from(raw)
        rate = _U64.unpack_from(raw, _DELIVERY_RATE)[0] if len(raw) >= _DELIVERY_RATE + 8 else None
        return TcpInfo(rtt, rttvar, min_rtt, total_retrans, snd_cwnd, ato, rcv_mss, rate or None, unacked, snd_mss)
    if len(raw) < _TOTAL_RETRANS + 4:
        return None
    # a kernel older than 4.6: no tcpi_min_rtt
    return TcpInfo(
        rtt_us=_U32.unpack_from(raw, _RTT)[0],
        rttvar_us=_U32.unpack_from(raw, _RTTVAR)[0],
        min_rtt_us=None,
        total_retrans=_U32.unpack_from(raw, _TOTAL_RETRANS)[0],
        snd_cwnd=_U32.unpack_from(raw, _SND_CWND)[0],
        ato_us=_U32.unpack_from(raw, _ATO)[0],
        rcv_mss=_U32.unpack_from(raw, _RCV_MSS)[0],
        unacked=_U32.unpack_from(raw, _UNACKED)[0],
        snd_mss=_U32.unpack_from(raw, _SND_MSS)[0],
    )


def read_tcp_info(sock: socket.socket | None) -> TcpInfo | None:
    """A :class:`TcpInfo` snapshot of ``sock``; None off Linux, for a closed socket, or when the call fails."""
    raw = _raw_tcp_info(sock)
    return None if raw is None else parse_tcp_info(raw)


def _raw_tcp_info(sock: socket.socket | None) -> bytes | None:
    """``sock``'s ``struct tcp_info`` as the kernel gives it; None off Linux, for a closed socket, or when the call
    fails."""
    if _TCP_INFO is None or sock is None:
        return None
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, TCP_INFO_BYTES)
    except OSError:
        return None


def send_backlog(sock: socket.socket | None) -> int | None:
    """What this side has written and the peer has not acknowledged yet: segments sent and unacknowledged plus bytes
    not sent at all (``tcpi_unacked`` + ``tcpi_notsent_bytes``). 0 means everything written so far has reached the
    peer's kernel. None off Linux, before kernel 4.6, for a closed socket, or when the call fails."""
    raw = _raw_tcp_info(sock)
    if raw is None or len(raw) < _NOTSENT_BYTES + 4:
        return None
    unacked, notsent = _BACKLOG_FIELDS.unpack_from(raw)
    return int(unacked) + int(notsent)
