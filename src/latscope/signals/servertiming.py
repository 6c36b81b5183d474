"""W3C Server-Timing (https://www.w3.org/TR/server-timing/): server-reported durations in milliseconds.

Grammar (the spec's "The Server-Timing Header Field", with RFC 9110 §5.6 token / quoted-string)::

    Server-Timing             = #server-timing-metric
    server-timing-metric      = metric-name *( OWS ";" OWS server-timing-param )
    server-timing-param       = server-timing-param-name [ OWS "=" OWS server-timing-param-value ]
    server-timing-param-value = token / quoted-string

Example: ``Server-Timing: db;dur=53, cache;desc="Cache Read";dur=23.2``. The field may repeat (each line is a
list) and may arrive as an HTTP trailer, so :func:`parse_server_timing` takes header pairs and the caller passes
trailers too. Processing follows the spec's processing model: parameter names are case-insensitive and only the
first ``dur`` / ``desc`` of a metric counts; the same metric name may appear several times and each occurrence is
kept. A parameter without ``=value`` is accepted (value ``None``). Unlike the spec, which turns an unreadable ``dur``
into 0, an unreadable ``dur`` here is dropped with a warning: a made-up zero would be a false measurement.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from latscope.signals.headers import HeaderInput, header_values, warn
from latscope.signals.timeformats import parse_finite_float

# RFC 9110 §5.6.2 tchar.
TCHARS = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_OWS = " \t"

_TCHAR_CLASS = "[" + re.escape("".join(sorted(TCHARS))) + "]+"
_PARAM = rf"[ \t]*;[ \t]*{_TCHAR_CLASS}(?:[ \t]*=[ \t]*{_TCHAR_CLASS})?"
#: A field value of metrics whose parameters are all tokens (no quoted string, no empty member, nothing malformed):
#: what servers write. It is split on its separators directly; anything else goes through the scanner.
_PLAIN_VALUE = re.compile(rf"[ \t]*{_TCHAR_CLASS}(?:{_PARAM})*[ \t]*(?:,[ \t]*{_TCHAR_CLASS}(?:{_PARAM})*[ \t]*)*")
#: One member that is a name and a ``dur`` of plain decimal digits, nothing else (``queue;dur=0.068``): the lab's
#: shape, and the spec's plainest. Group 1 the name, group 2 the duration.
_DUR_MEMBER = rf"[ \t]*({_TCHAR_CLASS})[ \t]*;[ \t]*dur[ \t]*=[ \t]*(\d+(?:\.\d*)?|\.\d+)[ \t]*"
_DUR_MEMBER_RE = re.compile(_DUR_MEMBER)
#: A field value of such members only: read with one pattern (:func:`_parse_durations`).
_DURATIONS_VALUE = re.compile(rf"{_DUR_MEMBER}(?:,{_DUR_MEMBER})*")


@dataclass(frozen=True, slots=True)
class ServerTimingMetric:
    """One ``server-timing-metric``.

    ``dur_ms`` is the ``dur`` parameter in milliseconds (None when absent or unreadable); ``desc`` the description;
    ``params`` every parameter in order, first occurrence of each name only, names lower-cased, values unquoted
    (None for a parameter written without ``=``).
    """

    name: str
    dur_ms: float | None = None
    desc: str | None = None
    params: tuple[tuple[str, str | None], ...] = ()


class _Scanner:
    """A cursor over one field value."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    @property
    def done(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_ows(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in _OWS:
            self.pos += 1

    def token(self) -> str:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in TCHARS:
            self.pos += 1
        return self.text[start : self.pos]

    def quoted_string(self) -> str | None:
        """Read a quoted-string starting at ``"``; None when it is not terminated."""
        self.pos += 1  # the opening quote
        out: list[str] = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "\\" and self.pos + 1 < len(self.text):
                out.append(self.text[self.pos + 1])  # quoted-pair (RFC 9110 §5.6.4)
                self.pos += 2
            elif ch == '"':
                self.pos += 1
                return "".join(out)
            else:
                out.append(ch)
                self.pos += 1
        return None

    def skip_to_next_member(self) -> None:
        """Move past the next top-level comma (commas inside quoted strings do not count)."""
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == '"':
                self.quoted_string()
                continue
            self.pos += 1
            if ch == ",":
                return


def parse_server_timing_value(value: str, *, warnings: list[str] | None = None) -> list[ServerTimingMetric]:
    """Parse one Server-Timing field value (a comma-separated list of metrics). Malformed members are skipped."""
    if _DURATIONS_VALUE.fullmatch(value):
        return _parse_durations(value)
    if _PLAIN_VALUE.fullmatch(value):
        return _parse_plain(value, warnings)
    return _parse_scanned(value, warnings)


def _parse_durations(value: str) -> list[ServerTimingMetric]:
    """A value :data:`_DURATIONS_VALUE` matched: each member's name and ``dur`` as the pattern found them (faster
    than the split; the same metrics, tests/signals/test_servertiming.py). Digits with at most one point are always
    a finite, non-negative number: nothing here can warn."""
    return [
        ServerTimingMetric(name=name, dur_ms=float(dur), params=(("dur", dur),))
        for name, dur in _DUR_MEMBER_RE.findall(value)
    ]


def _parse_plain(value: str, warnings: list[str] | None) -> list[ServerTimingMetric]:
    """A value :data:`_PLAIN_VALUE` matched, split at its commas, semicolons and equals signs (faster than the
    scanner; the same metrics, tests/signals/test_servertiming.py)."""
    metrics: list[ServerTimingMetric] = []
    for member in value.split(","):
        name, *raw_params = member.split(";")
        params: dict[str, str | None] = {}
        for raw in raw_params:
            param, eq, param_value = raw.partition("=")
            params.setdefault(param.strip(_OWS).lower(), param_value.strip(_OWS) if eq else None)
        metrics.append(_metric_of(name.strip(_OWS), params, warnings))
    return metrics


def _parse_scanned(value: str, warnings: list[str] | None) -> list[ServerTimingMetric]:
    """Any value, read token by token as the grammar says."""
    scan = _Scanner(value)
    metrics: list[ServerTimingMetric] = []
    while True:
        scan.skip_ows()
        while scan.peek() == ",":  # empty list elements are allowed by the #rule (RFC 9110 §5.6.1)
            scan.pos += 1
            scan.skip_ows()
        if scan.done:
            return metrics
        metric = _metric(scan, value, warnings)
        if metric is not None:
            metrics.append(metric)


def _metric(scan: _Scanner, value: str, warnings: list[str] | None) -> ServerTimingMetric | None:
    name = scan.token()
    if not name:
        warn(warnings, f"server-timing: metric without a name at offset {scan.pos} in {value!r}; skipped")
        scan.skip_to_next_member()
        return None
    params: dict[str, str | None] = {}
    while True:
        scan.skip_ows()
        ch = scan.peek()
        if ch in (",", ""):
            if ch == ",":
                scan.pos += 1
            break
        if ch != ";":
            warn(warnings, f"server-timing: unexpected {ch!r} in metric {name!r}; rest of the metric skipped")
            scan.skip_to_next_member()
            break
        scan.pos += 1
        scan.skip_ows()
        param = scan.token().lower()
        if not param:
            warn(warnings, f"server-timing: parameter without a name in metric {name!r}; rest of the metric skipped")
            scan.skip_to_next_member()
            break
        scan.skip_ows()
        param_value: str | None = None
        if scan.peek() == "=":
            scan.pos += 1
            scan.skip_ows()
            if scan.peek() == '"':
                param_value = scan.quoted_string()
                if param_value is None:
                    warn(warnings, f"server-timing: unterminated quoted string in metric {name!r}; parameter ignored")
                    break
            else:
                param_value = scan.token()
        params.setdefault(param, param_value)  # the processing model: only a parameter's first occurrence counts
    return _metric_of(name, params, warnings)


def _metric_of(name: str, params: dict[str, str | None], warnings: list[str] | None) -> ServerTimingMetric:
    """The metric ``name`` with its parameters (first occurrences, names lower-cased): ``dur`` and ``desc`` read."""
    return ServerTimingMetric(
        name=name,
        dur_ms=_dur(name, params.get("dur"), "dur" in params, warnings),
        desc=params.get("desc"),
        params=tuple(params.items()),
    )


def _dur(name: str, raw: str | None, present: bool, warnings: list[str] | None) -> float | None:
    if not present:
        return None
    dur = parse_finite_float(raw) if raw else None
    if dur is None or dur < 0:
        warn(warnings, f"server-timing: metric {name!r} has an unreadable dur={raw!r}; ignored")
        return None
    return dur


def parse_server_timing(
    headers: HeaderInput,
    trailers: HeaderInput = (),
    *,
    warnings: list[str] | None = None,
) -> list[ServerTimingMetric]:
    """Every Server-Timing metric in the header fields, then in the trailer fields, in order."""
    metrics: list[ServerTimingMetric] = []
    for section in (headers, trailers):
        for value in header_values(section, "server-timing"):
            metrics.extend(parse_server_timing_value(value, warnings=warnings))
    return metrics


def format_server_timing(metrics: Iterable[ServerTimingMetric]) -> str:
    """Serialise metrics as one Server-Timing field value (``dur`` then ``desc``, then the other parameters)."""
    members: list[str] = []
    for metric in metrics:
        parts = [metric.name]
        if metric.dur_ms is not None:
            parts.append(f"dur={metric.dur_ms!r}")
        if metric.desc is not None:
            parts.append(f"desc={_quote(metric.desc)}")
        for param, param_value in metric.params:
            if param in ("dur", "desc"):
                continue
            parts.append(param if param_value is None else f"{param}={_quote(param_value)}")
        members.append(";".join(parts))
    return ", ".join(members)


def _quote(text: str) -> str:
    if text and all(ch in TCHARS for ch in text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
