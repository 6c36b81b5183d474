"""The Redis idempotency store: several lab replicas dedupe across processes through one Redis.

Two keys per idempotency key, beside each other (one hash tag, so a Redis Cluster keeps them on one shard):

- ``latscope:idem:{KEY}:claim`` — ``SET NX PX`` with the lease: the execution's token and the request's fingerprint.
  Exactly one replica's ``SET NX`` succeeds; the others read what the key holds.
- ``latscope:idem:{KEY}:answer`` — the finished answer (:meth:`StoredAnswer.to_bytes`), written with the TTL, and the
  claim's expiry moved to the same TTL, in one script that first checks the claim is still the writer's.

A duplicate polls (every :data:`POLL_S`) until the answer appears, the claim is released, or its wait runs out.
Releasing is a compare-and-delete script: only the claim's owner drops it.

redis-py's asyncio client, without its automatic retries: a command that failed on a broken connection is not sent
again (a ``SET NX`` whose reply was lost would read as someone else's claim); the caller turns the failure into a
503 instead. Timeouts are short (:data:`TIMEOUT_S`), so a Redis that went away answers a client in about a second
at worst, and at once when the connection is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from latscope.lab.idemstore import KeyState, StoredAnswer, StoreUnavailableError

#: Where the lab's keys live in a shared Redis.
KEY_PREFIX = "latscope:idem:"
#: Connect and command timeout, s: far above a loopback or LAN round trip (well under 1 ms to a few ms), short
#: enough that a Redis that stopped answering turns into a 503 rather than a client's timeout.
TIMEOUT_S = 1.0
#: How often a duplicate looks whether the original has finished, s: a replay comes at most this late, and a
#: hundred waiting duplicates cost Redis a few thousand commands a second.
POLL_S = 0.02

#: Store the answer and stretch the claim to its TTL, if the claim is still the caller's.
#: KEYS: claim, answer; ARGV: claim value, answer, ttl ms.
COMPLETE_SCRIPT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
#: Delete the claim if it is still the caller's. KEYS: claim; ARGV: the caller's token and a space (how the claim's
#: value starts).
RELEASE_SCRIPT = """
local value = redis.call('GET', KEYS[1])
if value and string.sub(value, 1, #ARGV[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def redacted(url: str) -> str:
    """``url`` without a password (``redis://user:secret@host`` → ``redis://user:***@host``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class RedisStore:
    """An :class:`~latscope.lab.idemstore.IdempotencyStore` in Redis at ``url`` (``redis://host:port/db``)."""

    def __init__(self, url: str, *, timeout_s: float = TIMEOUT_S, poll_s: float = POLL_S) -> None:
        self.url = url
        self.poll_s = poll_s
        self._client: Redis = Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0)
        )
        self._complete = self._client.register_script(COMPLETE_SCRIPT)
        self._release = self._client.register_script(RELEASE_SCRIPT)

    def describe(self) -> str:
        return redacted(self.url)

    @staticmethod
    def _keys(key: str) -> tuple[str, str]:
        base = KEY_PREFIX + "{" + key + "}"
        return base + ":claim", base + ":answer"

    async def _do(self, command: Any) -> Any:
        """Await one redis-py command, its failures turned into :class:`StoreUnavailableError`."""
        try:
            return await command
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreUnavailableError(f"redis at {self.describe()}: {exc.__class__.__name__}: {exc}") from None

    async def check(self) -> None:
        await self._do(self._client.ping())

    async def claim(self, key: str, token: str, fingerprint: str, lease_s: float) -> KeyState:
        claim_key, answer_key = self._keys(key)
        if await self._do(self._client.set(claim_key, f"{token} {fingerprint}", nx=True, px=_ms(lease_s))):
            return KeyState(True, fingerprint)
        claim, answer = await self._do(self._client.mget(claim_key, answer_key))
        if answer is not None:
            stored = StoredAnswer.from_bytes(answer)
            return KeyState(False, stored.fingerprint, stored)
        if claim is None:
            return KeyState(False)  # released (or expired) since the SET NX: claim again
        return KeyState(False, bytes(claim).decode("ascii", "replace").partition(" ")[2])

    async def complete(self, key: str, token: str, answer: StoredAnswer, ttl_s: float) -> None:
        claim_key, answer_key = self._keys(key)
        value = f"{token} {answer.fingerprint}"
        await self._do(self._complete(keys=[claim_key, answer_key], args=[value, answer.to_bytes(), _ms(ttl_s)]))

    async def release(self, key: str, token: str) -> None:
        claim_key, _ = self._keys(key)
        await self._do(self._release(keys=[claim_key], args=[token + " "]))

    async def wait(self, key: str, timeout_s: float) -> None:
        await asyncio.sleep(min(timeout_s, self.poll_s))

    async def close(self) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self._client.aclose()
