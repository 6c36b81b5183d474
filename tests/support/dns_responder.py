"""A tiny authoritative DNS responder over UDP (asyncio) for tests: it answers A queries for the names it is given,
after a chosen delay, so a test can put a slow (or a caching) resolver in front of a client without the internet.

Only what a stub resolver (glibc's ``getaddrinfo``) asks is handled: one question per query, class IN. A configured
name gets its A record for type A and an empty NOERROR answer (no data) for any other type — glibc asks A and AAAA
in parallel and waits for both; any other name gets NXDOMAIN. Packets are encoded by hand (RFC 1035 §4.1): a header,
the question echoed back, and uncompressed answer records.

``slow_first_only`` answers only the first query for each (name, type) after the delay and the repeats at once: a
resolver with a cache.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import cast

TYPE_A = 1
CLASS_IN = 1
#: Header flags of a response (RFC 1035 §4.1.1): QR (response), AA (authoritative), RD copied, RA set.
_FLAG_QR = 0x8000
_FLAG_AA = 0x0400
_FLAG_RD = 0x0100
_FLAG_RA = 0x0080
_RCODE_NXDOMAIN = 3
_RCODE_FORMERR = 1
#: TTL of every answer, s (stub resolvers without a cache ignore it; a caching one would keep the answer that long).
TTL_S = 300


@dataclass(frozen=True, slots=True)
class Question:
    """One parsed query: its id, RD flag, the name asked (lower case, no trailing dot), type, class, and the raw
    question section (echoed in the answer)."""

    query_id: int
    recursion_desired: bool
    name: str
    qtype: int
    qclass: int
    raw_question: bytes


def parse_query(packet: bytes) -> Question | None:
    """The question of a DNS query packet; None when it is not a query with exactly one question."""
    if len(packet) < 12:
        return None
    query_id, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if flags & _FLAG_QR or qdcount != 1:
        return None
    labels: list[str] = []
    offset = 12
    for _ in range(128):  # a name has at most 127 labels (255 bytes)
        if offset >= len(packet):
            return None
        length = packet[offset]
        offset += 1
        if length == 0:
            break
        if length & 0xC0 or offset + length > len(packet):  # no compression in a question
            return None
        labels.append(packet[offset : offset + length].decode("ascii", "replace").lower())
        offset += length
    else:
        return None
    if offset + 4 > len(packet):
        return None
    qtype, qclass = struct.unpack("!HH", packet[offset : offset + 4])
    return Question(query_id, bool(flags & _FLAG_RD), ".".join(labels), qtype, qclass, packet[12 : offset + 4])


def build_response(question: Question, address: str | None, *, known: bool) -> bytes:
    """The answer to ``question``: an A record for ``address`` when given, else no data (``known``) or NXDOMAIN."""
    flags = _FLAG_QR | _FLAG_AA | _FLAG_RA | (_FLAG_RD if question.recursion_desired else 0)
    if not known:
        flags |= _RCODE_NXDOMAIN
    answers = b""
    if address is not None:
        # the name by a pointer to the question's (offset 12), then type, class, TTL, rdlength, rdata
        answers = struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL_S, 4) + ipaddress.IPv4Address(address).packed
    header = struct.pack("!HHHHHH", question.query_id, flags, 1, 1 if answers else 0, 0, 0)
    return header + question.raw_question + answers


def _formerr(packet: bytes) -> bytes | None:
    if len(packet) < 2:
        return None
    return packet[:2] + struct.pack("!HHHHH", _FLAG_QR | _RCODE_FORMERR, 0, 0, 0, 0)


@dataclass
class DnsResponder(asyncio.DatagramProtocol):
    """Answers ``records`` (name → IPv4 address) after ``delay_s`` seconds (see the module docstring).

    ``queries`` counts the queries received per (name, type); ``answered`` counts answers sent.
    """

    records: dict[str, str]
    delay_s: float = 0.0
    slow_first_only: bool = False
    queries: Counter[tuple[str, int]] = field(default_factory=Counter)
    answered: int = 0
    _transport: asyncio.DatagramTransport | None = None
    _pending: set[asyncio.TimerHandle] = field(default_factory=set)

    async def start(self, host: str, port: int) -> None:
        """Bind ``host:port`` (UDP) on the running loop; the socket is made in the calling thread, so in its network
        namespace."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self, sock=sock)

    async def stop(self) -> None:
        """Cancel the answers still waiting and close the socket."""
        for handle in self._pending:
            handle.cancel()
        self._pending.clear()
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's UDP transport does not subclass asyncio's, though it has its methods
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        question = parse_query(data)
        if question is None:
            reply = _formerr(data)
            if reply is not None and self._transport is not None:
                self._transport.sendto(reply, addr)
            return
        key = (question.name, question.qtype)
        repeat = self.queries[key] > 0
        self.queries[key] += 1
        known = question.name in self.records and question.qclass == CLASS_IN
        address = self.records[question.name] if known and question.qtype == TYPE_A else None
        reply = build_response(question, address, known=known)
        delay = 0.0 if (self.slow_first_only and repeat) else self.delay_s
        if delay <= 0:
            self._send(reply, addr, None)
            return
        loop = asyncio.get_running_loop()
        holder: list[asyncio.TimerHandle] = []
        handle = loop.call_later(delay, lambda: self._send(reply, addr, holder[0]))
        holder.append(handle)
        self._pending.add(handle)

    def _send(self, reply: bytes, addr: tuple[str | object, int], handle: asyncio.TimerHandle | None) -> None:
        if handle is not None:
            self._pending.discard(handle)
        if self._transport is not None:
            self._transport.sendto(reply, addr)
            self.answered += 1

    def lookups_of(self, name: str) -> int:
        """A queries received for ``name``."""
        return self.queries[(name, TYPE_A)]
