"""Idempotency keys at the gateway: a generation request that carries ``Idempotency-Key`` executes once, and a
repeat of it gets the first one's answer back instead of a second generation.

What the lab does (Stripe's semantics, which draft-ietf-httpapi-idempotency-key-header-06 follows):

- The key is the header's value: 1–255 visible ASCII characters, sent bare (what OpenAI's and Stripe's SDKs send) or
  as a structured-field string in double quotes (the draft's form, §2); anything else is refused with 400. Keys are
  scoped to the API credential (a digest of it, never the credential), so two clients' keys never meet.
- The first request with a key claims it in the store and executes. When its answer is complete and 2xx, the answer
  is stored whole (status, head, body) for the store's TTL; every repeat within the TTL gets it back byte for byte —
  the same response id, the same content — with ``Idempotent-Replayed: true`` added to the head.
- The execution does not belong to the client's connection: a client that hangs up mid-stream (the reason it
  retries) does not stop the generation; the lab finishes it, stores the answer, and the retry gets it.
- An answer that is not a complete 2xx (validation error, 429 from the rate limiter, an engine failure) is not
  stored: the claim is released, nothing was generated, and a retry executes.
- A duplicate that arrives while the first is still running waits for it (at most ``wait_s``, 30 s by default) and
  then gets the stored answer; when the first is still running after that, 409 ``idempotency_key_in_use`` with
  ``Retry-After: 1`` (the draft's §2.7 answer for a concurrent request). Waiting first is what makes a client's
  retry after a timeout get its answer rather than an error.
- The same key with another request (method, path or body differ) is refused: 422 ``idempotency_key_reused``
  (the draft's §2.7).
- When the store cannot be reached, the request is refused with 503 ``idempotency_store_unavailable`` before
  anything executes. When the answer cannot be stored after the execution, the claim stays in the store until it
  expires, so a retry waits and gets 409 (or 503 while the store is down): never a second execution.

The ``no-idempotency`` fault ignores the header: every duplicate executes again, as on a server without support.

The store is an interface (:class:`~latscope.lab.idemstore.IdempotencyStore`): :class:`MemoryStore` in the lab's
process (the default), or :class:`~latscope.lab.redisstore.RedisStore` (``SET NX`` with expiry for the claim, the
answer stored beside it) so several lab replicas dedupe across processes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from latscope.lab.errors import ErrorResponse, invalid_request
from latscope.lab.front import ForwardingChannel
from latscope.lab.http.exchange import Headers, Request, ResponseChannel
from latscope.lab.idemstore import IdempotencyStore, KeyState, StoredAnswer, StoreUnavailableError

logger = logging.getLogger(__name__)

#: The request header that carries the key, and the one a replayed answer carries (Stripe's name).
KEY_HEADER = b"idempotency-key"
REPLAYED_HEADER = (b"idempotent-replayed", b"true")
#: The longest key accepted: Stripe's limit.
MAX_KEY_CHARS = 255
#: How long a stored answer is replayed, s: 24 hours, as Stripe keeps them.
DEFAULT_TTL_S = 86_400.0
#: How long a duplicate waits for the original to finish before it gets 409, s: longer than any lab generation of
#: the default cost model (a 4096-token answer streams in about 50 s only at its very largest).
DEFAULT_WAIT_S = 30.0
#: Keys the in-memory store keeps at most, and the bytes of their answers (oldest finished dropped first): bounded
#: memory for a long-lived lab (a long stream's answer is a few hundred KB).
MEMORY_ENTRIES = 10_000
MEMORY_BYTES = 256 * 1024 * 1024

#: What a request's record says about its key (``RequestRecord.idempotency``).
EXECUTED = "executed"  #: it claimed the key and ran
REPLAYED = "replayed"  #: it got a stored answer
IN_USE = "in-use"  #: 409: the original was still running after the wait
REUSED = "reused"  #: 422: the key belongs to another request
UNAVAILABLE = "unavailable"  #: 503: the store could not be reached
IGNORED = "ignored"  #: the ``no-idempotency`` fault: the key was not looked at


@dataclass(slots=True)
class _Entry:
    token: str
    fingerprint: str
    expires_s: float
    answer: StoredAnswer | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class MemoryStore:
    """The in-process store: a dict of keys, each claimed by one execution and woken when it finishes. One lab
    process only: replicas need a shared store. At most ``entries`` keys and ``max_bytes`` of answers (the oldest
    finished are dropped first); ``clock`` is monotonic seconds (injected by tests)."""

    def __init__(
        self,
        *,
        entries: int = MEMORY_ENTRIES,
        max_bytes: int = MEMORY_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.entries = entries
        self.max_bytes = max_bytes
        self.clock = clock
        self.answer_bytes = 0  #: bytes of the answers held
        self._keys: collections.OrderedDict[str, _Entry] = collections.OrderedDict()

    def describe(self) -> str:
        return "memory"

    async def check(self) -> None:
        return None

    def _live(self, key: str) -> _Entry | None:
        entry = self._keys.get(key)
        if entry is not None and entry.expires_s <= self.clock():
            self._drop(key)
            return None
        return entry

    def _drop(self, key: str) -> None:
        entry = self._keys.pop(key, None)
        if entry is not None:
            if entry.answer is not None:
                self.answer_bytes -= len(entry.answer.body)
            entry.changed.set()

    async def claim(self, key: str, token: str, fingerprint: str, lease_s: float) -> KeyState:
        entry = self._live(key)
        if entry is not None:
            return KeyState(False, entry.fingerprint, entry.answer)
        self._make_room(keys=1)
        self._keys[key] = _Entry(token, fingerprint, self.clock() + lease_s)
        return KeyState(True, fingerprint)

    def _make_room(self, *, keys: int = 0, answer_bytes: int = 0) -> None:
        """Drop expired keys, then the oldest finished ones, until ``keys`` more keys and ``answer_bytes`` more bytes
        of answers fit."""

        def full() -> bool:
            too_many = len(self._keys) + keys > self.entries
            return too_many or (self.answer_bytes + answer_bytes > self.max_bytes and self.answer_bytes > 0)

        if not full():
            return
        now = self.clock()
        for key in [k for k, e in self._keys.items() if e.expires_s <= now]:
            self._drop(key)
        while full():
            oldest = next((k for k, e in self._keys.items() if e.answer is not None), None)
            if oldest is None:
                return  # every key is running: they end by themselves, and a lab's concurrency is bounded
            self._drop(oldest)

    async def complete(self, key: str, token: str, answer: StoredAnswer, ttl_s: float) -> None:
        entry = self._keys.get(key)
        if entry is None or entry.token != token:
            return  # the claim expired meanwhile: whoever holds the key now keeps it
        self._make_room(answer_bytes=len(answer.body))
        entry.answer = answer
        self.answer_bytes += len(answer.body)
        entry.expires_s = self.clock() + ttl_s
        self._keys.move_to_end(key)
        entry.changed.set()

    async def release(self, key: str, token: str) -> None:
        entry = self._keys.get(key)
        if entry is not None and entry.token == token:
            self._drop(key)

    async def wait(self, key: str, timeout_s: float) -> None:
        entry = self._keys.get(key)
        if entry is None or entry.answer is not None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(entry.changed.wait(), timeout_s)

    async def close(self) -> None:
        return None

    def __len__(self) -> int:
        return len(self._keys)


#: The URL schemes of a Redis store (redis-py's): TCP, TLS, a Unix socket.
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def check_store_spec(spec: str) -> None:
    """Raise :class:`ValueError` unless ``spec`` names a store: ``memory`` or a Redis URL."""
    if spec != "memory" and not spec.startswith(REDIS_SCHEMES):
        raise ValueError(f"unknown idempotency store {spec!r}: use 'memory' or redis://host:port/db")


def open_store(spec: str) -> IdempotencyStore:
    """The store ``spec`` names: ``memory``, or a Redis URL (``redis://host:port/db``, ``rediss://`` for TLS,
    ``unix:///path.sock``); raises :class:`ValueError` for anything else, and when redis-py is not installed."""
    check_store_spec(spec)
    if spec == "memory":
        return MemoryStore()
    if spec.startswith(REDIS_SCHEMES):
        try:
            from latscope.lab.redisstore import RedisStore
        except ImportError:
            raise ValueError("a Redis idempotency store needs redis-py: pip install 'latscope[redis]'") from None
        return RedisStore(spec)
    raise ValueError(f"unknown idempotency store {spec!r}: use 'memory' or redis://host:port/db")


# -- the gateway's side ---------------------------------------------------------------------------------------------
def idempotency_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key`` (None without one); 400 when it is not 1–255 visible ASCII characters."""
    raw = request.header(KEY_HEADER)
    if raw is None:
        return None
    value = raw.strip(b" \t")
    if len(value) >= 2 and value[:1] == b'"' and value[-1:] == b'"':
        value = value[1:-1]  # a structured-field string (the draft's form)
    if not value or len(value) > MAX_KEY_CHARS or any(byte < 0x21 or byte > 0x7E for byte in value):
        raise invalid_request(
            f"Invalid 'Idempotency-Key' header: expected 1 to {MAX_KEY_CHARS} visible ASCII characters.",
            param="Idempotency-Key",
            code="invalid_idempotency_key",
        )
    return value.decode("ascii")


def request_fingerprint(request: Request) -> str:
    """What makes two requests the same request: method, path and body (a SHA-256 digest, 128 bits of it)."""
    digest = hashlib.sha256(request.method.encode() + b"\0" + request.path.encode() + b"\0" + request.body)
    return digest.hexdigest()[:32]


class RecordingChannel(ForwardingChannel):
    """The channel an idempotent execution writes to: everything goes on to the client's channel and a copy is
    kept for the store. It tells the handler that the client is still there even once it has gone (never
    :attr:`closed`, never :attr:`paused` then), so a client that hangs up does not stop the execution."""

    def __init__(self, inner: ResponseChannel) -> None:
        super().__init__(inner)
        self.status: int | None = None
        self.headers: tuple[tuple[bytes, bytes], ...] = ()
        self.body: list[bytes] = []
        self.streamed = False
        self.complete = False

    @property
    def closed(self) -> bool:
        return False

    @property
    def paused(self) -> bool:
        return not self.inner.closed and self.inner.paused

    async def drain(self) -> None:
        if not self.inner.closed:
            await self.inner.drain()

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        self.status, self.headers, self.body, self.complete = status, tuple(headers), [body], True
        super().respond(status, headers, body)

    def start(self, status: int, headers: Headers) -> None:
        self.status, self.headers, self.streamed = status, tuple(headers), True
        super().start(status, headers)

    def write(self, data: bytes) -> None:
        if data:
            self.body.append(data)
        super().write(data)

    def finish(self) -> None:
        self.complete = self.status is not None
        super().finish()

    def answer(self, request_id: str | None, fingerprint: str) -> StoredAnswer | None:
        """The answer to store: a complete 2xx response, else None."""
        if not self.complete or self.status is None or not 200 <= self.status < 300:
            return None
        return StoredAnswer(self.status, self.headers, b"".join(self.body), self.streamed, request_id, fingerprint)


def replay(answer: StoredAnswer, channel: ResponseChannel) -> None:
    """Send a stored answer again, its head marked ``Idempotent-Replayed: true``; a stream's body in one write."""
    headers = [*answer.headers, REPLAYED_HEADER]
    if not answer.streamed:
        channel.respond(answer.status, headers, answer.body)
        return
    channel.start(answer.status, headers)
    channel.write(answer.body)
    channel.finish()


@dataclass(frozen=True, slots=True)
class Claimed:
    """This request owns ``key`` (the store's scoped key) as execution ``token``: it runs, then
    :meth:`Idempotency.finish` or :meth:`Idempotency.abandon`."""

    key: str
    token: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Replay:
    """A stored answer to send instead of executing."""

    answer: StoredAnswer


def key_in_use() -> ErrorResponse:
    """409: the original request with this key is still running after the wait."""
    return ErrorResponse(
        409,
        "A request with this Idempotency-Key is still being processed; retry after it has finished.",
        type="idempotency_error",
        param="Idempotency-Key",
        code="idempotency_key_in_use",
        headers=((b"retry-after", b"1"),),
    )


def key_reused() -> ErrorResponse:
    """422: the key was first used with another request."""
    return ErrorResponse(
        422,
        "This Idempotency-Key was already used with a different request (method, path or body); use a new key.",
        type="idempotency_error",
        param="Idempotency-Key",
        code="idempotency_key_reused",
    )


def store_unavailable(reason: str) -> ErrorResponse:
    """503: the store could not be reached, so the request was not executed (executing it could run it twice)."""
    return ErrorResponse(
        503,
        f"The idempotency store is unavailable ({reason}); the request was not executed. Retry later.",
        type="server_error",
        code="idempotency_store_unavailable",
        headers=((b"retry-after", b"1"),),
    )


class Idempotency:
    """The gateway's idempotency stage over one store: :meth:`begin` says whether a request executes or replays,
    :meth:`finish` stores what an execution answered."""

    def __init__(self, store: IdempotencyStore, *, ttl_s: float = DEFAULT_TTL_S, wait_s: float = DEFAULT_WAIT_S):
        self.store = store
        self.ttl_s = ttl_s
        self.wait_s = wait_s

    async def begin(self, scope: str, key: str, fingerprint: str) -> Claimed | Replay:
        """Claim ``key`` (scoped to the credential digest ``scope``) or find its answer, waiting up to ``wait_s``
        while the original runs. Raises :class:`ErrorResponse` 409 (still running), 422 (another request's key) or
        503 (the store is unreachable)."""
        scoped = f"{scope}:{key}"
        token = secrets.token_hex(8)
        deadline = time.monotonic() + self.wait_s
        try:
            while True:
                state = await self.store.claim(scoped, token, fingerprint, self.ttl_s)
                if state.claimed:
                    return Claimed(scoped, token, fingerprint)
                if state.fingerprint is not None and state.fingerprint != fingerprint:
                    raise key_reused()
                if state.answer is not None:
                    return Replay(state.answer)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise key_in_use()
                if state.fingerprint is not None:  # running: wait for it (a released key is claimed again at once)
                    await self.store.wait(scoped, left)
        except StoreUnavailableError as exc:
            raise store_unavailable(str(exc)) from None

    async def finish(self, claimed: Claimed, recording: RecordingChannel, request_id: str | None) -> bool:
        """Store the execution's answer (True), or release the claim when there is none to store (False). A store
        that fails now keeps the claim until it expires: logged, never raised (the client has its answer)."""
        answer = recording.answer(request_id, claimed.fingerprint)
        try:
            if answer is None:
                await self.store.release(claimed.key, claimed.token)
                return False
            await self.store.complete(claimed.key, claimed.token, answer, self.ttl_s)
        except StoreUnavailableError as exc:
            logger.warning("the idempotency store failed after an execution; the key stays claimed: %s", exc)
            return False
        return True

    async def abandon(self, claimed: Claimed) -> None:
        """Release the claim of an execution that produced nothing to store."""
        try:
            await self.store.release(claimed.key, claimed.token)
        except StoreUnavailableError as exc:
            logger.warning("the idempotency store failed to release a key; it stays claimed: %s", exc)
