"""The lab's routes: what each request gets, from the gateway through the scheduler to the stream writer.

==========================  ======  ==========================================================================
``/v1/chat/completions``    POST    chat generation, streamed (SSE) or not
``/v1/completions``         POST    legacy completions, streamed or not
``/v1/responses``           POST    OpenAI Responses, streamed (typed SSE events) or not
``/v1/messages``            POST    Anthropic Messages, streamed (typed SSE events) or not
``/generate_stream``        POST    TGI native, streamed; ``/generate`` the same answer whole; ``/`` either, as the
                                    body's ``stream`` says (TGI's client posts there); ``/info`` the model
``/api/chat``               POST    Ollama native chat, streamed (NDJSON, the default) or not
``/api/generate``           POST    Ollama native generate; ``/api/tags`` lists the model
``/v1/models``              GET     the one served model (``/v1/models/{id}`` too)
``/metrics``                GET     Prometheus text from :class:`~latscope.lab.metrics.LabMetrics`
``/health``                 GET     ``{"status": "ok", ...}``
==========================  ======  ==========================================================================

Every API goes through the same gateway, scheduler, engine and stream writer, so every fault shows through each of
them; each answers its errors in its own shape (:mod:`latscope.lab.apis`). The API routes (all but ``/metrics`` and
``/health``) require the API key when the lab has one: ``Authorization: Bearer KEY``, or ``x-api-key: KEY`` as
Anthropic's clients send it. Every request leaves a
:class:`~latscope.lab.records.RequestRecord` in the lab's record log, whatever its outcome.

A generation request with an ``Idempotency-Key`` goes through the gateway's idempotency stage
(:mod:`latscope.lab.idempotency`) after it is parsed and before the rate limiter: it claims its key and executes in a
task of its own that its client hanging up does not cancel (the answer is stored for the retry), or it gets the
stored answer of the request that did (``Idempotent-Replayed: true``), or 409 / 422 / 503.

A streamed response's head is written when the first token is ready — so time to first byte includes queueing and
prefill, as on real servers — and carries ``Server-Timing`` with the gateway's and the engine's phases.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from latscope.lab.apis import ErrorStyle, error_body, error_status, stream_error_event
from latscope.lab.breaker import CircuitBreaker
from latscope.lab.errors import (
    ErrorResponse,
    circuit_open,
    invalid_request,
    method_not_allowed,
    model_not_found,
    not_found,
)
from latscope.lab.formats import (
    AnthropicFormat,
    AnthropicThinkingFormat,
    AnthropicToolFormat,
    OllamaFormat,
    ResponsesFormat,
    ResponsesToolFormat,
    StreamFormat,
    TgiFormat,
    ollama_created_at,
    ollama_durations,
    responses_usage,
    token_id,
)
from latscope.lab.gateway import CompletionRequest, Endpoint, Gateway
from latscope.lab.http.exchange import Headers, Request, ResponseChannel
from latscope.lab.idempotency import (
    EXECUTED,
    IGNORED,
    IN_USE,
    REPLAYED,
    REUSED,
    UNAVAILABLE,
    Claimed,
    Idempotency,
    RecordingChannel,
    Replay,
    idempotency_key,
    replay,
    request_fingerprint,
)
from latscope.lab.metrics import LabMetrics
from latscope.lab.ratelimit import key_digest
from latscope.lab.records import RequestRecord
from latscope.lab.scheduler import (
    GenerationError,
    GenerationRequest,
    RequestStats,
    RequestStream,
    RequestTooLarge,
    Scheduler,
    TokenOut,
)
from latscope.lab.settings import LabSettings
from latscope.lab.truth import latscope_fields, llama_timings, ms, server_timing, usage
from latscope.lab.writer import DONE_EVENT, SYSTEM_FINGERPRINT, ChunkFormat, StreamWriter, ToolCallChunkFormat

JSON = (b"content-type", b"application/json")
SERVER = (b"server", b"latscope-lab")
#: Status recorded for a request whose client went away before the response head (nginx's convention).
CLIENT_CLOSED = 499

Route = Callable[[Request, ResponseChannel, "_Trace"], Awaitable[None]]

#: The error shape of each API's paths (OpenAI's elsewhere).
_ERROR_STYLES = {
    "/v1/messages": ErrorStyle.ANTHROPIC,
    "/generate": ErrorStyle.TGI,
    "/generate_stream": ErrorStyle.TGI,
    "/": ErrorStyle.TGI,
    "/info": ErrorStyle.TGI,
}
#: Paths open without the API key.
_OPEN_PATHS = frozenset({"/metrics", "/health"})
#: The request id prefix of each API's answers.
_ID_PREFIXES = {
    Endpoint.CHAT: "chatcmpl-",
    Endpoint.COMPLETIONS: "cmpl-",
    Endpoint.RESPONSES: "resp_",
    Endpoint.MESSAGES: "msg_",
}


def error_style(path: str) -> ErrorStyle:
    """The error shape of the API ``path`` belongs to."""
    if path.startswith("/api/"):
        return ErrorStyle.OLLAMA
    return _ERROR_STYLES.get(path, ErrorStyle.OPENAI)


class _Trace:
    """What one request's handling learned, turned into a :class:`RequestRecord` at the end."""

    __slots__ = (
        "circuit",
        "endpoint",
        "engine_failed",
        "error",
        "gateway_wait_ms",
        "idempotency",
        "idempotency_key",
        "idempotency_ms",
        "limit_headers",
        "parsed",
        "request",
        "request_id",
        "retry_after_ms",
        "stats",
        "status",
        "stream",
        "writer",
    )

    def __init__(self, request: Request) -> None:
        self.request = request
        self.status = 200
        self.error: str | None = None
        self.request_id: str | None = None
        self.endpoint: Endpoint | None = None
        self.stream = False
        self.parsed: CompletionRequest | None = None
        self.stats: RequestStats | None = None
        self.writer: StreamWriter | None = None
        self.gateway_wait_ms: float | None = None  #: held by the rate limiter in queue mode
        self.retry_after_ms: float | None = None  #: the wait a 429 of the rate limiter asked for
        self.limit_headers: tuple[tuple[bytes, bytes], ...] = ()  #: the limiter's headers for a success
        self.idempotency_key: str | None = None  #: the request's ``Idempotency-Key``
        self.idempotency: str | None = None  #: what the gateway did with it (``RequestRecord.idempotency``)
        self.idempotency_ms: float | None = None  #: the store's claim or lookup and a duplicate's wait, ms
        self.circuit: str | None = None  #: what the circuit breaker did with it (``RequestRecord.circuit``)
        self.engine_failed = False  #: the engine failed it (before its head: a 503; after: an error event)

    def record(self, channel: ResponseChannel, faults: frozenset[str], completion_tokens: int) -> RequestRecord:
        request = self.request
        conn = request.connection
        stats = self.stats
        parsed = self.parsed
        cancelled = not channel.finished and channel.closed
        status = CLIENT_CLOSED if cancelled and channel.headers_sent_ns is None else self.status
        ttft = None
        if stats is not None and stats.first_token_ns is not None:
            ttft = ms(stats.first_token_ns - request.received_ns)
        return RequestRecord(
            method=request.method,
            path=request.path,
            status=status,
            request_id=self.request_id,
            endpoint=str(self.endpoint) if self.endpoint is not None else None,
            stream=self.stream,
            connection_id=conn.connection_id,
            index_on_connection=request.index_on_connection,
            http_version=conn.http_version,
            tls_version=conn.tls_version,
            tls_resumed=conn.session_reused,
            alpn=conn.alpn,
            nodelay=conn.nodelay,
            faults=faults,
            body_bytes=len(request.body),
            started_ns=request.started_ns,
            received_ns=request.received_ns,
            headers_sent_ns=channel.headers_sent_ns,
            finished_ns=time.monotonic_ns(),
            parse_ms=ms(parsed.parse_ns) if parsed is not None else None,
            validate_ms=ms(parsed.validate_ns) if parsed is not None else None,
            queue_ms=stats.queue_ms if stats is not None else None,
            window_wait_ms=ms(stats.window_wait_ns) if stats is not None else None,
            prefill_ms=stats.prefill_ms if stats is not None else None,
            decode_ms=stats.decode_ms if stats is not None else None,
            ttft_ms=ttft,
            prompt_tokens=parsed.prompt_tokens if parsed is not None else None,
            completion_tokens=completion_tokens,
            preemptions=stats.preemptions if stats is not None else 0,
            events_written=self.writer.events if self.writer is not None else 0,
            write_calls=channel.write_calls,
            cancelled=cancelled,
            error=self.error if self.error is not None else ("client went away" if cancelled else None),
            traceparent=_traceparent(request),
            gateway_wait_ms=self.gateway_wait_ms,
            retry_after_ms=self.retry_after_ms,
            idempotency_key=self.idempotency_key,
            idempotency=self.idempotency,
            idempotency_ms=self.idempotency_ms,
            circuit=self.circuit,
            image_bytes=parsed.image_bytes if parsed is not None else 0,
            preprocess_ms=(
                ms(parsed.image_decode_ns + parsed.preprocess_ns) if parsed is not None and parsed.images else None
            ),
        )


