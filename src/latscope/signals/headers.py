"""Access to HTTP response header (and trailer) fields, shared by every header-signal parser.

Parsers take header *pairs* rather than a dict so that repeated field lines survive (RFC 9110 §5.3: a recipient may
combine repeated lines into one comma-separated value, which is what ``Timeline.response_headers`` holds; both forms
are accepted here). Trailers are passed the same way: RFC 9110 §6.5 fields such as ``Server-Timing`` may arrive in
either section, and a caller passes ``[*headers, *trailers]`` or calls the parser twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeAlias

from latscope.signals.structured import Member, StructuredFieldError, parse_list
from latscope.signals.timeformats import parse_nonnegative_int

HeaderInput: TypeAlias = Mapping[str, str] | Iterable[tuple[str, str]]
"""Header fields as a mapping (``Timeline.response_headers``) or as ``(name, value)`` pairs in wire order."""


#: Prefixes under which a gateway passes its upstream's response headers on, renamed (LiteLLM's proxy:
#: ``llm_provider-server-timing``, ``llm_provider-traceresponse``): what the upstream server said about itself.
UPSTREAM_HEADER_PREFIXES = ("llm_provider-",)


def upstream_names(name: str) -> tuple[str, ...]:
    """``name`` (lower case) as gateways pass an upstream's header of that name on
    (:data:`UPSTREAM_HEADER_PREFIXES`)."""
    return tuple(prefix + name for prefix in UPSTREAM_HEADER_PREFIXES)


def header_pairs(headers: HeaderInput) -> list[tuple[str, str]]:
    """The fields as ``(lower-case name, value)`` pairs, in order; values have surrounding whitespace removed."""
    items: Iterable[tuple[str, str]] = headers.items() if isinstance(headers, Mapping) else headers
    return [(name.lower(), value.strip(" \t")) for name, value in items]


def header_values(headers: HeaderInput, name: str) -> list[str]:
    """Every value of field ``name`` (case-insensitive), one entry per field line, in order."""
    wanted = name.lower()
    return [value for key, value in header_pairs(headers) if key == wanted]


def first_values(headers: HeaderInput) -> dict[str, str]:
    """Each field's first value by lower-case name: one pass, for a reader that looks up several names."""
    first: dict[str, str] = {}
    for name, value in header_pairs(headers):
        first.setdefault(name, value)
    return first


def first_header(headers: HeaderInput, name: str) -> str | None:
    """The first value of field ``name`` (case-insensitive), or None when absent."""
    values = header_values(headers, name)
    return values[0] if values else None


def int_field(headers: HeaderInput, name: str, parser: str, warnings: list[str] | None) -> int | None:
    """The first value of field ``name`` as a non-negative integer (a count, or delta-seconds); None when absent, or
    when unreadable (then a warning that names the ``parser``)."""
    raw = first_header(headers, name)
    if raw is None:
        return None
    value = parse_nonnegative_int(raw)
    if value is None:
        warn(warnings, f"{parser}: {name}: {raw!r} is not a non-negative integer; ignored")
    return value


def list_field(headers: HeaderInput, name: str, parser: str, warnings: list[str] | None) -> list[Member] | None:
    """The lines of field ``name`` as one structured-field list (RFC 8941 §4.2.1); None when absent, or when not such
    a list (then a warning that names the ``parser``)."""
    lines = header_values(headers, name)
    if not lines:
        return None
    try:
        return parse_list(lines)
    except StructuredFieldError as exc:
        warn(warnings, f"{parser}: {name} is not a structured-field list ({exc}); ignored")
        return None


def warn(warnings: list[str] | None, message: str) -> None:
    """Record a non-fatal oddity when the caller collects them (every parser takes ``warnings=``)."""
    if warnings is not None:
        warnings.append(message)
