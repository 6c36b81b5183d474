"""Streaming checks: ``stream-coalescing-nagle`` and ``stream-proxy-buffering``.

Both hold tokens back between the engine and the client, and both show as several events landing in one socket
read. They are told apart by their mechanisms (reference/network-timing.md):

- Nagle's algorithm (TCP_NODELAY off on the server's socket) holds a small write while an earlier one is unacknowledged,
  so it appears only when the client delays its ACK: on reused keep-alive connections at stream start (the ACK state
  a request/response exchange leaves), for about the delayed-ACK time (40 ms minimum on Linux), and it disappears
  when the client ACKs at once (TCP_QUICKACK). The control is the same request with quickack on.
- A buffering proxy holds bytes until its buffer fills (4/8/16 KB) or the response ends, whatever the ACKs do: the
  first token waits for the buffer, so TTFT grows with the number of tokens requested. The control is the same
  prompt with ``max_tokens`` 1, and both are measured with quickack on so Nagle cannot contribute.

On a real network the two meet. Nagle also releases a held write once a whole segment's worth of data waits (one MSS,
1448 bytes on an Ethernet path), and when the round trip is longer than the server takes to write that much, the segment
fills first: the hold no longer depends on the ACK (quickack does not remove it) and TTFT grows with ``max_tokens``, as
behind a buffer. What tells them apart is how much was held: Nagle holds about one segment
(:func:`~latscope.checks.streaming.measures.segment_fill`, the segment size from TCP_INFO), a proxy's buffer is several
(4 KB or more). On loopback a segment is 64 KB and the ACK always comes first.

Between the two, Nagle leaves a third mark that needs no control: it lets one partial segment be unacknowledged at a
time, so when the server writes several tokens per round trip, the partial segments reach the client a round trip apart,
each carrying the tokens written meanwhile (:func:`~latscope.checks.streaming.measures.ack_clock`). A stream written as
it is generated delivers them one token interval apart. A buffer whose fill time happens to equal the round trip looks
the same; the buffering comparison (TTFT against ``max_tokens``) still tells a buffer larger than that apart.
"""

from __future__ import annotations

from latscope.checks.streaming.buffering import PROXY_ID, check_proxy_buffering
from latscope.checks.streaming.evidence import StreamEvidence
from latscope.checks.streaming.nagle import NAGLE_ID, check_nagle

__all__ = ["NAGLE_ID", "PROXY_ID", "StreamEvidence", "check_nagle", "check_proxy_buffering"]
