"""What an idempotency store is (:class:`IdempotencyStore`) and what it holds: claims (:class:`KeyState`) and
finished answers (:class:`StoredAnswer`). :mod:`latscope.lab.idempotency` keeps its in-process store and the
gateway stage over it; :mod:`latscope.lab.redisstore` is the one shared by replicas.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Protocol

import orjson


class StoreUnavailableError(Exception):
    """The idempotency store could not be reached, or answered something unreadable; the message says why."""


@dataclass(frozen=True, slots=True)
class StoredAnswer:
    """A finished response as the store keeps it: ``status``, the head's ``headers`` as the service wrote them,
    the whole ``body`` (a streamed body's pieces joined), whether it was ``streamed``, the ``request_id`` it
    answered with and the ``fingerprint`` of the request (:func:`request_fingerprint`)."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    streamed: bool
    request_id: str | None
    fingerprint: str

    def to_bytes(self) -> bytes:
        """JSON with the head as latin-1 text (HTTP field bytes) and the body in base64: what a store writes."""
        return orjson.dumps(
            {
                "v": 1,
                "status": self.status,
                "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in self.headers],
                "body": base64.b64encode(self.body).decode("ascii"),
                "streamed": self.streamed,
                "request_id": self.request_id,
                "fingerprint": self.fingerprint,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> StoredAnswer:
        """The answer :meth:`to_bytes` wrote; raises :class:`StoreUnavailableError` for anything else."""
        try:
            doc = orjson.loads(data)
            return cls(
                status=int(doc["status"]),
                headers=tuple((str(k).encode("latin-1"), str(v).encode("latin-1")) for k, v in doc["headers"]),
                body=base64.b64decode(doc["body"], validate=True),
                streamed=bool(doc["streamed"]),
                request_id=None if doc["request_id"] is None else str(doc["request_id"]),
                fingerprint=str(doc["fingerprint"]),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise StoreUnavailableError(f"the store holds an unreadable answer ({exc.__class__.__name__})") from None


@dataclass(frozen=True, slots=True)
class KeyState:
    """A store's answer to a claim: ``claimed`` when this caller now owns the key and must execute; otherwise what
    the key holds: the ``fingerprint`` of the request that owns it and, once that one finished, its ``answer``
    (both None when the key was released between two looks: claim again)."""

    claimed: bool
    fingerprint: str | None = None
    answer: StoredAnswer | None = None


class IdempotencyStore(Protocol):
    """Where keys are claimed and answers kept. Every method raises :class:`StoreUnavailableError` when the store
    cannot be reached; ``token`` identifies one execution (a claim is only completed or released by its owner)."""

    def describe(self) -> str:
        """What the store is, for the lab's banner (no credentials)."""
        ...

    async def check(self) -> None:
        """Raise :class:`StoreUnavailableError` unless the store answers (the lab calls it on start)."""
        ...

    async def claim(self, key: str, token: str, fingerprint: str, lease_s: float) -> KeyState:
        """Claim ``key`` for the execution ``token`` of a request with ``fingerprint`` for ``lease_s`` seconds,
        atomically; or say what the key holds."""
        ...

    async def complete(self, key: str, token: str, answer: StoredAnswer, ttl_s: float) -> None:
        """Store ``answer`` beside the claim of ``token``, both kept ``ttl_s`` seconds from now."""
        ...

    async def release(self, key: str, token: str) -> None:
        """Drop the claim of ``token`` (nothing was stored): the next request with ``key`` executes."""
        ...

    async def wait(self, key: str, timeout_s: float) -> None:
        """Return when ``key`` may have changed (finished or released), at the latest after ``timeout_s``."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
