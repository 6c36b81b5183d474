"""The lab's routes: what each request gets, from the gateway through the scheduler to the stream writer.

==========================  ======  ==========================================================================
``/v1/chat/completions``    POST    chat generation, streamed (SSE) or not
``/v1/completions``         POST    legacy completions, streamed or not
``/v1/models``              GET     the one served model (``/v1/models/{id}`` too)
``/metrics``                GET     Prometheus text from :class:`~latscope.lab.metrics.LabMetrics`
``/health``                 GET     ``{"status": "ok", ...}``
==========================  ======  ==========================================================================

``/v1`` routes require the API key when the lab has one. Every request leaves a
:class:`~latscope.lab.records.RequestRecord` in the lab's record log, whatever its outcome.

A streamed response's head is written when the first token is ready — so time to first byte includes queueing and
prefill, as on real servers — and carries ``Server-Timing`` with the gateway's and the engine's phases.
"""

from __future__ import annotations

import collections
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from latscope.lab.errors import ErrorResponse, invalid_request, method_not_allowed, model_not_found, not_found
from latscope.lab.gateway import CompletionRequest, Endpoint, Gateway
from latscope.lab.http.exchange import Request, ResponseChannel
from latscope.lab.metrics import LabMetrics
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
from latscope.lab.writer import DONE_EVENT, SYSTEM_FINGERPRINT, ChunkFormat, StreamWriter

JSON = (b"content-type", b"application/json")
SERVER = (b"server", b"latscope-lab")
#: Status recorded for a request whose client went away before the response head (nginx's convention).
CLIENT_CLOSED = 499

Route = Callable[[Request, ResponseChannel, "_Trace"], Awaitable[None]]


class _Trace:
    """What one request's handling learned, turned into a :class:`RequestRecord` at the end."""

    __slots__ = ("endpoint", "error", "parsed", "request", "request_id", "stats", "status", "stream", "writer")

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
        )


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
    ) -> None:
        self.gateway = gateway
        self.scheduler = scheduler
        self.metrics = metrics
        self.records = records
        self.faults = settings.active_faults
        self.model = settings.model
        self.truth = settings.truth
        self.buffer_bytes = settings.proxy_buffer_bytes
        self.created = int(time.time())
        self._stream_headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), SERVER]
        if self.buffer_bytes is None:
            # Tells nginx and friends not to buffer this response; a buffering proxy is exactly what omits it.
            self._stream_headers.append((b"x-accel-buffering", b"no"))
        self._routes: dict[str, dict[str, Route]] = {
            "/v1/chat/completions": {"POST": self._chat},
            "/v1/completions": {"POST": self._completions},
            "/v1/models": {"GET": self._models},
            "/metrics": {"GET": self._metrics},
            "/health": {"GET": self._health},
        }

    async def __call__(self, request: Request, channel: ResponseChannel) -> None:
        trace = _Trace(request)
        completion_tokens = 0
        try:
            route = self._route(request)
            if request.path.startswith("/v1/"):
                self.gateway.authorize(request.header(b"authorization"))
            await route(request, channel, trace)
        except ErrorResponse as error:
            trace.status = error.status
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
            channel.respond(error.status, headers, error.body())
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

    async def _metrics(self, request: Request, channel: ResponseChannel, trace: _Trace) -> None:
        body, content_type = self.metrics.render()
        channel.respond(200, [(b"content-type", content_type.encode()), SERVER], body)

    async def _health(self, request: Request, channel: ResponseChannel, trace: _Trace) -> None:
        scheduler = self.scheduler
        body = orjson.dumps(
            {
                "status": "ok",
                "model": self.model,
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

    async def _generate(self, request: Request, channel: ResponseChannel, trace: _Trace, endpoint: Endpoint) -> None:
        prefix = "chatcmpl-" if endpoint is Endpoint.CHAT else "cmpl-"
        request_id = trace.request_id = prefix + secrets.token_hex(12)
        trace.endpoint = endpoint
        parsed = trace.parsed = self.gateway.parse(endpoint, request.body)
        trace.stream = parsed.stream
        self.metrics.observe_parse((parsed.parse_ns + parsed.validate_ns) / 1e9)
        try:
            stream = self.scheduler.submit(
                GenerationRequest(
                    request_id,
                    parsed.prompt_tokens,
                    parsed.max_tokens,
                    parsed.seed,
                    arrived_ns=request.received_ns,
                    sampled=parsed.sampled,
                )
            )
        except RequestTooLarge as exc:
            raise invalid_request(str(exc), param="max_tokens", code="context_length_exceeded") from None
        trace.stats = stream.stats
        completed = False
        try:
            if parsed.stream:
                await self._stream(channel, trace, parsed, stream, request_id)
            else:
                await self._complete(channel, parsed, stream, request_id)
            completed = True
        except GenerationError as exc:
            trace.error = f"generation failed: {exc}"
            if channel.headers_sent_ns is None:
                trace.status = 503
                raise ErrorResponse(
                    503,
                    f"The lab could not complete this request: {exc}",
                    type="server_error",
                    code="engine_unavailable",
                ) from None
            # Mid-stream: say so in the stream, as OpenAI-compatible servers do, then end it.
            if trace.writer is not None:
                trace.writer.send(
                    b"data: "
                    + orjson.dumps(
                        {"error": {"message": str(exc), "type": "server_error", "param": None, "code": None}}
                    )
                    + b"\n\n"
                )
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
        fmt = ChunkFormat(parsed.endpoint, request_id, int(time.time()), self.model)
        writer = trace.writer = StreamWriter(channel, fmt, truth=self.truth, buffer_bytes=self.buffer_bytes)
        first = await anext(stream)
        stats = stream.stats
        channel.start(
            200,
            [
                *self._stream_headers,
                (b"x-request-id", request_id.encode()),
                (b"server-timing", server_timing(parsed, stats)),
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
            writer.send_json({**fmt.usage(usage(parsed.prompt_tokens, writer.tokens)), **extras})
        else:
            writer.send_json({**final, **extras})
        writer.send(DONE_EVENT)
        writer.close()

    async def _complete(
        self, channel: ResponseChannel, parsed: CompletionRequest, stream: RequestStream, request_id: str
    ) -> None:
        texts: list[str] = []
        last: TokenOut | None = None
        async for token in stream:  # ends after max_tokens tokens
            texts.append(token.text)
            last = token
        stats = stream.stats
        reason = (last.finish_reason if last is not None else None) or "length"
        text = "".join(texts)
        choice: dict[str, Any] = (
            {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": reason}
            if parsed.endpoint is Endpoint.CHAT
            else {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        )
        body = {
            "id": request_id,
            "object": "chat.completion" if parsed.endpoint is Endpoint.CHAT else "text_completion",
            "created": int(time.time()),
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [choice],
            "usage": usage(parsed.prompt_tokens, len(texts)),
            "timings": llama_timings(stats, len(texts)),
            "latscope": latscope_fields(request_id, parsed, stats),
        }
        channel.respond(
            200,
            [
                JSON,
                SERVER,
                (b"x-request-id", request_id.encode()),
                (b"server-timing", server_timing(parsed, stats, decode=True)),
            ],
            orjson.dumps(body),
        )
