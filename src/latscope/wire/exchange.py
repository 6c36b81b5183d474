"""The response side of one request: HTTP events in, timeline records out.

An :class:`Exchange` is fed by the HTTP/1.1 or HTTP/2 connection (``response`` / ``body`` / ``end`` / ``fail``) from
inside ``data_received``, so everything here runs on the hot path of the read that carried it and records that
read's stamp. The body goes to the dialect's stream decoder and each decoded chunk becomes one
:class:`~latscope.timeline.model.StreamEvent`; error statuses collect the body and decode it as an API error; a
streamed request answered with something other than an event stream counts the body and then fails naming the type.

A non-streamed request answered 2xx with JSON keeps its body and decodes it whole at the end with the dialect's
``decode_response`` (usage, finish reason, llama.cpp ``timings``, the text when kept). It records no stream events:
the first (and last) token mark is the read that completed the body, since every token arrives with the whole body.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from latscope.dialects.base import (
    Chunk,
    ErrorBodyDecoder,
    Framing,
    ResponseBodyDecoder,
    StreamDecodeError,
    StreamDecoder,
    TextRun,
)
from latscope.sse.limits import StreamLimitError
from latscope.timeline.model import TOKEN_KINDS, ErrorKind, EventKind, Phase, Timeline, Usage, as_event_log
from latscope.wire.encoding import Decompress, UnsupportedEncoding, decoder_for
from latscope.wire.errors import WireError, lost_error, make_error
from latscope.wire.models import DEFAULT_MAX_BODY_BYTES

#: error bodies are kept up to this size for decoding; the rest is counted, not kept (an HTML error page from a
#: proxy can be large, and the message is always at the start).
MAX_ERROR_BODY_BYTES = 65_536

#: The response's own id: the first JSON string member named ``id`` in a stream's first bytes. OpenAI's chunks begin
#: with it (``chatcmpl-…``, ``cmpl-…``), Anthropic's ``message_start`` carries the message's, the Responses API's
#: ``response.created`` the response's; TGI's numeric token ids and Ollama's lines have none. A server replaying a
#: stored answer (an idempotency key) sends the same id again, one generating anew a new one.
RESPONSE_ID = re.compile(rb'"id"\s*:\s*"([^"\\]{1,256})"')
#: How far into a stream the response id is looked for, bytes: past a first event with any realistic preamble. A
#: body's trace ids (:func:`body_trace_ids`) are looked for as far, in a stream's and in a whole body's first bytes.
RESPONSE_ID_SCAN_BYTES = 4096
#: A trace id a body names as one: a W3C ``traceparent``-shaped value (version-traceid-parentid-flags,
#: https://www.w3.org/TR/trace-context/#traceparent-header-field-values) or a JSON member named ``trace_id`` /
#: ``traceId`` holding 32 hex digits; the trace id is group 1 or group 2.
BODY_TRACE_ID = re.compile(
    rb"(?<![0-9a-f-])[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}(?![0-9a-f-])"
    rb'|"trace_?id"\s*:\s*"([0-9a-f]{32})"',
    re.IGNORECASE,
)
#: W3C Trace Context: the all-zero trace id is invalid, never a trace.
_INVALID_TRACE_ID = "0" * 32


def body_trace_ids(head: bytes, sent_trace_id: str) -> list[str]:
    """The trace ids ``head`` (a body's first bytes) names, lower-case, each once: ``sent_trace_id`` first when the
    bytes contain it anywhere (the server used it: in a ``traceparent``, a ``trace_id`` member, a request id …),
    then every other one found in a :data:`BODY_TRACE_ID` shape (a trace the body states as one)."""
    lower = head.lower()
    sent = sent_trace_id.lower()
    found = [sent] if sent.encode("ascii", "replace") in lower else []
    for match in BODY_TRACE_ID.finditer(lower):
        trace_id = (match.group(1) or match.group(2)).decode("ascii")
        if trace_id not in found and trace_id != _INVALID_TRACE_ID:
            found.append(trace_id)
    return found


def _first_bytes(parts: Sequence[bytes], limit: int) -> bytes:
    """The first ``limit`` bytes of the body kept in ``parts``."""
    head = bytearray()
    for part in parts:
        head += part[: limit - len(head)]
        if len(head) >= limit:
            break
    return bytes(head)


#: a non-streamed body is decoded only up to this size; a larger one (logprobs for a very long answer) is counted and
#: left undecoded with a warning, rather than held in memory whole by a load generator running many requests.
MAX_DECODED_BODY_BYTES = 64 * 1024 * 1024

_CONTENT = EventKind.CONTENT
_TOKEN_KINDS = TOKEN_KINDS

# body handling modes, decided when the response head arrives
_DECODE = 0  # feed the stream decoder
_COUNT = 1  # count bytes only (non-streamed request, or a streamed one with the wrong content type)
_KEEP = 2  # keep the whole body (Client.get)
_ERROR_BODY = 3  # keep up to MAX_ERROR_BODY_BYTES for the error decoder
_DECODE_BODY = 4  # keep the whole body for the dialect's non-streamed decoder (up to MAX_DECODED_BODY_BYTES)


def media_type(content_type: str | None) -> str | None:
    """The lower-cased media type of a Content-Type value (parameters dropped), or None."""
    if content_type is None:
        return None
    return content_type.split(";", 1)[0].strip().lower() or None


def is_json_type(kind: str | None) -> bool:
    """True for ``application/json`` and the ``+json`` structured syntax suffix (RFC 6839 §3.1)."""
    return kind is not None and (kind == "application/json" or kind.endswith("+json"))


def join_fields(fields: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Header or trailer fields as one dict: repeated names joined with ", " (RFC 9110 §5.3)."""
    joined: dict[str, str] = {}
    for name, value in fields:
        joined[name] = f"{joined[name]}, {value}" if name in joined else value
    return joined


#: the bound ``append`` of each :class:`~latscope.timeline.model.EventLog` column, in field order …
_EventAppends = tuple[
    Callable[[int], None],
    Callable[[int], None],
    Callable[[EventKind], None],
    Callable[[int], None],
    Callable[[int], None],
    Callable[[int | None], None],
    Callable[[int], None],
]
#: … and their ``extend``
_EventExtends = tuple[
    Callable[[Iterable[int]], None],
    Callable[[Iterable[int]], None],
    Callable[[Iterable[EventKind]], None],
    Callable[[Iterable[int]], None],
    Callable[[Iterable[int]], None],
    Callable[[Iterable[int | None]], None],
    Callable[[Iterable[int]], None],
]


class Exchange:
    """Records one response into ``timeline``. ``headers_future`` completes when the head arrived (or the request
    failed), ``done`` when the response ended or failed; either way the outcome is in the timeline. Both belong to
    ``loop`` (default: the running loop)."""

    __slots__ = (
        "_body_decoder",
        "_decoder",
        "_decompress",
        "_error_decoder",
        "_event_appends",
        "_event_extends",
        "_feed",
        "_framing",
        "_id_head",
        "_max_body_bytes",
        "_mode",
        "_pending_error",
        "_text_parts",
        "body_bytes",
        "body_parts",
        "done",
        "events",
        "finished",
        "headers_future",
        "keep_body",
        "keep_text",
        "reads",
        "response_header_list",
        "stream_types",
        "streamed",
        "timeline",
    )

    def __init__(
        self,
        timeline: Timeline,
        *,
        decoder: StreamDecoder | None,
        streamed: bool,
        keep_body: bool = False,
        keep_text: bool = False,
        error_decoder: ErrorBodyDecoder | None = None,
        body_decoder: ResponseBodyDecoder | None = None,
        stream_types: tuple[str, ...] = ("text/event-stream",),
        framing: Framing = Framing.SSE,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if loop is None:
            loop = asyncio.get_running_loop()
        self.timeline = timeline
        self.reads = timeline.reads
        self.events = timeline.events = as_event_log(timeline.events)
        # the columns' appends, bound once for the hot loop of _record (stamps and read indices go in per read)
        log = self.events
        self._event_appends: _EventAppends = (
            log.at_ns.append,
            log.read_index.append,
            log.kind.append,
            log.text_chars.append,
            log.tokens.append,
            log.server_sent_ns.append,
            log.choice.append,
        )
        self._event_extends: _EventExtends = (
            log.at_ns.extend,
            log.read_index.extend,
            log.kind.extend,
            log.text_chars.extend,
            log.tokens.extend,
            log.server_sent_ns.extend,
            log.choice.extend,
        )
        self.streamed = streamed
        self.keep_body = keep_body
        self.keep_text = keep_text
        self.body_bytes = 0
        self.body_parts: list[bytes] = []
        self.response_header_list: list[tuple[str, str]] = []
        self.headers_future: asyncio.Future[None] = loop.create_future()
        self.done: asyncio.Future[None] = loop.create_future()
        self.finished = False
        self._decoder = decoder
        self._feed: Callable[[bytes], Sequence[Chunk]] | None = None
        self._error_decoder = error_decoder
        self._body_decoder = body_decoder
        self.stream_types = stream_types
        self._framing = framing
        self._mode = _COUNT
        self._pending_error: WireError | None = None
        self._text_parts: list[str] = []
        self._decompress: Decompress | None = None
        self._max_body_bytes = max_body_bytes
        #: the stream's first bytes, while its response id (and, for a request that sent a ``traceparent``, its trace
        #: ids) are looked for (:meth:`_feed_first`)
        self._id_head = b""

    # --- fed by the HTTP layer ----------------------------------------------------------------------------------

    def response(self, status: int, headers: Sequence[tuple[str, str]], at_ns: int) -> None:
        """The response head (final status; lower-case header names) was parsed in the read stamped ``at_ns``."""
        t = self.timeline
        t.status = status
        t.headers_received_ns = at_ns
        self.response_header_list = list(headers)
        joined = join_fields(headers)
        t.response_headers = joined
        ctype = joined.get("content-type")
        encoding = joined.get("content-encoding")
        if encoding is not None and not self._decoding(encoding):
            return
        if status >= 400:
            self._mode = _ERROR_BODY
        elif self.keep_body:
            self._mode = _KEEP
        elif self.streamed:
            kind = media_type(ctype)
            if kind in self.stream_types or (kind is None and self._decoder is not None):
                if kind is None:
                    t.warnings.append(f"the response has no Content-Type; decoded it as {self._framing.description}")
                if self._decoder is not None:
                    self._mode = _DECODE
                    self._feed = self._feed_first
            else:
                expected = ", ".join(self.stream_types)
                self._pending_error = make_error(
                    f"expected {self._framing.description} ({expected}) for a streamed request, got {ctype!r}",
                    phase=Phase.HEADERS,
                    kind=ErrorKind.CONTENT_TYPE,
                )
        elif self._body_decoder is not None and 200 <= status < 300 and is_json_type(media_type(ctype)):
            self._mode = _DECODE_BODY
        if not self.headers_future.done():
            self.headers_future.set_result(None)

    def body(self, data: bytes, at_ns: int, read_index: int) -> None:
        """Body bytes (framing removed) from the read ``read_index`` stamped ``at_ns``. The hot path."""
        self.body_bytes += len(data)
        if self.body_bytes > self._max_body_bytes:
            self._over_body_limit(at_ns)
            return
        if self._decompress is not None:
            data = self._inflate(data, at_ns)
            if self.finished:
                return
        feed = self._feed
        if feed is None:
            mode = self._mode
            if mode == _KEEP or (mode == _ERROR_BODY and self.body_bytes - len(data) < MAX_ERROR_BODY_BYTES):
                self.body_parts.append(data)
            elif mode == _DECODE_BODY:
                if self.body_bytes <= MAX_DECODED_BODY_BYTES:
                    self.body_parts.append(data)
                else:
                    self.body_parts.clear()
                    self._mode = _COUNT
                    self.timeline.warnings.append(
                        f"the response body is larger than {MAX_DECODED_BODY_BYTES} bytes: it was not decoded "
                        "(no usage, finish reason or server timings from it)"
                    )
            return
        try:
            chunks = feed(data)
        except StreamDecodeError as exc:
            # a decoder may attach the chunks it decoded before the bad event of this read: keep them too
            before = getattr(exc, "chunks", None)
            if before:
                self._record(before, at_ns, read_index)
            self._decode_failed(exc, at_ns)
            return
        except StreamLimitError as exc:
            self.fail(make_error(str(exc), phase=Phase.STREAM, kind=ErrorKind.LIMIT), at_ns)
            return
        if chunks:
            self._record(chunks, at_ns, read_index)

    def _feed_first(self, data: bytes) -> Sequence[Chunk]:
        """The decoder's ``feed`` for a stream's first bytes: also finds the response's own id
        (:attr:`Timeline.response_id`) in them, and keeps the first :data:`RESPONSE_ID_SCAN_BYTES` of a request
        that sent a ``traceparent`` to look for trace ids in once (:meth:`_scan_head`), then hands the hot path to
        the decoder alone."""
        assert self._decoder is not None
        t = self.timeline
        head = self._id_head = self._id_head + data
        if t.response_id is None:
            found = RESPONSE_ID.search(head)
            if found is not None:
                t.response_id = found.group(1).decode("utf-8", "replace")
        if len(head) >= RESPONSE_ID_SCAN_BYTES or (t.response_id is not None and t.trace_id is None):
            self._scan_head()
            self._feed = self._decoder.feed
        return self._decoder.feed(data)

    def _scan_head(self) -> None:
        """Look for trace ids in the kept first bytes of the stream, once, and let them go."""
        t = self.timeline
        if t.trace_id is not None and self._id_head:
            t.body_trace_ids = body_trace_ids(self._id_head[:RESPONSE_ID_SCAN_BYTES], t.trace_id)
        self._id_head = b""

    def trailers(self, fields: Sequence[tuple[str, str]]) -> None:
        """The trailer section (lower-case names; HTTP/2 trailers or the chunked trailer of HTTP/1.1) arrived."""
        self.timeline.response_trailers = join_fields(fields)

    def end(self, at_ns: int) -> None:
        """The response ended cleanly with the read stamped ``at_ns``."""
        if self.finished:
            return
        t = self.timeline
        t.response_body_bytes = self.body_bytes
        if self._mode == _DECODE and self._decoder is not None:
            try:
                chunks = self._decoder.close()
            except StreamDecodeError as exc:
                self._decode_failed(exc, at_ns)
                return
            if chunks:
                self._record(chunks, at_ns, len(self.reads) - 1)
            if t.first_token_ns is None and self._pending_error is None and 200 <= (t.status or 0) < 300:
                self._pending_error = self._empty_stream_error()
        if t.trace_id is not None and self._mode in (_DECODE_BODY, _ERROR_BODY, _KEEP):
            t.body_trace_ids = body_trace_ids(_first_bytes(self.body_parts, RESPONSE_ID_SCAN_BYTES), t.trace_id)
        if self._mode == _DECODE_BODY:
            self._decode_body(at_ns)
        if self._mode == _ERROR_BODY:
            self._pending_error = self._status_error()
        elif self._pending_error is not None and self._pending_error.kind is ErrorKind.CONTENT_TYPE:
            self._pending_error = make_error(
                f"{self._pending_error.message} ({self.body_bytes} bytes of body)",
                phase=Phase.HEADERS,
                kind=ErrorKind.CONTENT_TYPE,
            )
        if self._pending_error is not None:
            self.fail(self._pending_error, at_ns)
            return
        self._finish(at_ns)

    def fail(self, error: WireError, at_ns: int) -> None:
        """The request failed at ``at_ns``; keep everything recorded so far."""
        if self.finished:
            return
        t = self.timeline
        t.response_body_bytes = self.body_bytes
        t.error = error.to_record(at_ns)
        self._finish(at_ns)

    def lost_error(self, exc: BaseException | None) -> WireError:
        """The error for the connection lost under this exchange (``exc`` None: closed cleanly by the peer), named
        after how far the request had come."""
        t = self.timeline
        if t.send_end_ns is None:
            return lost_error(exc, Phase.SEND, "while sending the request")
        if t.status is None:
            return lost_error(exc, Phase.HEADERS, "before sending the response head")
        return lost_error(
            exc,
            Phase.STREAM,
            f"while reading the stream (after {len(self.events)} events, {self.body_bytes} body bytes)",
        )

    @property
    def body_bytes_kept(self) -> bytes:
        """The kept body (``keep_body`` or an error body)."""
        return b"".join(self.body_parts)

    @property
    def failed(self) -> bool:
        """True once an error was recorded."""
        return self.timeline.error is not None

    # --- internals ----------------------------------------------------------------------------------------------

    def _record(self, chunks: Sequence[Chunk], at_ns: int, read_index: int) -> None:
        count = len(chunks)
        if type(chunks) is TextRun:
            token_seen, text_seen = self._record_text_run(chunks, at_ns, read_index)
        elif count > 1:
            token_seen, text_seen = self._record_run(chunks, at_ns, read_index)
        else:
            token_seen = text_seen = False
            stamps, read_indices, kinds, chars, token_counts, sent, choices = self._event_appends
            keep_text = self.keep_text
            for c in chunks:
                # one unpack instead of a descriptor call per field
                kind, text, tokens, finish, usage, timings, error, sent_ns, extra, choice = c
                stamps(at_ns)
                read_indices(read_index)
                kinds(kind)
                chars(len(text))
                token_counts(tokens)
                sent(sent_ns)
                choices(choice)
                if kind is _CONTENT:
                    token_seen = text_seen = True
                    if keep_text and text:
                        self._text_parts.append(text)
                elif kind in _TOKEN_KINDS:
                    token_seen = True
                    if keep_text and text and kind is not EventKind.TOOL_CALL:
                        self._text_parts.append(text)
                if (
                    finish is not None
                    or usage is not None
                    or timings is not None
                    or error is not None
                    or extra is not None
                ):
                    self._extras(c)
        if token_seen:
            t = self.timeline
            if t.first_token_ns is None:
                t.first_token_ns = at_ns
            if text_seen and t.first_text_ns is None:
                t.first_text_ns = at_ns
            t.last_token_ns = at_ns

    def _record_text_run(self, run: TextRun, at_ns: int, read_index: int) -> tuple[bool, bool]:
        """:meth:`_record` for a decoder's :class:`TextRun`: every column extended at once, no chunk made; returns
        (a token came, visible text came)."""
        stamps, read_indices, kinds, chars, token_counts, sent, choices = self._event_extends
        texts = run.texts
        count = len(texts)
        kind = run.kind
        stamps([at_ns] * count)
        read_indices([read_index] * count)
        kinds([kind] * count)
        chars(map(len, texts))
        token_counts([1] * count)
        sent([None] * count)
        choices([run.choice] * count)
        if run.finish_reason is not None:
            self._result(run.finish_reason, None, None)
        text_seen = kind is _CONTENT
        token_seen = kind in _TOKEN_KINDS
        if self.keep_text and (text_seen or kind is EventKind.REASONING):
            self._text_parts.extend(texts)
        return token_seen, text_seen

    def _record_run(self, chunks: Sequence[Chunk], at_ns: int, read_index: int) -> tuple[bool, bool]:
        """:meth:`_record` for a read that completed several events: the chunks transposed at once and each column
        extended in one call (a large read of a fast stream holds hundreds); returns (a token came, visible text
        came)."""
        stamps, read_indices, kinds, chars, token_counts, sent, choices = self._event_extends
        count = len(chunks)
        kind_of, text_of, tokens_of, finish_of, usage_of, timings_of, error_of, sent_of, extra_of, choice_of = zip(
            *chunks, strict=True
        )
        stamps([at_ns] * count)
        read_indices([read_index] * count)
        kinds(kind_of)
        chars(map(len, text_of))
        token_counts(tokens_of)
        sent(sent_of)
        choices(choice_of)
        text_seen = _CONTENT in kind_of
        token_seen = text_seen or EventKind.REASONING in kind_of or EventKind.TOOL_CALL in kind_of
        if self.keep_text and token_seen:
            self._text_parts.extend(
                text
                for kind, text in zip(kind_of, text_of, strict=True)
                if text and (kind is _CONTENT or kind is EventKind.REASONING)
            )
        if (
            finish_of.count(None) != count
            or usage_of.count(None) != count
            or timings_of.count(None) != count
            or error_of.count(None) != count
            or extra_of.count(None) != count
        ):
            for c in chunks:
                if (
                    c.finish_reason is not None
                    or c.usage is not None
                    or c.timings is not None
                    or c.error is not None
                    or c.extra is not None
                ):
                    self._extras(c)
        return token_seen, text_seen

    def _result(self, finish_reason: str | None, usage: Usage | None, timings: dict[str, Any] | None) -> None:
        """Keep what a response said about its result: finish reason, token usage, llama.cpp ``timings``."""
        t = self.timeline
        if finish_reason is not None:
            t.finish_reason = finish_reason
        if usage is not None:
            t.usage = usage
        if timings is not None:
            t.server_fields["timings"] = timings

    def _extras(self, c: Chunk) -> None:
        t = self.timeline
        self._result(c.finish_reason, c.usage, c.timings)
        if c.extra is not None:
            t.server_fields.update(c.extra)
        if c.error is not None and self._pending_error is None:
            self._pending_error = make_error(
                f"the server sent an error in the stream: {c.error.message}",
                phase=Phase.STREAM,
                kind=ErrorKind.API_ERROR,
            )

    def _decode_body(self, at_ns: int) -> None:
        """Decode a whole non-streamed body into usage, finish reason, timings and (kept) text. A body that does not
        decode is a warning, not a failure: the response itself arrived complete."""
        assert self._body_decoder is not None
        t = self.timeline
        body = b"".join(self.body_parts)
        self.body_parts = []
        try:
            decoded = self._body_decoder(body)
        except Exception as exc:  # StreamDecodeError, or a decoder bug: the timing record stays valid either way
            t.warnings.append(f"the response body could not be decoded: {exc}")
            return
        if decoded.error is not None:
            self._pending_error = make_error(
                f"the server sent an error instead of a result: {decoded.error.message}",
                phase=Phase.STREAM,
                kind=ErrorKind.API_ERROR,
            )
        self._result(decoded.finish_reason, decoded.usage, decoded.timings)
        text = decoded.reasoning + decoded.text  # the order a stream would have sent them in
        generated = decoded.usage.completion_tokens if decoded.usage is not None else None
        if text or generated:
            # every token arrives with the whole body: the read that completed it is the first and the last token's
            last_read_ns = self.reads[-1].at_ns if self.reads else at_ns
            t.first_token_ns = t.last_token_ns = last_read_ns
            if decoded.text:
                t.first_text_ns = last_read_ns
        if self.keep_text and text:
            self._text_parts.append(text)

    def _decoding(self, encoding: str) -> bool:
        """Prepare to undo the response's ``Content-Encoding``; False (and the request failed) when it cannot be."""
        try:
            self._decompress = decoder_for(encoding)
        except UnsupportedEncoding as exc:
            self.fail(
                make_error(f"{exc} (the request asked for identity)", phase=Phase.HEADERS, kind=ErrorKind.ENCODING),
                self.timeline.headers_received_ns or 0,
            )
            return False
        if self._decompress is not None and self.streamed:
            self.timeline.warnings.append(
                f"the server compressed the stream ({encoding}) although the request asked for identity: a "
                "compressor holds tokens back until it emits a block; latscope decoded it"
            )
        return True

    def _inflate(self, data: bytes, at_ns: int) -> bytes:
        assert self._decompress is not None
        try:
            return self._decompress(data)
        except Exception as exc:  # zlib.error, brotli.error, zstandard.ZstdError: the body is not what it says
            encoding = self.timeline.response_headers.get("content-encoding")
            self.fail(
                make_error(
                    f"the body does not decode as its content encoding {encoding!r} says (after {self.body_bytes} "
                    f"bytes): {exc}",
                    phase=Phase.STREAM,
                    kind=ErrorKind.ENCODING,
                ),
                at_ns,
            )
            return b""

    def _over_body_limit(self, at_ns: int) -> None:
        self.fail(
            make_error(
                f"the response body grew past {self._max_body_bytes} bytes (the body limit) after {len(self.events)} "
                "events",
                phase=Phase.STREAM,
                kind=ErrorKind.LIMIT,
            ),
            at_ns,
        )

    def _empty_stream_error(self) -> WireError:
        """A 2xx stream that ended without a token: say what it did carry."""
        if not self.events:
            what = "an empty body" if not self.body_bytes else f"{self.body_bytes} bytes and not one event"
        else:
            kinds = sorted({str(e.kind) for e in self.events})
            what = f"{len(self.events)} events ({', '.join(kinds)}) and no token"
        return make_error(f"the stream ended without a token: {what}", phase=Phase.STREAM, kind=ErrorKind.EMPTY)

    def _decode_failed(self, exc: StreamDecodeError, at_ns: int) -> None:
        self.fail(make_error(str(exc), phase=Phase.STREAM, kind=ErrorKind.DECODE), at_ns)

    def _status_error(self) -> WireError:
        status = self.timeline.status or 0
        body = self.body_bytes_kept[:MAX_ERROR_BODY_BYTES]
        ctype = self.timeline.response_headers.get("content-type")
        message: str | None = None
        if self._error_decoder is not None:
            try:
                message = self._error_decoder(status, body, ctype).message
            except Exception:  # a decoder bug must not hide the status
                message = None
        if not message:
            message = body[:200].decode("utf-8", "replace").strip() or "(empty body)"
        retry_after = self.timeline.response_headers.get("retry-after")
        if retry_after:
            # what a rate limit or an overloaded server asks the client to wait (seconds, or an HTTP date)
            wait = f"{retry_after} s" if retry_after.strip().isdigit() else retry_after
            message = f"{message} (Retry-After: {wait})"
        return make_error(f"HTTP {status}: {message}", phase=Phase.HEADERS, kind=ErrorKind.HTTP_STATUS, status=status)

    def _finish(self, at_ns: int) -> None:
        self.finished = True
        if self._feed == self._feed_first:  # the stream ended within its first bytes: they were not scanned yet
            self._scan_head()
        self._feed = None
        t = self.timeline
        t.ended_ns = at_ns
        if self._decoder is not None:
            for warning in self._decoder.warnings:
                if warning not in t.warnings:
                    t.warnings.append(warning)
            t.tokens_from_ids = getattr(self._decoder, "counted_token_ids", False) is True
        if self.keep_text and self._text_parts:
            t.output_text = "".join(self._text_parts)
        if not self.headers_future.done():
            self.headers_future.set_result(None)
        if not self.done.done():
            self.done.set_result(None)
