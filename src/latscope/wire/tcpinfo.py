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
_U32 = struct.Struct("=I")

# Byte offsets of the u32 fields we read in struct tcp_info.
_ATO = 12  # tcpi_ato, µs
_RTT = 68  # tcpi_rtt, µs
_RTTVAR = 72  # tcpi_rttvar, µs
_SND_CWND = 80  # tcpi_snd_cwnd, segments
_TOTAL_RETRANS = 100  # tcpi_total_retrans, segments
_MIN_RTT = 148  # tcpi_min_rtt, µs (kernel ≥ 4.6)


def quickack_supported() -> bool:
    """True when this platform has ``TCP_QUICKACK`` (Linux)."""
    return _TCP_QUICKACK is not None


def set_quickack(sock: socket.socket) -> None:
    """Ask the kernel to ACK immediately instead of delaying. The kernel clears it again by itself, which is why the
    client re-arms it before every read. A no-op where the option does not exist."""
    if _TCP_QUICKACK is not None:
        sock.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 1)


def quickack_enabled(sock: socket.socket) -> bool | None:
    """The current ``TCP_QUICKACK`` value, or None where the option does not exist."""
    if _TCP_QUICKACK is None:
        return None
    return bool(sock.getsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK))


def parse_tcp_info(raw: bytes) -> TcpInfo | None:
    """Unpack the fields latscope uses from a raw ``struct tcp_info``; None when the struct is too short."""
    if len(raw) < _TOTAL_RETRANS + 4:
        return None
    min_rtt = _U32.unpack_from(raw, _MIN_RTT)[0] if len(raw) >= _MIN_RTT + 4 else None
    return TcpInfo(
        rtt_us=_U32.unpack_from(raw, _RTT)[0],
        rttvar_us=_U32.unpack_from(raw, _RTTVAR)[0],
        min_rtt_us=min_rtt,
        total_retrans=_U32.unpack_from(raw, _TOTAL_RETRANS)[0],
        snd_cwnd=_U32.unpack_from(raw, _SND_CWND)[0],
        ato_us=_U32.unpack_from(raw, _ATO)[0],
    )


def read_tcp_info(sock: socket.socket | None) -> TcpInfo | None:
    """A :class:`TcpInfo` snapshot of ``sock``; None off Linux, for a closed socket, or when the call fails."""
    if _TCP_INFO is None or sock is None:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, TCP_INFO_BYTES)
    except OSError:
        return None
    return parse_tcp_info(raw)
