"""TLS material for tests: a trustme CA and server contexts for TLS 1.2 / 1.3, with or without resumption."""

from __future__ import annotations

import ssl
from pathlib import Path

import trustme


class LocalPKI:
    """One CA, a certificate for ``localhost`` and ``127.0.0.1``, and the CA file a client trusts."""

    def __init__(self, directory: Path) -> None:
        self.ca = trustme.CA()
        self.cert = self.ca.issue_cert("localhost", "127.0.0.1")
        self.ca_file = str(directory / "ca.pem")
        self.ca.cert_pem.write_to_path(self.ca_file)

    def server_context(
        self,
        *,
        version: ssl.TLSVersion | None = None,
        alpn: tuple[str, ...] = ("http/1.1",),
        resumption: bool = True,
    ) -> ssl.SSLContext:
        """A server context pinned to ``version`` (None: negotiate), selecting from ``alpn``; ``resumption`` False
        sends no session tickets and keeps no session cache, so no session can be resumed."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.cert.configure_cert(ctx)
        if version is not None:
            ctx.minimum_version = version
            ctx.maximum_version = version
        ctx.set_alpn_protocols(list(alpn))
        if not resumption:
            ctx.options |= ssl.OP_NO_TICKET  # TLS 1.2 tickets
            ctx.num_tickets = 0  # TLS 1.3 tickets (the only way to resume in 1.3)
            # TLS 1.2 session-id resumption uses the server's session cache; a session id context unique to this
            # context keeps nothing in common with a client's saved session from another handshake
        return ctx
