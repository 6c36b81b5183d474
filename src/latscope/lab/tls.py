"""Server-side TLS contexts for the lab: ALPN choice and session resumption on or off.

Resumption "off" (the ``tls-no-tickets`` fault) needs two things, because OpenSSL resumes in two ways:

- tickets (stateless): ``OP_NO_TICKET`` stops TLS 1.2 tickets and ``num_tickets = 0`` stops TLS 1.3 tickets;
- the server-side session cache (stateful): with tickets off, OpenSSL still caches sessions by id and resumes
  TLS 1.2 clients that offer one (measured: ``openssl s_client -sess_in`` resumes against an ``OP_NO_TICKET``
  context). Python exposes no ``SSL_CTX_set_session_cache_mode``, and the cache belongs to the ``SSL_CTX``, so the
  lab gives every connection a context of its own: a fresh context has an empty cache, nothing to resume from.

With resumption on, every connection shares one context (one cache, one ticket key), as a normal server does.
"""

from __future__ import annotations

import ssl

from latscope.lab.certs import CertFiles

ALPN_H2 = "h2"
ALPN_HTTP11 = "http/1.1"


class ServerTls:
    """Hands out the server :class:`ssl.SSLContext` for each accepted connection."""

    def __init__(self, cert: CertFiles, *, http2: bool, resumption: bool) -> None:
        self.cert = cert
        self.alpn: tuple[str, ...] = (ALPN_H2, ALPN_HTTP11) if http2 else (ALPN_HTTP11,)
        self.resumption = resumption
        self._shared = self._build() if resumption else None

    def context_for_connection(self) -> ssl.SSLContext:
        """The shared context when resumption is on; a brand-new one (empty session cache) when it is off."""
        return self._shared if self._shared is not None else self._build()

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2  # RFC 9113 §9.2: HTTP/2 needs TLS 1.2 or later
        context.load_cert_chain(self.cert.cert_path, self.cert.key_path)
        context.set_alpn_protocols(list(self.alpn))
        if not self.resumption:
            context.options |= ssl.OP_NO_TICKET
            context.num_tickets = 0
        return context
