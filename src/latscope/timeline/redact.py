"""Keep secrets out of everything latscope records or shows.

Two rules, both properties rather than lists of places:

- **By name.** A header whose name looks like a credential (:func:`is_secret_header`: ``authorization``,
  ``cookie``, anything containing ``key``, ``token``, ``secret``, ``-auth``, ``signature`` …) is recorded as
  ``[redacted]``, and so are URL userinfo and credential-like query parameters.
- **By value.** Every secret value latscope is given or sends (``--api-key``, the values of ``-H`` headers, any
  credential-named header a request carries) is registered (:func:`register_secret`), and :func:`scrub` replaces it
  wherever it appears in a text: in an error message a library built from the header it refused, in a server's
  error body that echoes the key back. Every error message is scrubbed when it is made, and every record and report
  again when it is written.

A value never leaves this module shortened or altered: it is either shown whole (not a secret) or replaced whole.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "[redacted]"

#: Header names (lower case) that are credentials or session state whatever they contain.
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})

#: A header whose lower-case name contains one of these carries a credential (``x-api-key``,
#: ``ocp-apim-subscription-key``, ``x-auth-token``, ``x-amz-security-token``, ``x-goog-signature`` …).
SECRET_NAME_PARTS = ("key", "token", "secret", "-auth", "auth-", "signature", "password", "credential", "session")

#: Names that match :data:`SECRET_NAME_PARTS` but are no credential: shown, since the checks read them.
NOT_SECRET_HEADERS = frozenset({"idempotency-key", "x-idempotency-key", "keep-alive"})
#: … and names containing one of these: rate-limit quotas (``x-ratelimit-remaining-tokens``) count tokens.
NOT_SECRET_NAME_PARTS = ("ratelimit", "rate-limit")

#: Query-string parameter names (lower case) that carry credentials.
SECRET_QUERY_PARAMS = frozenset(
    {"key", "api_key", "apikey", "api-key", "token", "access_token", "sig", "signature", "code", "password"}
)

#: Secret values shorter than this are not scrubbed from texts (a 3-character value would redact every word that
#: contains it); header values are still redacted by name whatever their length.
MIN_SCRUB_CHARS = 6

_AUTH_SCHEME = re.compile(r"^(?:bearer|basic|token|apikey|key)\s+(\S.*)$", re.IGNORECASE)

_lock = threading.Lock()
#: header names (lower case) registered as secret whatever they are called (the headers a user passed by hand)
_secret_names: frozenset[str] = frozenset()
_secrets: frozenset[str] = frozenset()
#: the registered values, longest first, as one alternation (rebuilt on registration; None: nothing registered)
_pattern: re.Pattern[str] | None = None


def is_secret_header(name: str) -> bool:
    """True when a header's value must never be recorded: credentials, cookies, anything named like a key, token,
    secret, signature or authentication."""
    lowered = name.lower()
    if lowered in SECRET_HEADERS or lowered in _secret_names:
        return True
    if lowered in NOT_SECRET_HEADERS or any(part in lowered for part in NOT_SECRET_NAME_PARTS):
        return False
    return any(part in lowered for part in SECRET_NAME_PARTS)


def register_secret(value: str) -> None:
    """Remember ``value`` as a secret: :func:`scrub` replaces it (and its parts: the credential of ``Bearer X``,
    the value without surrounding whitespace or control characters) in every text from now on, in this process."""
    global _secrets, _pattern
    forms = {value, value.strip()}
    match = _AUTH_SCHEME.match(value.strip())
    if match:
        forms.add(match.group(1).strip())
    # a library that refused the value prints it escaped (repr): the part before a control character is still there
    forms |= {part for form in list(forms) for part in re.split(r"[\x00-\x1f\x7f]", form)}
    forms = {f for f in forms if len(f) >= MIN_SCRUB_CHARS}
    with _lock:
        if forms <= _secrets:
            return
        _secrets = _secrets | forms
        ordered = sorted(_secrets, key=len, reverse=True)
        _pattern = re.compile("|".join(re.escape(s) for s in ordered))


def register_secret_headers(headers: Iterable[tuple[str, str]], *, by_hand: bool = False) -> None:
    """Register the values of the credential-named headers among ``headers``. ``by_hand``: these are headers a user
    passed (``-H``), which may carry a credential under any name: every one of them is secret, by name and value."""
    global _secret_names
    for name, value in headers:
        if by_hand:
            with _lock:
                _secret_names = _secret_names | {name.lower()}
        if by_hand or is_secret_header(name):
            register_secret(value)


def scrub(text: str) -> str:
    """``text`` with every registered secret value replaced by ``[redacted]``."""
    pattern = _pattern
    if pattern is None or not text:
        return text
    return pattern.sub(REDACTED, text)


def scrub_data(value: Any) -> Any:
    """A JSON-ready value (dicts, lists, strings, numbers) with every string :func:`scrub`-bed: for a record about to
    be written whole."""
    if _pattern is None:
        return value
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_data(v) for v in value]
    return value


def forget_secrets() -> None:
    """Forget every registered secret value and header name (for tests)."""
    global _secrets, _pattern, _secret_names
    with _lock:
        _secrets = frozenset()
        _secret_names = frozenset()
        _pattern = None


def redact_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """Lower-cased header dict with secret values replaced by ``[redacted]`` (by name, and registered values inside
    the others scrubbed); repeated names joined with ", "."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: dict[str, str] = {}
    for name, value in items:
        key = name.lower()
        shown = REDACTED if is_secret_header(key) else scrub(value)
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
        query = urlencode([(k, REDACTED if _secret_param(k) else v) for k, v in pairs])
    return scrub(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))


def _secret_param(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_QUERY_PARAMS or any(part in lowered for part in ("key", "token", "secret", "password"))


def control_character(value: str) -> tuple[int, str] | None:
    """The position and name of the first control character in a header value (tab allowed), or None: HTTP field
    values may not carry them (RFC 9110 §5.5), and a key read from a CRLF file ends in one."""
    for index, char in enumerate(value):
        code = ord(char)
        if (code < 0x20 and char != "\t") or code == 0x7F:
            return index, _CONTROL_NAMES.get(char, f"U+{code:04X}")
    return None


_CONTROL_NAMES = {"\r": "carriage return (U+000D)", "\n": "line feed (U+000A)", "\x00": "NUL (U+0000)"}
