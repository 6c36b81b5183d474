"""The lab's HTTP layer: an asyncio ``Protocol`` server with h11 (HTTP/1.1) and h2 (HTTP/2) as protocol engines.

Why sans-IO protocol libraries under a raw ``asyncio.Protocol`` (uvloop's loop when the CLI runs it) rather than a
web framework: the lab must control, per connection, exactly the things the bottleneck catalogue is about —
TCP_NODELAY on the socket, whether a response keeps the connection alive, the TLS context each handshake uses
(session resumption on or off), the ALPN choice between h2 and http/1.1, and one ``transport.write`` per stream
event. h11 and h2 parse and frame; this package owns the socket, the timers and every write.

Modules: :mod:`.exchange` (what a handler sees: request, response channel, connection facts), :mod:`.limits`
(timeouts and sizes), :mod:`.sockets` (socket options), :mod:`.http1` and :mod:`.http2` (one connection each),
:mod:`.server` (listening, TLS, choosing the protocol, shutdown), :mod:`.http3` (HTTP/3 over QUIC on UDP with aioquic,
and the ``Alt-Svc`` that announces it on TCP).
"""
