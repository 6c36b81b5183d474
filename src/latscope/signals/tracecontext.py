"""W3C Trace Context (https://www.w3.org/TR/trace-context/): ``traceparent`` and ``tracestate``.

latscope sends a ``traceparent`` with each request so that a server's own traces (OpenTelemetry spans) can be
joined with the client timeline by trace id; a server that echoes or forwards the header lets the join be checked.

``traceparent`` (§3.2): ``version "-" trace-id "-" parent-id "-" trace-flags`` in lower-case hex, e.g.
``00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01``. Version ``ff`` is invalid; version ``00`` must be exactly
that long; a higher version may append fields after a ``-`` and is read for its first four fields (§3.2.4, "versioning
of traceparent"). A trace id or parent id of all zeros is invalid (§3.2.2.3, §3.2.2.4).

``tracestate`` (§3.3): up to 32 comma-separated ``key=value`` list members; keys are ``simple-key`` or
``tenant@system``; empty members are allowed and skipped; a repeated key is invalid.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from latscope.signals.headers import warn

_HEX = "0123456789abcdef"
_INVALID_VERSION = "ff"
_TRACEPARENT_00_LENGTH = 55
MAX_TRACESTATE_MEMBERS = 32  # §3.3.1.1: "There can be a maximum of 32 list-members in a list."

# §3.3.1.3.1 key / value grammar.
_SIMPLE_KEY = r"[a-z][a-z0-9_\-*/]{0,255}"
_TENANT_KEY = r"[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13}"
_KEY = re.compile(rf"(?:{_SIMPLE_KEY}|{_TENANT_KEY})")
_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A parsed ``traceparent``: ids as lower-case hex strings, flags as an integer (bit 0 = sampled)."""

    version: str  #: 2 hex digits, "00" today
    trace_id: str  #: 32 hex digits, not all zeros
    parent_id: str  #: 16 hex digits, not all zeros (the caller's span id)
    flags: int  #: trace-flags byte

    @property
    def sampled(self) -> bool:
        """The ``sampled`` flag (§3.2.2.5.1)."""
        return bool(self.flags & 0x01)

    def header_value(self) -> str:
        """The value serialised as version 00."""
        return f"00-{self.trace_id}-{self.parent_id}-{self.flags:02x}"


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and all(ch in _HEX for ch in text)


def parse_traceparent(value: str, *, warnings: list[str] | None = None) -> TraceParent | None:
    """Parse and validate a ``traceparent`` value; None (with a warning) when it is invalid."""
    text = value.strip(" \t")
    fields = text.split("-")
    if len(fields) < 4:
        warn(warnings, f"traceparent: {value!r} does not have four fields; ignored")
        return None
    version, trace_id, parent_id, flags = fields[:4]
    if not _is_hex(version, 2) or version == _INVALID_VERSION:
        warn(warnings, f"traceparent: invalid version {version!r}; ignored")
        return None
    if version == "00" and (len(text) != _TRACEPARENT_00_LENGTH or len(fields) != 4):
        warn(warnings, f"traceparent: version 00 value {value!r} has the wrong length; ignored")
        return None
    if not _is_hex(trace_id, 32) or trace_id == "0" * 32:
        warn(warnings, f"traceparent: invalid trace-id {trace_id!r}; ignored")
        return None
    if not _is_hex(parent_id, 16) or parent_id == "0" * 16:
        warn(warnings, f"traceparent: invalid parent-id {parent_id!r}; ignored")
        return None
    if not _is_hex(flags, 2):
        warn(warnings, f"traceparent: invalid trace-flags {flags!r}; ignored")
        return None
    return TraceParent(version=version, trace_id=trace_id, parent_id=parent_id, flags=int(flags, 16))


def new_traceparent(*, sampled: bool = True) -> tuple[str, str]:
    """A fresh version-00 ``traceparent`` with random ids: returns ``(header_value, trace_id)``.

    Ids come from :mod:`secrets` (§3.2.2.3 asks for randomness in the trace id); an all-zero id, invalid by the spec,
    is drawn again.
    """
    trace_id = "0" * 32
    while trace_id == "0" * 32:
        trace_id = secrets.token_hex(16)
    parent_id = "0" * 16
    while parent_id == "0" * 16:
        parent_id = secrets.token_hex(8)
    return TraceParent("00", trace_id, parent_id, 0x01 if sampled else 0x00).header_value(), trace_id


def parse_tracestate(value: str, *, warnings: list[str] | None = None) -> list[tuple[str, str]]:
    """Parse ``tracestate`` into ``(key, value)`` members in order.

    Invalid members are dropped with a warning (the spec lets a vendor discard the whole header; keeping the valid
    members loses less); members past the 32nd are dropped; a repeated key keeps its first occurrence.
    """
    members: list[tuple[str, str]] = []
    seen: set[str] = set()
    for raw in value.split(","):
        member = raw.strip(" \t")
        if not member:
            continue  # §3.3.1.1: empty list members are allowed
        key, sep, member_value = member.partition("=")
        if not sep or not _KEY.fullmatch(key) or not _VALUE.fullmatch(member_value):
            warn(warnings, f"tracestate: invalid member {member!r}; dropped")
            continue
        if key in seen:
            warn(warnings, f"tracestate: repeated key {key!r}; later member dropped")
            continue
        if len(members) == MAX_TRACESTATE_MEMBERS:
            warn(warnings, f"tracestate: more than {MAX_TRACESTATE_MEMBERS} members; the rest dropped")
            break
        seen.add(key)
        members.append((key, member_value))
    return members


def format_tracestate(members: list[tuple[str, str]]) -> str:
    """Serialise ``tracestate`` members (at most the first 32)."""
    return ",".join(f"{key}={value}" for key, value in members[:MAX_TRACESTATE_MEMBERS])
