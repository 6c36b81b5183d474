"""The target: everything about *where* and *how* requests go, resolved once and passed whole.

A :class:`Target` is what the command line's target options (or a caller of the Python API) resolve to before anything
is sent: the base URL normalised for the dialect, the :class:`~latscope.dialects.base.Dialect` object, the headers
every request carries (the credential among them, already in the dialect's form), TLS settings, the per-phase
timeouts, what stamps each read, the protocols offered and the pool size. ``probe``, ``diagnose``, ``bench`` and the
measuring :class:`~latscope.wire.Client` all take it, so an option means the same thing on every command and is read
in one place.

Its headers never show: ``repr`` and :meth:`Target.to_dict` (what ``run.json`` and the diagnosis JSON store) carry
them redacted, and :meth:`Target.from_dict` takes the real ones separately.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from latscope.dialects import DEFAULT_DIALECT, get_dialect
from latscope.dialects.base import Dialect
from latscope.timeline.redact import redact_headers, redact_url
from latscope.wire.client import Client
from latscope.wire.kstamps import DEFAULT_STAMPS, STAMP_CHOICES
from latscope.wire.models import Timeouts, normalise_base_url
from latscope.wire.pool import DEFAULT_MAX_CONNECTIONS_PER_ORIGIN

Headers = tuple[tuple[str, str], ...]
"""Request headers as (name, value) pairs, in the order sent."""


class TargetError(ValueError):
    """The target options do not describe a target; the message names the option."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where requests go and how, resolved once (see the module docstring).

    ``base_url`` is normalised for ``dialect`` (a URL without a path gets the dialect's ``base_path``); ``headers``
    go on every request, the credential among them (redacted in ``repr``); ``verify`` and ``ca_file`` are the TLS
    settings; ``timeouts`` are the per-phase limits, s; ``stamps`` is what stamps each read (``kernel`` or ``user``,
    :mod:`latscope.wire.kstamps`); ``http2`` offers h2 by ALPN on https; ``http3`` speaks HTTP/3 over QUIC instead
    of TCP; ``max_connections_per_origin`` is the pool's size per origin; ``trace_context`` sends a fresh W3C
    ``traceparent`` with each request.
    """

    base_url: str
    dialect: Dialect
    headers: Headers = field(default=(), repr=False)
    verify: bool = True
    ca_file: str | None = None
    timeouts: Timeouts = Timeouts()  # noqa: RUF009 - frozen, so one shared default is safe
    stamps: str = DEFAULT_STAMPS
    http2: bool = True
    http3: bool = False
    max_connections_per_origin: int = DEFAULT_MAX_CONNECTIONS_PER_ORIGIN
    trace_context: bool = True

    def __post_init__(self) -> None:
        if self.stamps not in STAMP_CHOICES:
            raise TargetError(f"--stamps must be one of {', '.join(STAMP_CHOICES)}, not {self.stamps!r}")
        if self.max_connections_per_origin < 1:
            raise TargetError("the pool needs at least one connection per origin")
        scheme = self.base_url.partition("://")[0].lower()
        if scheme not in ("http", "https"):
            raise TargetError(f"the URL must start with http:// or https://, got {redact_url(self.base_url)!r}")
        if self.http3 and scheme != "https":
            raise TargetError("HTTP/3 runs over QUIC with TLS: it needs an https:// URL")

    @classmethod
    def resolve(
        cls,
        url: str,
        *,
        dialect: str | Dialect = DEFAULT_DIALECT,
        api_key: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
        **settings: Any,
    ) -> Target:
        """The target at ``url`` spoken to in ``dialect`` (a registry name or the object): the URL normalised for
        it, ``headers`` followed by ``api_key`` in the dialect's form (``Authorization: Bearer``, Anthropic's
        ``x-api-key``); ``settings`` are the other fields (``verify``, ``timeouts``, ``stamps`` …)."""
        speaks = get_dialect(dialect) if isinstance(dialect, str) else dialect
        all_headers = list(headers)
        if api_key:
            all_headers.extend(speaks.credential_headers(api_key))
        return cls(normalise_base_url(url, speaks.base_path), speaks, tuple(all_headers), **settings)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}: {value}" for name, value in redact_headers(self.headers).items())
        return (
            f"Target({redact_url(self.base_url)!r}, dialect={self.dialect.name!r}, headers=[{shown}], "
            f"verify={self.verify}, ca_file={self.ca_file!r}, timeouts={self.timeouts!r}, stamps={self.stamps!r}, "
            f"http2={self.http2}, http3={self.http3}, "
            f"max_connections_per_origin={self.max_connections_per_origin}, trace_context={self.trace_context})"
        )

    @property
    def tls(self) -> bool:
        """True for an https target."""
        return self.base_url.lower().startswith("https://")

    def replace(self, **changes: Any) -> Target:
        """This target with ``changes`` to its fields."""
        return dataclasses.replace(self, **changes)

    def at(self, url: str) -> Target:
        """The same settings for another server (``--direct``'s upstream), its URL normalised as this one's."""
        return dataclasses.replace(self, base_url=normalise_base_url(url, self.dialect.base_path))

    def client(self, **overrides: Any) -> Client:
        """A fresh measuring client for this target (an :class:`~latscope.wire.h3.H3Client` when it speaks
        HTTP/3); ``overrides`` are other :class:`~latscope.wire.Client` arguments (``quickack``, ``keep_text``,
        ``limits`` …) or replace the target's own for this client."""
        options: dict[str, Any] = {
            "verify": self.verify,
            "ca_file": self.ca_file,
            "http2": self.http2,
            "headers": self.headers,
            "timeouts": self.timeouts,
            "stamps": self.stamps,
            "max_connections_per_origin": self.max_connections_per_origin,
            "trace_context": self.trace_context,
        }
        options.update(overrides)
        if not self.http3:
            return Client(**options)
        from latscope.wire.h3 import H3Client  # aioquic is optional

        return H3Client(**options)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the headers and any credential in the URL redacted (what ``run.json`` and the diagnosis
        JSON store as ``target``): ``url``, ``dialect``, ``headers`` (lower-cased names → redacted values),
        ``verify``, ``ca_file``, ``timeouts`` (s per phase), ``stamps``, ``http2``, ``http3``,
        ``max_connections_per_origin``, ``trace_context``."""
        return {
            "url": redact_url(self.base_url),
            "dialect": self.dialect.name,
            "headers": redact_headers(self.headers),
            "verify": self.verify,
            "ca_file": self.ca_file,
            "timeouts": dataclasses.asdict(self.timeouts),
            "stamps": self.stamps,
            "http2": self.http2,
            "http3": self.http3,
            "max_connections_per_origin": self.max_connections_per_origin,
            "trace_context": self.trace_context,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, url: str | None = None, headers: Headers = ()) -> Target:
        """The target :meth:`to_dict` wrote. Its URL and headers were stored redacted, so the real ones come
        separately: ``url`` (default: the stored one) and ``headers``."""
        return cls(
            base_url=url if url is not None else str(data["url"]),
            dialect=get_dialect(str(data["dialect"])),
            headers=tuple(headers),
            verify=bool(data.get("verify", True)),
            ca_file=data.get("ca_file"),
            timeouts=Timeouts(**data["timeouts"]) if "timeouts" in data else Timeouts(),
            stamps=str(data.get("stamps", DEFAULT_STAMPS)),
            http2=bool(data.get("http2", True)),
            http3=bool(data.get("http3", False)),
            max_connections_per_origin=int(data.get("max_connections_per_origin", DEFAULT_MAX_CONNECTIONS_PER_ORIGIN)),
            trace_context=bool(data.get("trace_context", True)),
        )


__all__ = ["Headers", "Target", "TargetError"]
