"""Whether a response came out of an HTTP cache, from the headers caches add.

A cached LLM response was not generated for this request, so its timing says nothing about the model server; a
diagnosis must know. Indicators, strongest first:

* ``Cache-Status`` (RFC 9211), a structured-field list with one member per cache on the path, nearest the origin
  first: ``ExampleCDN; hit``, ``Origin; fwd=uri-miss``. The member nearest the client (the last) decides.
* ``CF-Cache-Status`` (Cloudflare): ``HIT``, ``MISS``, ``EXPIRED``, ``STALE``, ``BYPASS``, ``REVALIDATED``,
  ``UPDATING``, ``DYNAMIC``, ``NONE`` / ``UNKNOWN``.
* ``X-Cache`` (Squid, Varnish, CloudFront, Fastly …): ``HIT``, ``MISS``, ``Hit from cloudfront``, ``TCP_HIT from …``;
  a comma-separated list when several caches add to it (the last one is nearest the client).
* ``X-Cache-Status`` (the nginx ``$upstream_cache_status`` convention): ``HIT``, ``MISS``, ``BYPASS``, ``EXPIRED``,
  ``STALE``, ``UPDATING``, ``REVALIDATED``.
* ``Age`` (RFC 9111 §5.1, seconds): a positive age means a cache served a stored response.

"Hit" means the body was served from storage (including stale and revalidated copies); "miss" that the origin
produced it. Values a cache uses for neither (``DYNAMIC``, ``NONE``) leave ``hit`` unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from latscope.signals.headers import HeaderInput, first_header, header_pairs, int_field, list_field, warn
from latscope.signals.structured import Item

_HIT_WORDS = frozenset({"hit", "stale", "revalidated", "updating", "refresh_hit", "ims_hit", "mem_hit"})
_MISS_WORDS = frozenset({"miss", "expired", "bypass", "refresh_miss", "pass", "error"})
# Cloudflare's words for "not cacheable / not looked up": neither a hit nor a miss.
_NEITHER_WORDS = frozenset({"DYNAMIC", "NONE", "UNKNOWN"})


@dataclass(frozen=True, slots=True)
class CacheSignal:
    """What the headers say about caching.

    ``hit`` is True (served from a cache), False (the origin produced it) or None (no indicator); ``status`` the
    deciding indicator's own word (``HIT``, ``MISS``, ``hit`` …); ``source`` the header it came from; ``age_s`` the
    ``Age`` header in seconds.
    """

    hit: bool | None = None
    status: str | None = None
    source: str | None = None
    age_s: int | None = None


def cache_state(headers: HeaderInput, *, warnings: list[str] | None = None) -> CacheSignal:
    """Read every cache indicator in the headers (see the module docstring) into one :class:`CacheSignal`."""
    headers = header_pairs(headers)  # read once per indicator: an iterator must not be consumed
    age_s = _age(headers, warnings)
    for reader in (_cache_status, _cf_cache_status, _x_cache, _x_cache_status):
        found = reader(headers, warnings)
        if found is not None:
            hit, status, source = found
            return CacheSignal(hit=hit, status=status, source=source, age_s=age_s)
    if age_s is not None and age_s > 0:
        return CacheSignal(hit=True, status=None, source="age", age_s=age_s)
    return CacheSignal(age_s=age_s)


def _age(headers: HeaderInput, warnings: list[str] | None) -> int | None:
    return int_field(headers, "age", "cache", warnings)  # RFC 9111 §5.1: Age is delta-seconds


def _word_hit(word: str) -> bool | None:
    lowered = word.strip().lower()
    tail = lowered.split("_")[-1] if lowered.startswith("tcp_") else lowered
    if lowered in _HIT_WORDS or tail in _HIT_WORDS or tail.endswith("hit"):
        return True
    if lowered in _MISS_WORDS or tail in _MISS_WORDS or tail.endswith("miss"):
        return False
    return None


def _cache_status(headers: HeaderInput, warnings: list[str] | None) -> tuple[bool | None, str, str] | None:
    members = list_field(headers, "cache-status", "cache", warnings)
    if members is None:
        return None
    items = [member for member in members if isinstance(member, Item)]
    if not items:
        return None
    nearest = items[-1]  # RFC 9211 §2: the cache nearest the client adds its member last
    if nearest.params.get("hit") is True:
        return True, "hit", "cache-status"
    fwd = nearest.params.get("fwd")
    if isinstance(fwd, str):
        return False, f"fwd={fwd}", "cache-status"
    return None, str(nearest.value), "cache-status"


def _cf_cache_status(headers: HeaderInput, warnings: list[str] | None) -> tuple[bool | None, str, str] | None:
    return _read_word(headers, warnings, "cf-cache-status")


def _x_cache(headers: HeaderInput, warnings: list[str] | None) -> tuple[bool | None, str, str] | None:
    return _read_word(headers, warnings, "x-cache")


def _x_cache_status(headers: HeaderInput, warnings: list[str] | None) -> tuple[bool | None, str, str] | None:
    return _read_word(headers, warnings, "x-cache-status")


def _read_word(headers: HeaderInput, warnings: list[str] | None, header: str) -> tuple[bool | None, str, str] | None:
    raw = first_header(headers, header)
    if raw is None:
        return None
    # Several caches may each append their verdict; the last is the one nearest the client.
    nearest = raw.split(",")[-1].strip()
    word = nearest.split()[0] if nearest else ""
    hit = _word_hit(word) if word else None
    if hit is None and word.upper() not in _NEITHER_WORDS:
        warn(warnings, f"cache: {header}: {raw!r} is not a known cache status; ignored")
        return None
    return hit, word, header
