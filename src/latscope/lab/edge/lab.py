"""The lab behind a real nginx: :class:`EdgeLab`.

Usage::

    async with EdgeLab(faults=("proxy-buffering", "slow-parse"), truth=True) as lab:
        ...  # a client talks to lab.url (nginx, TLS, trusting lab.cert_path); lab.lab.records is the origin's truth

The faults are split where they live on a real deployment: the edge faults (``proxy-buffering``, ``tls-no-tickets``,
``no-h2``, ``no-keepalive``, ``nagle``) become nginx directives (:mod:`latscope.lab.edge.config`), the others
(``slow-parse``, ``queue-hol``, ``batching-window``) stay in the origin lab, which otherwise runs tuned on plain
HTTP: keep-alive, TCP_NODELAY, one write per event and ``X-Accel-Buffering: no``, so whatever a client sees at the
network level comes from nginx.

:class:`EdgeLab` offers what the ``latscope lab`` command uses of a :class:`~latscope.lab.app.Lab` (``url``,
``origin``, ``cert_path``, ``faults``, ``settings``, ``start``/``stop``), so the command can serve either.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from pathlib import Path
from typing import Any

from latscope.lab.app import Lab
from latscope.lab.edge.config import EdgeConfig, split_faults
from latscope.lab.edge.nginx import NginxEdge
from latscope.lab.records import RequestRecord
from latscope.lab.serving import AsyncService
from latscope.lab.settings import LabSettings

#: Idle keep-alive of the origin's connections from nginx, s: well above nginx's upstream ``keepalive_timeout``
#: (:data:`~latscope.lab.edge.config.DEFAULT_UPSTREAM_KEEPALIVE_TIMEOUT_S`), so nginx always drops an idle upstream
#: connection first and never sends a request into one the origin is closing (it would answer that with 502).
ORIGIN_KEEPALIVE_TIMEOUT_S = 600.0


class EdgeLab(AsyncService):
    """A lab origin (plain HTTP on an ephemeral loopback port) with an :class:`NginxEdge` in front.

    Construct like :class:`~latscope.lab.app.Lab`: a :class:`LabSettings` and/or its fields (``profile``,
    ``faults``, ``cost``, ``truth``…) as keywords; ``tls`` defaults to True here because the TLS-level faults and proxy
    buffering's bursts need it. ``host``/``port`` are where nginx listens; ``nginx`` is the executable (default:
    found on PATH). Client-facing limits of the settings (``keepalive_timeout_s``, ``max_body_bytes``) go to nginx.

    Attributes once started: :attr:`url` (nginx, ``https://HOST:PORT/v1``), :attr:`origin` (nginx, without
    ``/v1``), :attr:`cert_path`, :attr:`faults` (all active faults), :attr:`lab` (the origin
    :class:`~latscope.lab.app.Lab`: its ``records``, ``metrics``, ``url``), :attr:`edge` (the :class:`NginxEdge`:
    its ``config_text``, ``error_log_tail()``).
    """

    def __init__(self, settings: LabSettings | None = None, /, *, nginx: str | None = None, **overrides: Any) -> None:
        """``settings`` (default: the tuned lab over TLS) with the :class:`~latscope.lab.settings.LabSettings`
        fields in ``overrides`` replaced: ``tls``, ``http2``, ``host`` and ``port`` describe the nginx listener."""
        base = settings if settings is not None else LabSettings(tls=True)
        self._init(dataclasses.replace(base, **overrides) if overrides else base, nginx)

    def _init(self, settings: LabSettings, nginx: str | None) -> None:
        self.settings = settings
        self.faults: frozenset[str] = settings.active_faults  # validates the names now, not at start
        self.edge_faults, self.origin_faults = split_faults(self.faults)
        self.edge_config = dataclasses.replace(
            EdgeConfig.from_faults(self.edge_faults, tls=settings.tls),
            http2=settings.http2_enabled,
            keepalive_timeout_s=settings.idle_timeout_s if settings.keep_alive else 0.0,
            client_max_body_bytes=settings.max_body_bytes,
        )
        # The origin only ever talks to nginx: plain HTTP/1.1 (nginx proxies with HTTP/1.1), tuned network settings.
        self.origin_settings = dataclasses.replace(
            settings,
            profile="tuned",
            faults=tuple(sorted(self.origin_faults)),
            no_faults=(),
            tls=False,
            http2=False,
            host="127.0.0.1",
            port=0,
            keepalive_timeout_s=max(settings.keepalive_timeout_s, ORIGIN_KEEPALIVE_TIMEOUT_S),
        )
        self.lab = Lab(self.origin_settings)
        self.nginx = nginx
        self.edge: NginxEdge | None = None

    # -- addresses -------------------------------------------------------------------------------------------------
    def _running_edge(self) -> NginxEdge:
        if self.edge is None:
            raise RuntimeError("the edge lab is not started")
        return self.edge

    @property
    def url(self) -> str:
        """The OpenAI-style base URL through nginx (``https://HOST:PORT/v1``)."""
        return self._running_edge().url

    @property
    def origin(self) -> str:
        """nginx's ``scheme://host:port`` (as :attr:`Lab.origin <latscope.lab.app.Lab.origin>`, for the CLI)."""
        return self._running_edge().origin

    @property
    def port(self) -> int:
        """nginx's port."""
        return self._running_edge().port

    @property
    def cert_path(self) -> Path | None:
        """The certificate nginx presents (PEM) to trust, or None without TLS / before start."""
        return self.edge.cert_path if self.edge is not None else None

    @property
    def records(self) -> collections.deque[RequestRecord]:
        """The origin's per-request ground truth, newest last."""
        return self.lab.records

    # -- lifecycle -------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the origin, then nginx in front of it (raises :class:`~latscope.lab.edge.nginx.EdgeError`)."""
        if self.edge is not None:
            return
        await self.lab.start()
        edge = NginxEdge(
            self.lab.origin, self.edge_config, host=self.settings.host, port=self.settings.port, nginx=self.nginx
        )
        try:
            await asyncio.to_thread(edge.start)  # the origin keeps serving on this loop meanwhile
        except BaseException:
            await self.lab.stop()
            raise
        self.edge = edge

    async def stop(self) -> None:
        """Stop nginx first (no client request reaches a stopped origin), then the origin."""
        edge, self.edge = self.edge, None
        try:
            if edge is not None:
                await asyncio.to_thread(edge.stop)
        finally:
            await self.lab.stop()
