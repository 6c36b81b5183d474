"""What the lab's servers share: ``async with`` over ``start``/``stop``, and the addresses a client needs.

:class:`Lab` and :class:`~latscope.lab.edge.lab.EdgeLab` run on the caller's event loop (:class:`AsyncService`);
:class:`Lab` and :class:`~latscope.lab.edge.nginx.NginxEdge` each serve at an origin with a certificate of their own
(:class:`Served`). Child processes have :class:`~latscope.lab.managed.ManagedProcess`. :func:`server_options` is
the edge stage of a listener, as the settings' faults leave it.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Self

from latscope.lab.certs import CertFiles
from latscope.lab.http.server import ServerOptions
from latscope.lab.settings import LabSettings
from latscope.lab.tls import ServerTls


class AsyncService:
    """``async with`` over the :meth:`start` and :meth:`stop` coroutines."""

    async def start(self) -> None:
        """Start serving (subclasses)."""
        raise NotImplementedError

    async def stop(self) -> None:
        """Stop serving and release everything (subclasses)."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


def origin_of(tls: bool, host: str, port: int) -> str:
    """``scheme://host:port`` of a server on ``host:port`` (IPv6 hosts in brackets)."""
    return f"{'https' if tls else 'http'}://{f'[{host}]' if ':' in host else host}:{port}"


class Served:
    """A server's addresses: ``origin`` (``scheme://host:port``, from the subclass), the OpenAI-style base URL and
    the certificate it generated (``_cert``, set by the subclass when it serves TLS)."""

    _cert: CertFiles | None = None

    @property
    def origin(self) -> str:
        """``scheme://host:port`` (IPv6 hosts in brackets)."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        """The OpenAI-style base URL: ``origin + "/v1"``."""
        return self.origin + "/v1"

    @property
    def cert_path(self) -> Path | None:
        """The generated certificate (PEM) to trust, or None without TLS / before start."""
        return self._cert.cert_path if self._cert is not None else None


def server_options(settings: LabSettings, cert: CertFiles | None, *, reuse_port: bool = False) -> ServerOptions:
    """A listener's edge stage: keep-alive, TCP_NODELAY, HTTP/2 and TLS (with ``cert``, None for plain TCP) as the
    settings' faults leave them."""
    edge = settings.edge()
    tls = ServerTls(cert, http2=edge.http2, resumption=edge.tls_resumption) if cert is not None else None
    return ServerOptions(
        limits=settings.limits(),
        keep_alive=edge.keep_alive,
        nodelay=edge.nodelay,
        http2=edge.http2,
        tls=tls,
        reuse_port=reuse_port,
    )
