"""The deliberately naive gateway body handling of the ``slow-parse`` fault.

What naive production gateways do to a request body, each step defensible on its own, together costing tens of
milliseconds per megabyte of body — far above what the JSON parsing itself needs (orjson: well under 1 ms per MB):

1. decode the body to ``str`` and scan the raw text for forbidden control characters with a regex;
2. parse with the standard library's ``json``;
3. walk the whole document: every string is NFKC-normalised and run through a regex "safety filter"
   (prompt-injection phrases, secrets, card and social-security numbers, script tags) — including strings the model
   never sees, such as ``user``;
4. re-serialise the document with ``json.dumps`` for an audit log.

Step 3 costs the most, because it runs over every string. The regexes are linear-time (anchored on literals or
digits), so the cost grows in proportion to the body, never explosively.
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
from typing import Any

from latscope.lab.errors import invalid_request

#: Control characters other than tab, newline and carriage return: rejected in the raw body (step 1).
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

#: The "safety filter" (step 3). Each pattern is linear-time: a literal, a digit class or a word boundary leads.
SAFETY_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?i)ignore\s+(?:all\s+)?(?:previous|prior)\s+instructions"),  # prompt injection
    re.compile(r"(?i)\bpass(?:word|wd)\s*[:=]"),  # credentials pasted into a prompt
    re.compile(r"\b\d{3}-\d{2}-\d{4}\b"),  # US social-security number
    re.compile(r"\b(?:\d{4}[ -]?){3}\d{4}\b"),  # payment card number
    re.compile(r"\bsk-[A-Za-z0-9]{20,}"),  # API secret key
    re.compile(r"(?i)<\s*script\b"),  # markup injection
)

#: The walk's bound on nesting: deeper documents are refused rather than recursed into.
MAX_DEPTH = 64


def naive_parse(body: bytes) -> tuple[Any, int]:
    """Steps 1–2: decode, scan the raw text, parse with stdlib ``json``. Returns (document, elapsed ns).

    Raises :class:`~latscope.lab.errors.ErrorResponse` (400) for bodies that are not UTF-8 JSON.
    """
    started = time.monotonic_ns()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_request(f"The request body is not valid UTF-8: {exc.reason} at byte {exc.start}.") from None
    if _CONTROL_CHARS.search(text) is not None:
        raise invalid_request("The request body contains control characters.")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise invalid_request(
            f"We could not parse the JSON body of your request: {exc.msg} (line {exc.lineno}, column {exc.colno})."
        ) from None
    except (ValueError, RecursionError) as exc:
        # ValueError: an integer beyond Python's digit limit; RecursionError: nesting deeper than the C stack allows.
        raise invalid_request(f"We could not parse the JSON body of your request: {exc}.") from None
    return document, time.monotonic_ns() - started


def naive_inspect(document: Any) -> int:
    """Steps 3–4: the whole-document walk with the safety filter, then the audit re-serialisation.

    Returns elapsed ns. The filter only flags (a lab must not refuse prompts for containing digits); what matters
    here is what it costs.
    """
    started = time.monotonic_ns()
    _walk(document, 0)
    json.dumps(document, ensure_ascii=False)
    return time.monotonic_ns() - started


def _walk(value: Any, depth: int) -> int:
    """Visit every value; run the filter over every string (keys included). Returns the number of filter hits."""
    if depth > MAX_DEPTH:
        raise invalid_request(f"The request body nests deeper than {MAX_DEPTH} levels.")
    hits = 0
    if isinstance(value, str):
        return _filter(value)
    if isinstance(value, dict):
        for key, item in value.items():
            hits += _filter(key) + _walk(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            hits += _walk(item, depth + 1)
    return hits


def _filter(text: str) -> int:
    normalised = unicodedata.normalize("NFKC", text)
    return sum(1 for pattern in SAFETY_PATTERNS if pattern.search(normalised) is not None)
