"""Cache indicators → CacheSignal (hit / miss / unknown, with the deciding header)."""

from __future__ import annotations

import pytest

from latscope.signals.cache import CacheSignal, cache_state


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"X-Cache": "HIT"}, CacheSignal(True, "HIT", "x-cache")),
        ({"X-Cache": "Hit from cloudfront"}, CacheSignal(True, "Hit", "x-cache")),
        ({"X-Cache": "RefreshHit from cloudfront"}, CacheSignal(True, "RefreshHit", "x-cache")),
        ({"X-Cache": "Miss from cloudfront"}, CacheSignal(False, "Miss", "x-cache")),
        ({"X-Cache": "MISS, HIT"}, CacheSignal(True, "HIT", "x-cache")),  # the last cache is nearest the client
        ({"X-Cache": "TCP_MISS from squid.example"}, CacheSignal(False, "TCP_MISS", "x-cache")),
        ({"X-Cache-Status": "BYPASS"}, CacheSignal(False, "BYPASS", "x-cache-status")),
        ({"CF-Cache-Status": "HIT", "Age": "42"}, CacheSignal(True, "HIT", "cf-cache-status", 42)),
        ({"CF-Cache-Status": "EXPIRED"}, CacheSignal(False, "EXPIRED", "cf-cache-status")),
        ({"CF-Cache-Status": "DYNAMIC"}, CacheSignal(None, "DYNAMIC", "cf-cache-status")),
        ({"Cache-Status": "ExampleCache; hit"}, CacheSignal(True, "hit", "cache-status")),
        (
            {"Cache-Status": "OriginCache; fwd=uri-miss;stored, CDN; fwd=miss"},
            CacheSignal(False, "fwd=miss", "cache-status"),
        ),
        ({"Age": "120"}, CacheSignal(True, None, "age", 120)),
        ({"Age": "0"}, CacheSignal(age_s=0)),
        ({}, CacheSignal()),
    ],
)
def test_cache_indicators(headers: dict[str, str], expected: CacheSignal) -> None:
    warnings: list[str] = []
    assert cache_state(headers, warnings=warnings) == expected
    assert warnings == []


def test_cache_status_outranks_the_older_headers() -> None:
    signal = cache_state({"Cache-Status": "CDN; fwd=stale", "X-Cache": "HIT"})
    assert signal == CacheSignal(False, "fwd=stale", "cache-status")


def test_unknown_status_word_is_ignored_with_a_warning_and_age_decides() -> None:
    warnings: list[str] = []
    assert cache_state({"X-Cache": "WEIRD", "Age": "3"}, warnings=warnings) == CacheSignal(True, None, "age", 3)
    assert len(warnings) == 1


def test_malformed_age_and_cache_status_are_ignored_with_warnings() -> None:
    warnings: list[str] = []
    assert cache_state({"Age": "-1", "Cache-Status": "CDN; hit=("}, warnings=warnings) == CacheSignal()
    assert len(warnings) == 2
