"""``Alt-Svc`` (RFC 7838): the other places a server says the same origin can be reached, HTTP/3 among them.

A server that speaks HTTP/3 announces it on its TCP responses, since a client cannot know in advance that UDP will
answer: ``Alt-Svc: h3=":443"; ma=86400``. The grammar (RFC 7838 §3)::

    Alt-Svc       = clear / 1#alt-value
    clear         = %s"clear"                      ; forget every alternative of this origin
    alt-value     = alternative *( OWS ";" OWS parameter )
    alternative   = protocol-id "=" alt-authority   ; protocol-id: an ALPN id, percent-encoded
    alt-authority = quoted-string                   ; [ uri-host ] ":" port
    parameter     = token "=" ( token / quoted-string )

``ma`` is the freshness in seconds (default 24 hours, §3.1); ``persist=1`` asks the client to keep the alternative
across network changes. An empty host means the origin's own host.

Parsing is lenient as the other signal parsers are: an alternative that does not parse is skipped with a warning,
the rest are kept, and nothing raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from latscope.signals.headers import HeaderInput, header_values, warn

#: RFC 7838 §3.1: an alternative without ``ma`` is fresh for 24 hours.
DEFAULT_MAX_AGE_S = 86_400

#: the ALPN id of HTTP/3 (RFC 9114 §3.1); drafts announced ``h3-29`` and the like, which are not HTTP/3 as published
ALPN_H3 = "h3"

_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


@dataclass(frozen=True, slots=True)
class AltService:
    """One alternative service: ``protocol`` (the ALPN id, percent-decoded: ``h3``, ``h2``), ``host`` (None: the
    origin's own host), ``port``, ``max_age_s`` (freshness, seconds; the default when the server gave none) and
    ``persist`` (``persist=1``)."""

    protocol: str
    host: str | None
    port: int
    max_age_s: int = DEFAULT_MAX_AGE_S
    persist: bool = False

    @property
    def is_h3(self) -> bool:
        """True for HTTP/3 as published (``h3``), not its drafts."""
        return self.protocol == ALPN_H3


@dataclass(frozen=True, slots=True)
class AltSvc:
    """What a response's ``Alt-Svc`` fields said: ``clear`` (the server withdrew every alternative) or the
    ``services`` in order of the server's preference."""

    services: tuple[AltService, ...] = ()
    clear: bool = False

    @property
    def h3(self) -> AltService | None:
        """The first HTTP/3 alternative, or None."""
        return next((s for s in self.services if s.is_h3), None)


def parse_alt_svc(value: str, *, warnings: list[str] | None = None) -> AltSvc:
    """Parse one ``Alt-Svc`` field value (or several joined with commas)."""
    text = value.strip(" \t")
    if text == "clear":
        return AltSvc(clear=True)
    services: list[AltService] = []
    for member in _split(text, ","):
        member = member.strip(" \t")
        if not member:
            continue
        service = _alternative(member)
        if service is None:
            warn(warnings, f"Alt-Svc: skipped an alternative that does not parse: {member[:80]!r}")
            continue
        services.append(service)
    return AltSvc(services=tuple(services))


def alt_svc(headers: HeaderInput, *, warnings: list[str] | None = None) -> AltSvc | None:
    """Every ``Alt-Svc`` field of a response as one :class:`AltSvc`; None when the response has none. A ``clear``
    anywhere wins (RFC 7838 §3: it invalidates every alternative)."""
    values = header_values(headers, "alt-svc")
    if not values:
        return None
    services: list[AltService] = []
    for value in values:
        parsed = parse_alt_svc(value, warnings=warnings)
        if parsed.clear:
            return AltSvc(clear=True)
        services.extend(parsed.services)
    return AltSvc(services=tuple(services))


def _alternative(member: str) -> AltService | None:
    parts = _split(member, ";")
    head = parts[0].strip(" \t")
    protocol_id, eq, authority = head.partition("=")
    protocol_id = protocol_id.strip(" \t")
    if not eq or not protocol_id or not set(protocol_id) <= _TOKEN_CHARS:
        return None
    quoted = _unquote(authority.strip(" \t"))
    if quoted is None:
        return None
    host, colon, port_text = quoted.rpartition(":")
    if not colon or not port_text.isdigit() or not port_text.isascii() or not 0 < int(port_text) < 65_536:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    max_age_s = DEFAULT_MAX_AGE_S
    persist = False
    for parameter in parts[1:]:
        name, eq, raw = parameter.strip(" \t").partition("=")
        if not eq:
            continue  # not a parameter: RFC 7838 §3 lets a client ignore what it does not understand
        param = raw.strip(" \t")
        found = _unquote(param) if param.startswith('"') else param
        if found is None:
            continue
        name = name.strip(" \t").lower()
        if name == "ma" and found.isdigit() and found.isascii():
            max_age_s = int(found)
        elif name == "persist":
            persist = found == "1"
    return AltService(unquote(protocol_id), host or None, int(port_text), max_age_s, persist)


def _unquote(text: str) -> str | None:
    """The content of an RFC 9110 quoted-string (backslash escapes undone), or None when ``text`` is not one."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return None
    out: list[str] = []
    escaped = False
    for ch in text[1:-1]:
        if escaped:
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            return None
        else:
            out.append(ch)
    return None if escaped else "".join(out)


def _split(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside quoted strings."""
    parts: list[str] = []
    start = 0
    quoted = escaped = False
    for index, ch in enumerate(text):
        if escaped:
            escaped = False
        elif quoted and ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == separator and not quoted:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts


def h3_advertised(headers: HeaderInput) -> dict[str, Any] | None:
    """The target fact a report shows: the first HTTP/3 alternative the response's ``Alt-Svc`` names, as
    ``{"port", "host", "max_age_s"}`` (host None: the origin's own); None when the response advertises none (no
    field, no ``h3`` in it, or ``clear``)."""
    parsed = alt_svc(headers)
    service = None if parsed is None else parsed.h3
    if service is None:
        return None
    return {"port": service.port, "host": service.host, "max_age_s": service.max_age_s}


def describe_h3(fact: dict[str, Any]) -> str:
    """``h3 advertised (port 443, max-age 86400 s)`` for a fact of :func:`h3_advertised`."""
    where = f"{fact['host']}:{fact['port']}" if fact.get("host") else f"port {fact['port']}"
    return f"h3 advertised ({where}, max-age {fact['max_age_s']} s)"
