"""Keep secrets out of timelines: API keys, ``Authorization`` and ``Cookie`` values never reach a serialised record."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "[redacted]"

#: Header names (lower case) whose values are credentials or session state.
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "api-key",
        "openai-api-key",
        "anthropic-api-key",
        "x-goog-api-key",
    }
)

#: Query-string parameter names (lower case) that carry credentials.
SECRET_QUERY_PARAMS = frozenset({"key", "api_key", "apikey", "api-key", "token", "access_token", "sig", "signature"})


def is_secret_header(name: str) -> bool:
    """True when a header's value must never be recorded (credentials, cookies, anything named like a key/token)."""
    lowered = name.lower()
    return lowered in SECRET_HEADERS or lowered.endswith(("-api-key", "-token", "-secret"))


def redact_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """Lower-cased header dict with secret values replaced by ``[redacted]``; repeated names joined with ", "."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: dict[str, str] = {}
    for name, value in items:
        key = name.lower()
        shown = REDACTED if is_secret_header(key) else value
        out[key] = f"{out[key]}, {shown}" if key in out else shown
    return out


def redact_url(url: str) -> str:
    """The URL with userinfo and credential-like query parameters redacted."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if k.lower() in SECRET_QUERY_PARAMS else v) for k, v in pairs])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