def _answer_headers(
    request_id: str, parsed: CompletionRequest, stats: RequestStats, *, decode: bool = False
) -> list[tuple[bytes, bytes]]:
    """What every generated answer's head carries: its request id and its ``Server-Timing`` (``decode``: with the
    decode phase, known once the answer is complete)."""
    return [(b"x-request-id", request_id.encode()), (b"server-timing", server_timing(parsed, stats, decode=decode))]


async def _collect(stream: RequestStream) -> tuple[list[str], TokenOut | None]:
    """The texts of every token of ``stream`` (it ends after max_tokens tokens) and its last token (None: none)."""
    texts: list[str] = []
    last: TokenOut | None = None
    async for token in stream:
        texts.append(token.text)
        last = token
    return texts, last


def _respond_complete(channel: ResponseChannel, answer: Headers, extra_headers: Headers, document: Any) -> None:
    """Answer 200 with ``document`` as JSON, the ``answer`` headers and the ``extra_headers`` (rate limits)."""
    channel.respond(200, [JSON, SERVER, *answer, *extra_headers], orjson.dumps(document))


def _retry_after_ms(refused: ErrorResponse) -> float | None:
    """The wait a 429 asks for, ms, from its ``retry-after-ms`` header (None without one)."""
    for name, value in refused.headers:
        if name == b"retry-after-ms":
            return float(value)
    return None


