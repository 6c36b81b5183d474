"""TLS configuration and the per-origin session cache that makes resumption measurable.

asyncio's own TLS (``start_tls``, ``create_connection(ssl=...)``) never offers a saved session, so every connection
pays a full handshake; latscope drives ``SSLContext.wrap_bio(..., session=saved)`` itself (see
:mod:`latscope.wire.transport`) and keeps the sessions here.
"""

from __future__ import annotations

import ssl

from latscope.wire.models import Origin

#: ALPN ids (RFC 7301 registry).
ALPN_H2 = "h2"
ALPN_HTTP11 = "http/1.1"


def make_ssl_context(*, verify: bool = True, ca_file: str | None = None, http2: bool = True) -> ssl.SSLContext:
    """A client context: the system trust store plus ``ca_file`` when ``verify``, no verification otherwise; ALPN
    offers ``h2`` (when ``http2``) and always ``http/1.1``."""
    if verify:
        ctx = ssl.create_default_context()
        if ca_file is not None:
            ctx.load_verify_locations(cafile=ca_file)
    else:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if ca_file is not None:
            ctx.load_verify_locations(cafile=ca_file)
    ctx.set_alpn_protocols([ALPN_H2, ALPN_HTTP11] if http2 else [ALPN_HTTP11])
    return ctx


class SessionCache:
    """The last resumable TLS session per origin.

    The session is saved after a response was read, not right after the handshake: a TLS 1.3 server sends its
    session ticket after the handshake completes, so only then does the session carry something to resume with.
    """

    def __init__(self) -> None:
        self._sessions: dict[Origin, ssl.SSLSession] = {}

    def get(self, origin: Origin) -> ssl.SSLSession | None:
        """The session to offer to ``origin``, or None."""
        return self._sessions.get(origin)

    def save(self, origin: Origin, session: ssl.SSLSession | None) -> None:
        """Remember ``session`` for ``origin`` (ignored when None)."""
        if session is not None:
            self._sessions[origin] = session

    def clear(self) -> None:
        """Forget every session: the next connection to each origin does a full handshake."""
        self._sessions.clear()

    def __len__(self) -> int:
        return len(self._sessions)
