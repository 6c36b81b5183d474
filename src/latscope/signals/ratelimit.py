"""Rate-limit state from response headers, normalised into one :class:`RateLimitState` whatever the dialect.

Formats read (server-signals.md, "Hosted APIs"):

* OpenAI: ``x-ratelimit-{limit,remaining}-{requests,tokens}`` (integers) and ``x-ratelimit-reset-{requests,tokens}``
  (Go durations: ``1s``, ``6m0s``, ``12ms``).
* Anthropic: ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``; reset is
  an RFC 3339 timestamp, turned into seconds from ``now``.
* IETF draft-ietf-httpapi-ratelimit-headers, structured-field era (draft-08 on):
  ``RateLimit-Policy: "burst";q=100;w=60`` (quota ``q``, window ``w`` seconds, quota unit ``qu``) and
  ``RateLimit: "burst";r=50;t=30`` (remaining ``r``, ``t`` seconds until more quota); items are joined by policy
  name. Draft-07's dictionary form
  ``RateLimit: limit=100, remaining=50, reset=30`` with ``RateLimit-Policy: 100;w=60`` is read too.
* Older drafts: ``RateLimit-Limit`` / ``RateLimit-Remaining`` / ``RateLimit-Reset`` (reset in delta seconds).
* The de-facto ``X-RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` many gateways send. Their reset is either seconds
  from now or a Unix time, and nothing in the header says which. Heuristic: a value of at least 10⁹ is a Unix time
  (10⁹ s is 31.7 years, so no real delta is that large, and every Unix time since September 2001 is larger); at least
  10¹² is a Unix time in milliseconds; anything smaller is seconds from now. An HTTP date is accepted as well.
* ``Retry-After`` (RFC 9110 §10.2.3: delay seconds, leniently a decimal, or an HTTP date), OpenAI's ``retry-after-ms``
  (preferred when present, as the OpenAI SDKs do) and ``x-should-retry`` (``true`` / ``false``); either with the
  ``llm_provider-`` prefix of LiteLLM's proxy when the bare one is absent.

All times are seconds. Absolute times in the past clamp to 0 (the window has already reset); negative durations are
malformed and ignored with a warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from latscope.signals.headers import HeaderInput, first_header, header_pairs, header_values, int_field, list_field, warn
from latscope.signals.structured import InnerList, Item, StructuredFieldError, parse_dictionary, parse_list
from latscope.signals.timeformats import (
    parse_finite_float,
    parse_go_duration,
    parse_http_date,
    parse_nonnegative_int,
    parse_rfc3339,
    to_unix_seconds,
)

OPENAI_DIMENSIONS = ("requests", "tokens")
ANTHROPIC_DIMENSIONS = ("requests", "tokens", "input-tokens", "output-tokens")

# Below this an X-RateLimit-Reset value is seconds from now; at or above it, a Unix time (see the module docstring).
EPOCH_SECONDS_THRESHOLD = 1e9
# At or above this, a Unix time in milliseconds (10¹² ms is also September 2001).
EPOCH_MILLISECONDS_THRESHOLD = 1e12


@dataclass(frozen=True, slots=True)
class RateLimitWindow:
    """One rate-limit dimension as the server described it.

    ``dimension`` is ``requests``, ``tokens``, ``input-tokens``, ``output-tokens`` or, for IETF policies, the quota
    unit (``requests``, ``content-bytes``, ``concurrent-requests``). ``reset_s`` is seconds from ``now`` until the
    quota resets (or, for IETF ``t``, until more quota is available); ``window_s`` the policy's window length when
    the server states one. ``source`` is ``openai``, ``anthropic``, ``ietf``, ``ietf-draft`` or ``x-ratelimit``.
    """

    dimension: str
    limit: int | None = None
    remaining: int | None = None
    reset_s: float | None = None
    window_s: float | None = None
    policy: str | None = None  #: IETF policy name (``"burst"``), when the server names one
    source: str = ""

    @property
    def exhausted(self) -> bool:
        """True when the server says nothing is left in this window."""
        return self.remaining == 0


@dataclass(frozen=True, slots=True)
class RateLimitState:
    """Every rate-limit window found in one response, plus the retry advice. Times in seconds."""

    windows: tuple[RateLimitWindow, ...] = ()
    retry_after_s: float | None = None  #: how long the server asks the client to wait before retrying
    #: ``retry-after-ms`` or ``retry-after``, or either with a gateway's ``llm_provider-`` prefix (LiteLLM)
    retry_after_source: str | None = None
    should_retry: bool | None = None  #: ``x-should-retry``, when sent

    def window(self, dimension: str, source: str | None = None) -> RateLimitWindow | None:
        """The first window for ``dimension`` (optionally from ``source``), or None."""
        for window in self.windows:
            if window.dimension == dimension and (source is None or window.source == source):
                return window
        return None

    @property
    def exhausted(self) -> tuple[RateLimitWindow, ...]:
        """Windows with nothing remaining."""
        return tuple(window for window in self.windows if window.exhausted)

    @property
    def empty(self) -> bool:
        """True when the response carried no rate-limit information at all."""
        return not self.windows and self.retry_after_s is None and self.should_retry is None


class _Reader:
    """Shared state of one parse: the headers, the reference time and the warnings list."""

    def __init__(self, headers: HeaderInput, now_s: float, warnings: list[str] | None) -> None:
        self.headers = headers
        self.now_s = now_s
        self.warnings = warnings

    def get(self, name: str) -> str | None:
        return first_header(self.headers, name)

    def count(self, name: str) -> int | None:
        return int_field(self.headers, name, "rate-limit", self.warnings)

    def seconds(self, name: str, parse: Callable[[str], float | None], unit: str) -> float | None:
        raw = self.get(name)
        if raw is None:
            return None
        value = parse(raw)
        if value is None or value < 0:
            warn(self.warnings, f"rate-limit: {name}: {raw!r} is not {unit}; ignored")
            return None
        return value

    def until(self, when: datetime | None) -> float | None:
        return None if when is None else max(0.0, when.timestamp() - self.now_s)


def rate_limit_state(
    headers: HeaderInput,
    now: datetime | float,
    *,
    warnings: list[str] | None = None,
) -> RateLimitState:
    """Read every rate-limit header format (see the module docstring) relative to ``now``.

    ``now`` is when the response arrived, as an aware datetime or Unix seconds; it turns absolute reset times
    (Anthropic RFC 3339 timestamps, Unix times, HTTP dates) into seconds from now.
    """
    reader = _Reader(header_pairs(headers), to_unix_seconds(now), warnings)
    windows = [*_openai(reader), *_anthropic(reader), *_ietf(reader), *_ietf_older(reader), *_x_ratelimit(reader)]
    retry_after_s, retry_source = _retry_after(reader)
    return RateLimitState(
        windows=tuple(windows),
        retry_after_s=retry_after_s,
        retry_after_source=retry_source,
        should_retry=_should_retry(reader),
    )


def _window(
    dimension: str,
    source: str,
    limit: int | None,
    remaining: int | None,
    reset_s: float | None,
    window_s: float | None = None,
    policy: str | None = None,
) -> list[RateLimitWindow]:
    if limit is None and remaining is None and reset_s is None:
        return []
    return [RateLimitWindow(dimension, limit, remaining, reset_s, window_s, policy, source)]


def _openai(r: _Reader) -> list[RateLimitWindow]:
    windows: list[RateLimitWindow] = []
    for dim in OPENAI_DIMENSIONS:
        windows += _window(
            dim,
            "openai",
            r.count(f"x-ratelimit-limit-{dim}"),
            r.count(f"x-ratelimit-remaining-{dim}"),
            r.seconds(f"x-ratelimit-reset-{dim}", parse_go_duration, "a Go duration"),
        )
    return windows


def _anthropic(r: _Reader) -> list[RateLimitWindow]:
    windows: list[RateLimitWindow] = []
    for dim in ANTHROPIC_DIMENSIONS:
        prefix = f"anthropic-ratelimit-{dim}"
        reset_s = None
        raw_reset = r.get(f"{prefix}-reset")
        if raw_reset is not None:
            reset_s = r.until(parse_rfc3339(raw_reset))
            if reset_s is None:
                warn(r.warnings, f"rate-limit: {prefix}-reset: {raw_reset!r} is not an RFC 3339 time; ignored")
        windows += _window(dim, "anthropic", r.count(f"{prefix}-limit"), r.count(f"{prefix}-remaining"), reset_s)
    return windows


def _int_param(item: Item, key: str) -> int | None:
    value = item.params.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _sf_list(r: _Reader, name: str) -> list[Item] | None:
    members = list_field(r.headers, name, "rate-limit", r.warnings)
    if members is None:
        return None
    items = [member for member in members if isinstance(member, Item)]
    if len(items) != len(members):
        warn(r.warnings, f"rate-limit: {name}: inner lists are not rate-limit items; skipped")
    return items


def _ietf(r: _Reader) -> list[RateLimitWindow]:
    """RateLimit / RateLimit-Policy as structured fields (draft-08 and later, and draft-07's dictionary)."""
    policies = _sf_list(r, "ratelimit-policy") or []
    if r.get("ratelimit") is None:
        return [_policy_window(item, None) for item in policies if _is_policy(item)]
    try:
        members = parse_list(header_values(r.headers, "ratelimit"))
    except StructuredFieldError:
        return _ietf_draft7(r, policies)
    windows: list[RateLimitWindow] = []
    named = {str(item.value): item for item in policies if isinstance(item.value, str)}
    for member in members:
        if not isinstance(member, Item) or not isinstance(member.value, str):
            warn(r.warnings, "rate-limit: RateLimit member is not a policy name; skipped")
            continue
        policy = named.pop(str(member.value), None)
        base = _policy_window(policy, str(member.value)) if policy is not None else None
        until_more = _int_param(member, "t")
        windows.append(
            RateLimitWindow(
                dimension=base.dimension if base else "requests",
                limit=base.limit if base else None,
                remaining=_int_param(member, "r"),
                reset_s=None if until_more is None else float(until_more),
                window_s=base.window_s if base else None,
                policy=str(member.value),
                source="ietf",
            )
        )
    # Policies the server declared without current state still say what the limits are.
    windows += [_policy_window(item, name) for name, item in named.items()]
    return windows


def _is_policy(item: Item) -> bool:
    """A policy item is named by a string (draft-08+) or is a bare quota integer (draft-07)."""
    return isinstance(item.value, str | int) and not isinstance(item.value, bool | bytes)


def _policy_window(item: Item, name: str | None) -> RateLimitWindow:
    """A window from one RateLimit-Policy item: draft-08+ (``"name";q=…;w=…``) or draft-07 (``100;w=60``)."""
    window = _int_param(item, "w")
    window_s = None if window is None else float(window)
    if isinstance(item.value, int) and not isinstance(item.value, bool):
        return RateLimitWindow("requests", limit=item.value, window_s=window_s, source="ietf-draft")
    unit = item.params.get("qu")
    return RateLimitWindow(
        dimension=str(unit) if isinstance(unit, str) else "requests",  # the draft's default quota unit
        limit=_int_param(item, "q"),
        window_s=window_s,
        policy=name if name is not None else str(item.value),
        source="ietf",
    )


def _ietf_draft7(r: _Reader, policies: list[Item]) -> list[RateLimitWindow]:
    """Draft-07: ``RateLimit: limit=100, remaining=50, reset=30`` with ``RateLimit-Policy: 100;w=60``."""
    try:
        fields = parse_dictionary(header_values(r.headers, "ratelimit"))
    except StructuredFieldError as exc:
        warn(r.warnings, f"rate-limit: RateLimit is neither a list nor a dictionary ({exc}); ignored")
        return []

    def number(key: str) -> int | None:
        member = fields.get(key)
        if isinstance(member, InnerList) or member is None:
            return None
        value = member.value
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    window_s = None
    for item in policies:
        if isinstance(item.value, int) and _int_param(item, "w") is not None:
            window_s = float(_int_param(item, "w") or 0)
            break
    reset = number("reset")
    return _window(
        "requests",
        "ietf-draft",
        number("limit"),
        number("remaining"),
        None if reset is None else float(reset),
        window_s,
    )


def _leading_int(r: _Reader, name: str) -> int | None:
    """The first number of an older-draft field, which may carry policies after it (``10, 10;w=1, 50;w=60``)."""
    raw = r.get(name)
    if raw is None:
        return None
    head = raw.split(",", 1)[0].split(";", 1)[0]
    value = parse_nonnegative_int(head)
    if value is None:
        warn(r.warnings, f"rate-limit: {name}: {raw!r} is not a non-negative integer; ignored")
    return value


def _ietf_older(r: _Reader) -> list[RateLimitWindow]:
    reset = r.seconds("ratelimit-reset", parse_finite_float, "delta seconds")
    return _window(
        "requests", "ietf-draft", _leading_int(r, "ratelimit-limit"), _leading_int(r, "ratelimit-remaining"), reset
    )


def _x_ratelimit(r: _Reader) -> list[RateLimitWindow]:
    reset_s = None
    raw = r.get("x-ratelimit-reset")
    if raw is not None:
        reset_s = _reset_heuristic(raw, r.now_s)
        if reset_s is None:
            warn(r.warnings, f"rate-limit: x-ratelimit-reset: {raw!r} is not a number or an HTTP date; ignored")
    reset_after = r.seconds("x-ratelimit-reset-after", parse_finite_float, "delta seconds")
    if reset_after is not None:
        reset_s = reset_after  # explicitly relative, so better than the heuristic
    return _window("requests", "x-ratelimit", r.count("x-ratelimit-limit"), r.count("x-ratelimit-remaining"), reset_s)


def _reset_heuristic(raw: str, now_s: float) -> float | None:
    value = parse_finite_float(raw)
    if value is None:
        date = parse_http_date(raw)
        return None if date is None else max(0.0, date.timestamp() - now_s)
    if value >= EPOCH_MILLISECONDS_THRESHOLD:
        return max(0.0, value / 1000.0 - now_s)
    if value >= EPOCH_SECONDS_THRESHOLD:
        return max(0.0, value - now_s)
    return max(0.0, value)


#: Where a gateway passes on the provider's own headers: LiteLLM's proxy prefixes them (``llm_provider-retry-after``)
#: and answers its own router's refusals with them alone, no bare ``Retry-After``.
_RETRY_AFTER_PREFIXES = ("", "llm_provider-")


def _retry_after(r: _Reader) -> tuple[float | None, str | None]:
    for prefix in _RETRY_AFTER_PREFIXES:
        found = _prefixed_retry_after(r, prefix)
        if found[0] is not None:
            return found
    return None, None


def _prefixed_retry_after(r: _Reader, prefix: str) -> tuple[float | None, str | None]:
    """``{prefix}retry-after-ms``, else ``{prefix}retry-after`` (delay seconds or an HTTP date), with its name."""
    ms = r.seconds(f"{prefix}retry-after-ms", parse_finite_float, "milliseconds")
    if ms is not None:
        return ms / 1000.0, f"{prefix}retry-after-ms"
    name = f"{prefix}retry-after"
    raw = r.get(name)
    if raw is None:
        return None, None
    seconds = parse_finite_float(raw)
    if seconds is not None and seconds >= 0:
        return seconds, name
    date = parse_http_date(raw)
    if date is not None:
        return r.until(date), name
    warn(r.warnings, f"rate-limit: {name}: {raw!r} is neither delay seconds nor an HTTP date; ignored")
    return None, None


def _should_retry(r: _Reader) -> bool | None:
    raw = r.get("x-should-retry")
    if raw is None:
        return None
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    warn(r.warnings, f"rate-limit: x-should-retry: {raw!r} is not true/false; ignored")
    return None