def _traceparent(request: Request) -> str | None:
    value = request.header(b"traceparent")
    return None if value is None else value.decode("latin-1")


class LabService:
    """The request handler the HTTP layer calls for every complete request."""

    def __init__(
        self,
        settings: LabSettings,
        *,
        gateway: Gateway,
        scheduler: Scheduler,
        metrics: LabMetrics,
        records: collections.deque[RequestRecord],
        idempotency: Idempotency | None = None,
    ) -> None:
        self.gateway = gateway
        #: the gateway's idempotency stage; None under ``no-idempotency`` (keys are recorded, not honoured)
        self.idempotency = idempotency
        #: executions of claimed keys, which outlive their client's connection (:meth:`_run_claimed`)
        self._claimed_runs: set[asyncio.Task[None]] = set()
        self.scheduler = scheduler
        self.metrics = metrics
        self.records = records
        breaker = settings.breaker
        #: the gateway's circuit breaker in front of the engine (:mod:`latscope.lab.breaker`); None when off
        self.breaker = CircuitBreaker(breaker) if breaker is not None else None
        #: the share of requests the engine fails before their first token (``settings.upstream_error_rate``);
        #: mutable, so a test can make the upstream healthy again
        self.upstream_error_rate = settings.upstream_error_rate
        self._upstream_draws = random.Random(settings.seed)
        self.faults = settings.active_faults
        self.model = settings.model
        self.truth = settings.truth
        self.buffer_bytes = settings.writer().buffer_bytes
        self.created = int(time.time())
        self._stream_headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), SERVER]
        if self.buffer_bytes is None:
            # Tells nginx and friends not to buffer this response; a buffering proxy is exactly what omits it.
            self._stream_headers.append((b"x-accel-buffering", b"no"))
        self._routes: dict[str, dict[str, Route]] = {
            "/v1/chat/completions": {"POST": self._chat},
            "/v1/completions": {"POST": self._completions},
            "/v1/responses": {"POST": self._api(Endpoint.RESPONSES)},
            "/v1/messages": {"POST": self._api(Endpoint.MESSAGES)},
            "/generate_stream": {"POST": self._api(Endpoint.TGI_STREAM)},
            "/generate": {"POST": self._api(Endpoint.TGI_GENERATE)},
            "/": {"POST": self._api(Endpoint.TGI_COMPAT)},
            "/api/chat": {"POST": self._api(Endpoint.OLLAMA_CHAT)},
            "/api/generate": {"POST": self._api(Endpoint.OLLAMA_GENERATE)},
            "/info": {"GET": self._info},
            "/api/tags": {"GET": self._tags},
            "/v1/models": {"GET": self._models},
            "/metrics": {"GET": self._metrics},
            "/health": {"GET": self._health},
        }

    async def __call__(self, request: Request, channel: ResponseChannel) -> None:
        trace = _Trace(request)
        completion_tokens = 0
        try:
            route = self._route(request)
            if request.path not in _OPEN_PATHS:
                self.gateway.authorize(request.header(b"authorization"), request.header(b"x-api-key"))
            await route(request, channel, trace)
        except ErrorResponse as error:
            style = error_style(request.path)
            trace.status = error_status(error, style)
            trace.error = error.message
            if channel.headers_sent_ns is not None:
                return  # too late for an error response; the stream already said what it could
            headers = [JSON, SERVER, *error.headers]
            if trace.request_id is not None:
                headers.append((b"x-request-id", trace.request_id.encode()))
            if error.status == 405:
                methods = list(self._routes.get(request.path, {}))
                allowed = ", ".join(methods + (["HEAD"] if "GET" in methods else []))
                headers.append((b"allow", allowed.encode()))
            channel.respond(trace.status, headers, error_body(error, style))
        finally:
            if trace.writer is not None:
                completion_tokens = trace.writer.tokens
            elif trace.stats is not None:
                completion_tokens = trace.stats.completion_tokens
            self.records.append(trace.record(channel, self.faults, completion_tokens))

    def _route(self, request: Request) -> Route:
        path = request.path
        methods = self._routes.get(path)
        if methods is None:
            if path.startswith("/v1/models/") and request.method in ("GET", "HEAD"):
                return self._model
            raise not_found(path)
        # HEAD is GET without the body (RFC 9110 §9.3.2); the HTTP layer drops the body.
        route = methods.get("GET" if request.method == "HEAD" else request.method)
        if route is None:
            raise method_not_allowed(request.method, path)
        return route

    # -- plain routes ----------------------------------------------------------------------------------------------
    def _model_object(self) -> dict[str, Any]:
        return {"id": self.model, "object": "model", "created": self.created, "owned_by": "latscope-lab"}

    async def _models(self, request: Request, channel: ResponseChannel, trace: _Trace) -> None:
        body = orjson.dumps({"object": "list", "data": [self._model_object()]})
        channel.respond(200, [JSON, SERVER], body)

    async def _model(self, request: Request, channel: ResponseChannel, trace: _Trace) -> None:
        name = request.path.removeprefix("/v1/models/")
        if name != self.model:
            raise model_not_found(name)
        channel.respond(200, [JSON, SERVER], orjson.dumps(self._model_object()))

    async def _info(self, request: Request, channel: ResponseChannel, trace: _Trace) -> None:
        """TGI's ``/info``: the one model served, and the limits a client may need."""
        body = orjson.dumps(
            {
                "model_id": self.model,
                "max_input_tokens": self.gateway.max_context_tokens - 1,
                "max_total_tokens": self.gateway.max_context_tokens,
                "router": "latscope-lab",
            }
        )
        channel.respond(200, [JSON, SERVER], body)

    async def _tags(self, request: Request, channel: ResponseChannel, trace: _Trace) -> None:
        """Ollama's ``/api/tags``: the one model served."""
        model = {"name": self.model, "model": self.model, "modified_at": ollama_created_at(), "size": 0}
        channel.respond(200, [JSON, SERVER], orjson.dumps({"models": [model]}))

    async def _metrics(self, request: Request, channel: ResponseChannel, trace: _Trace) -> None:
        body, content_type = self.metrics.render()
        channel.respond(200, [(b"content-type", content_type.encode()), SERVER], body)

    async def _health(self, request: Request, channel: ResponseChannel, trace: _Trace) -> None:
        scheduler = self.scheduler
        body = orjson.dumps(
            {
                "status": "ok",
                "model": self.model,
                "pid": os.getpid(),  # which process answered: replicas share one port
                "running": scheduler.running,
                "waiting": scheduler.waiting,
                "kv_usage": scheduler.kv_usage,
            }
        )
        channel.respond(200, [JSON, SERVER], body)

    # -- generation ------------------------------------------------------------------------------------------------
    async def _chat(self, request: Request, channel: ResponseChannel, trace: _Trace) -> None:
        await self._generate(request, channel, trace, Endpoint.CHAT)

    async def _completions(self, request: Request, channel: ResponseChannel, trace: _Trace) -> None:
        await self._generate(request, channel, trace, Endpoint.COMPLETIONS)

    def _api(self, endpoint: Endpoint) -> Route:
        """The route of a generation endpoint."""

        async def route(request: Request, channel: ResponseChannel, trace: _Trace) -> None:
            await self._generate(request, channel, trace, endpoint)

        return route

    async def _generate(self, request: Request, channel: ResponseChannel, trace: _Trace, endpoint: Endpoint) -> None:
        prefix = _ID_PREFIXES.get(endpoint, "gen-")
        trace.request_id = prefix + secrets.token_hex(12)
        trace.endpoint = endpoint
        parsed = trace.parsed = self.gateway.parse(endpoint, request.body)
        trace.stream = parsed.stream
        self.metrics.observe_parse((parsed.parse_ns + parsed.validate_ns) / 1e9)
        credential = request.header(b"authorization") or request.header(b"x-api-key")
        if self.idempotency is None:
            # no-idempotency: the key is noted for the record and nothing else (an unreadable one too)
            try:
                trace.idempotency_key = idempotency_key(request)
            except ErrorResponse:
                trace.idempotency_key = None
            trace.idempotency = IGNORED if trace.idempotency_key is not None else None
            await self._execute(request, channel, trace, parsed, credential)
            return
        key = trace.idempotency_key = idempotency_key(request)
        if key is None:
            await self._execute(request, channel, trace, parsed, credential)
            return
        started_ns = time.monotonic_ns()
        try:
            begun = await self.idempotency.begin(key_digest(credential)[:16], key, request_fingerprint(request))
        except ErrorResponse as refused:
            trace.idempotency = {409: IN_USE, 422: REUSED}.get(refused.status, UNAVAILABLE)
            raise
        finally:
            trace.idempotency_ms = ms(time.monotonic_ns() - started_ns)
        if isinstance(begun, Replay):
            trace.idempotency = REPLAYED
            trace.request_id = begun.answer.request_id
            trace.status = begun.answer.status
            replay(begun.answer, channel)
            return
        trace.idempotency = EXECUTED
        # The execution runs in a task of its own, which a client that hangs up does not cancel: its answer is
        # stored for the retry that follows. The handler waits for it while the client is there.
        recording = RecordingChannel(channel)
        run = asyncio.get_running_loop().create_task(
            self._run_claimed(begun, request, recording, trace, parsed, credential), name="latscope-lab-idempotent"
        )
        self._claimed_runs.add(run)
        run.add_done_callback(self._claimed_run_done)
        await asyncio.shield(run)

    async def _run_claimed(
        self,
        claimed: Claimed,
        request: Request,
        recording: RecordingChannel,
        trace: _Trace,
        parsed: CompletionRequest,
        credential: bytes | None,
    ) -> None:
        """Execute a request that owns its key, then store its answer (or release the key when there is none: an
        error, or a stream that failed midway)."""
        assert self.idempotency is not None
        try:
            await self._execute(request, recording, trace, parsed, credential)
        except BaseException:
            await self.idempotency.abandon(claimed)
            raise
        if trace.error is None:
            await self.idempotency.finish(claimed, recording, trace.request_id)
        else:
            await self.idempotency.abandon(claimed)

    def _claimed_run_done(self, run: asyncio.Task[None]) -> None:
        self._claimed_runs.discard(run)
        if not run.cancelled():
            run.exception()  # retrieved: an error after the client left has nobody to go to (its record has it)

    async def close(self) -> None:
        """Cancel the executions still running for clients that have gone (the lab is stopping)."""
        runs = list(self._claimed_runs)
        for run in runs:
            run.cancel()
        await asyncio.gather(*runs, return_exceptions=True)

    async def _execute(
        self,
        request: Request,
        channel: ResponseChannel,
        trace: _Trace,
        parsed: CompletionRequest,
        credential: bytes | None,
    ) -> None:
        """Rate-limit, pass the circuit breaker (when on), schedule and answer an accepted request."""
        try:
            admitted = await self.gateway.admit(credential, parsed)
        except ErrorResponse as refused:
            if refused.status == 429:
                trace.retry_after_ms = _retry_after_ms(refused)
            raise
        trace.gateway_wait_ms = admitted.wait_ms if self.gateway.limiter is not None else None
        trace.limit_headers = admitted.headers
        parsed = trace.parsed = await self.gateway.preprocess(parsed)
        # a request the gateway held (the rate limiter) or worked on (image preprocessing) reaches the engine later
        held = bool(admitted.wait_ms or parsed.preprocess_ns)
        breaker = self.breaker
        if breaker is None:
            await self._run_engine(channel, trace, parsed, request, held)
            return
        passage = breaker.admit(time.monotonic())
        if not passage.admitted:
            trace.circuit = "refused"
            raise circuit_open(passage.retry_after_header)
        trace.circuit = "probe" if passage.probe else None
        failed: bool | None = None
        try:
            await self._run_engine(channel, trace, parsed, request, held)
            # an engine failure after the head ends the stream with an error event and returns: the flag says so
            failed = trace.engine_failed
        except ErrorResponse as refused:
            failed = True if refused.status >= 500 else None  # a request too large is the client's, not the engine's
            raise
        finally:
            breaker.record(passage, failed, time.monotonic())

    async def _run_engine(
        self,
        channel: ResponseChannel,
        trace: _Trace,
        parsed: CompletionRequest,
        request: Request,
        held: bool,
    ) -> None:
        """Schedule an admitted request on the engine and answer it (streamed or whole); an engine failure becomes a
        503 before the response head, an error event after it."""
        assert trace.request_id is not None and trace.endpoint is not None
        request_id, endpoint = trace.request_id, trace.endpoint
        # the engine's queue starts when the gateway lets the request through (``held``: later than it arrived): a
        # gateway's wait (the rate limiter's, image preprocessing) is not the engine's
        arrived_ns = time.monotonic_ns() if held else request.received_ns
        try:
            stream = self.scheduler.submit(
                GenerationRequest(
                    request_id,
                    parsed.prompt_tokens,
                    parsed.max_tokens,
                    parsed.seed,
                    arrived_ns=arrived_ns,
                    sampled=parsed.sampled,
                    prefix_blocks=parsed.prefix_blocks,
                )
            )
        except RequestTooLarge as exc:
            raise invalid_request(str(exc), param="max_tokens", code="context_length_exceeded") from None
        trace.stats = stream.stats
        completed = False
        try:
            if self.upstream_error_rate and self._upstream_draws.random() < self.upstream_error_rate:
                raise GenerationError("the upstream failed the request (upstream_error_rate)")
            openai = endpoint is Endpoint.CHAT or endpoint is Endpoint.COMPLETIONS
            if parsed.stream and openai:
                await self._stream(channel, trace, parsed, stream, request_id)
            elif parsed.stream:
                await self._stream_api(request, channel, trace, parsed, stream, request_id)
            elif openai:
                await self._complete(channel, parsed, stream, request_id, trace.limit_headers)
            else:
                await self._complete_api(request, channel, parsed, stream, request_id, trace.limit_headers)
            completed = True
        except GenerationError as exc:
            trace.engine_failed = True
            trace.error = f"generation failed: {exc}"
            if channel.headers_sent_ns is None:
                trace.status = 503
                raise ErrorResponse(
                    503,
                    f"The lab could not complete this request: {exc}",
                    type="server_error",
                    code="engine_unavailable",
                ) from None
            # Mid-stream: say so in the stream, as each API's servers do, then end it.
            if trace.writer is not None:
                trace.writer.send(stream_error_event(str(exc), endpoint.error_style))
                trace.writer.close()
        finally:
            if not completed:
                stream.cancel()  # the client went away or generation failed: free the queue slot and KV blocks

    async def _stream(
        self,
        channel: ResponseChannel,
        trace: _Trace,
        parsed: CompletionRequest,
        stream: RequestStream,
        request_id: str,
    ) -> None:
        fmt = (
            ChunkFormat(parsed.endpoint, request_id, int(time.time()), self.model)
            if parsed.tool is None
            else ToolCallChunkFormat(request_id, int(time.time()), self.model, parsed.tool)
        )
        writer = trace.writer = StreamWriter(channel, fmt, truth=self.truth, buffer_bytes=self.buffer_bytes)
        first = await anext(stream)
        stats = stream.stats
        channel.start(
            200,
            [
                *self._stream_headers,
                *_answer_headers(request_id, parsed, stats),
                *trace.limit_headers,
            ],
        )
        if parsed.endpoint is Endpoint.CHAT:
            writer.send_json(fmt.role())
        writer.send_token(first)
        last = await writer.pump(stream) or first
        extras = {
            "timings": llama_timings(stats, writer.tokens),
            "latscope": latscope_fields(request_id, parsed, stats),
        }
        final = fmt.finish(last.finish_reason or "length")
        if parsed.include_usage:
            writer.send_json(final)
            writer.send_json({**fmt.usage(usage(parsed.prompt_tokens, writer.tokens, stats.cached_tokens)), **extras})
        else:
            writer.send_json({**final, **extras})
        writer.send(DONE_EVENT)
        writer.close()

    async def _complete(
        self,
        channel: ResponseChannel,
        parsed: CompletionRequest,
        stream: RequestStream,
        request_id: str,
        extra_headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        texts, last = await _collect(stream)
        stats = stream.stats
        reason = (last.finish_reason if last is not None else None) or "length"
        text = "".join(texts)
        choice: dict[str, Any] = (
            {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": reason}
            if parsed.endpoint is Endpoint.CHAT
            else {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        )
        if parsed.tool is not None:
            arguments = orjson.dumps({"text": text}).decode()
            call = {
                "id": "call_" + request_id[-12:],
                "type": "function",
                "function": {"name": parsed.tool, "arguments": arguments},
            }
            choice["message"] = {"role": "assistant", "content": None, "tool_calls": [call]}
            choice["finish_reason"] = "tool_calls"  # fmt: skip
        body = {
            "id": request_id,
            "object": "chat.completion" if parsed.endpoint is Endpoint.CHAT else "text_completion",
            "created": int(time.time()),
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [choice],
            "usage": usage(parsed.prompt_tokens, len(texts), stats.cached_tokens),
            "timings": llama_timings(stats, len(texts)),
            "latscope": latscope_fields(request_id, parsed, stats),
        }
        _respond_complete(channel, _answer_headers(request_id, parsed, stats, decode=True), extra_headers, body)

    # -- the other APIs ------------------------------------------------------------------------------------------------
    def _format(
        self, request: Request, parsed: CompletionRequest, stats: RequestStats, request_id: str
    ) -> StreamFormat:
        """The stream format of ``parsed``'s API, its final event carrying the lab's fields."""

        def final() -> dict[str, Any]:
            return {"latscope": latscope_fields(request_id, parsed, stats)}

        endpoint = parsed.endpoint
        if endpoint is Endpoint.MESSAGES and parsed.thinking_tokens and parsed.tool is None:
            return AnthropicThinkingFormat(request_id, self.model, parsed.prompt_tokens, final, parsed.thinking_tokens)
        if endpoint is Endpoint.MESSAGES and parsed.tool is not None:
            return AnthropicToolFormat(request_id, self.model, parsed.prompt_tokens, final, parsed.tool)
        if endpoint is Endpoint.MESSAGES:
            return AnthropicFormat(request_id, self.model, parsed.prompt_tokens, final)
        if endpoint is Endpoint.RESPONSES and parsed.tool is not None:
            return ResponsesToolFormat(request_id, self.model, int(time.time()), final, parsed.tool)
        if endpoint is Endpoint.RESPONSES:
            return ResponsesFormat(request_id, self.model, int(time.time()), final)
        if endpoint is Endpoint.TGI_STREAM or endpoint is Endpoint.TGI_COMPAT:
            return TgiFormat(parsed.prompt_tokens, parsed.seed, final)
        return OllamaFormat(
            self.model,
            endpoint is Endpoint.OLLAMA_CHAT,
            lambda: ollama_durations(stats, request.received_ns),
            final,
        )

    async def _stream_api(
        self,
        request: Request,
        channel: ResponseChannel,
        trace: _Trace,
        parsed: CompletionRequest,
        stream: RequestStream,
        request_id: str,
    ) -> None:
        """A streamed answer in another API's format: the head when the first token is ready, as for OpenAI's."""
        stats = stream.stats
        fmt = self._format(request, parsed, stats, request_id)
        writer = trace.writer = StreamWriter(channel, fmt, truth=self.truth, buffer_bytes=self.buffer_bytes)
        first = await anext(stream)
        headers = [(b"content-type", fmt.media_type), *self._stream_headers[1:]]
        channel.start(
            200,
            [
                *headers,
                *_answer_headers(request_id, parsed, stats),
                *trace.limit_headers,
            ],
        )
        for event in fmt.opening():
            writer.send_json(event)
        writer.send_token(first)
        last = await writer.pump(stream) or first
        for event in fmt.closing(last.finish_reason or "length", parsed.prompt_tokens, writer.tokens):
            writer.send_json(event)
        writer.close()

    async def _complete_api(
        self,
        request: Request,
        channel: ResponseChannel,
        parsed: CompletionRequest,
        stream: RequestStream,
        request_id: str,
        extra_headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        """A non-streamed answer in another API's shape."""
        texts, last = await _collect(stream)
        stats = stream.stats
        reason = (last.finish_reason if last is not None else None) or "length"
        text = "".join(texts)
        lab = latscope_fields(request_id, parsed, stats)
        endpoint = parsed.endpoint
        body: dict[str, Any]
        if endpoint is Endpoint.MESSAGES:
            body = {
                "id": request_id,
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "max_tokens" if reason == "length" else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": parsed.prompt_tokens, "output_tokens": len(texts)},
            }
            if parsed.thinking_tokens and parsed.tool is None:
                thought = {"type": "thinking", "thinking": "".join(texts[: parsed.thinking_tokens]), "signature": "lab"}
                answer_text = {"type": "text", "text": "".join(texts[parsed.thinking_tokens :])}
                body["content"] = [thought, answer_text]
            if parsed.tool is not None:
                call = {"type": "tool_use", "id": "toolu_" + secrets.token_hex(12), "name": parsed.tool}
                body["content"] = [{**call, "input": {"text": text}}]
                body["stop_reason"] = "tool_use"
        elif endpoint is Endpoint.RESPONSES:
            item_id = "msg_" + secrets.token_hex(12)
            part = {"type": "output_text", "text": text, "annotations": []}
            body = {
                "id": request_id,
                "object": "response",
                "created_at": int(time.time()),
                "status": "incomplete" if reason == "length" else "completed",
                "incomplete_details": {"reason": "max_output_tokens"} if reason == "length" else None,
                "error": None,
                "model": self.model,
                "output": [
                    {"id": item_id, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
                ],
                "usage": responses_usage(parsed.prompt_tokens, len(texts)),
            }
            if parsed.tool is not None:
                call = {"type": "function_call", "id": "fc_" + item_id[-12:], "call_id": "call_" + item_id[-12:]}
                arguments = orjson.dumps({"text": text}).decode()
                body["output"] = [{**call, "name": parsed.tool, "arguments": arguments, "status": "completed"}]
                body["status"], body["incomplete_details"] = "completed", None
        elif endpoint is Endpoint.TGI_GENERATE or endpoint is Endpoint.TGI_COMPAT:
            body = {
                "generated_text": text,
                "details": {
                    "finish_reason": reason,
                    "generated_tokens": len(texts),
                    "seed": parsed.seed,
                    "prefill": [],
                    "tokens": [{"id": token_id(t), "text": t, "logprob": -0.25, "special": False} for t in texts],
                },
            }
        else:
            body = {"model": self.model, "created_at": ollama_created_at()}
            if endpoint is Endpoint.OLLAMA_CHAT:
                body["message"] = {"role": "assistant", "content": text}
            else:
                body["response"] = text
            body.update({"done": True, "done_reason": reason, **ollama_durations(stats, request.received_ns)})
        body["latscope"] = lab
        answer: Any = [body] if endpoint is Endpoint.TGI_COMPAT else body  # TGI's / answers a list of one
        _respond_complete(channel, _answer_headers(request_id, parsed, stats, decode=True), extra_headers, answer)
