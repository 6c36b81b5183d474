"""The OpenAI wire format: chat completions and (legacy) completions, streamed or not.

Most LLM servers speak it — vLLM, SGLang, TGI's ``/v1``, llama.cpp's ``llama-server``, llama-cpp-python, Ollama's
``/v1``, ``transformers serve`` — each with quirks the decoder accepts (tests/fixtures/real/ has captures):

- ``stream_options.include_usage``: OpenAI sends a last chunk with ``choices: []`` and ``usage`` (and ``"usage":
  null`` on every other chunk); ``transformers serve`` puts ``usage`` on the finish chunk; llama-cpp-python ignores
  the option and sends no usage at all.
- llama.cpp adds a ``timings`` object (prompt/predicted token counts and milliseconds) to its last chunk.
- ``transformers serve`` does not end the stream with ``data: [DONE]``.
- reasoning text arrives as ``delta.reasoning_content`` (DeepSeek, vLLM, llama.cpp) or ``delta.reasoning``
  (Ollama, OpenRouter, newer vLLM); tool-call arguments as ``delta.tool_calls[].function.arguments`` pieces.
- ``n > 1``: each chunk carries one choice (``choices[0].index`` says which, OpenAI and vLLM alike); the event keeps
  that index as its ``choice``.
- errors inside a stream arrive as ``data: {"error": {...}}`` (OpenAI, vLLM, llama.cpp), as an SSE ``event: error``,
  or in TGI's ``{"error": "...", "error_type": "..."}`` shape.

Reference: OpenAI API reference, "Chat Completions" (the chat completion chunk object, ``stream_options``) and
"Completions" (legacy).

The stream decoder runs once per event of every stream a load generator reads, so its common case — a content
chunk — is a handful of dict look-ups after ``orjson.loads``, no validation layer; and once a stream's content chunks
are seen to differ only in their text, they are decoded by comparing strings, without parsing JSON (``_Template``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import partial
from itertools import count
from typing import Any, Unpack

import orjson

from latscope.dialects.base import (
    SSE_MEDIA_TYPE,
    ApiError,
    Chunk,
    DecodedResponse,
    Dialect,
    EventDecodeError,
    Framing,
    GenerationOptions,
    Prompt,
    RequestSpec,
    TextRun,
    as_text,
    decode_json_object,
    excerpt,
    json_request,
    prompt_messages,
    prompt_text,
)
from latscope.dialects.errors import api_error_from, api_error_from_text, decode_error_body
from latscope.dialects.models import parse_models
from latscope.dialects.ssedecoder import SSEStreamDecoder
from latscope.dialects.templates import EVENTS_PER_TEMPLATE_TRY, TEMPLATE_TRIES, slice_texts
from latscope.dialects.templates import PROBE as _PROBE
from latscope.dialects.usage import token_usage
from latscope.sse.limits import DEFAULT_LIMITS, StreamLimits
from latscope.sse.parser import SSEEvent
from latscope.timeline.model import VLLM_METRICS_FIELD, VLLM_METRICS_KEYS, EventKind, Usage

CHAT_NAME = "openai.chat"
COMPLETIONS_NAME = "openai.completions"

MODES = ("chat", "completions")
"""The two OpenAI endpoints a decoder handles: ``/chat/completions`` (``delta``) and ``/completions`` (``text``)."""

DONE = "[DONE]"
"""The sentinel ``data:`` value that ends an OpenAI stream."""

_CONTENT = EventKind.CONTENT
_REASONING = EventKind.REASONING
_FINISH = EventKind.FINISH
_USAGE = EventKind.USAGE
_ROLE = EventKind.ROLE
_OTHER = EventKind.OTHER
_new_chunk = tuple.__new__  # builds a Chunk without its Python-level __new__; every field is given, in order
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_DONE_CHUNK = Chunk(EventKind.DONE)
_UNPARSED = object()  # _decode_event's "the data has not been parsed yet"
_TOOL_CALL = EventKind.TOOL_CALL

_Template = tuple[str, str, int, int, EventKind, str | None, int]
"""A stream's text-chunk shape: ``(prefix, suffix, start, stop, kind, finish_reason, choice)``.

Servers write every text chunk of a stream with the same fields (id, model, created, index ...) and only the text
changing, so an event whose data is ``prefix + text + suffix`` decodes to ``Chunk(kind, text, 1, finish_reason)``
(of that choice) without parsing JSON, provided ``text`` is non-empty and needs no escaping in JSON (no ``"``, no
``\\``, no control character: ``str.isprintable`` is stricter, which only sends more events the parsing way).

Why that is exact: a template is learnt from an event whose text (itself needing no escaping) stood verbatim between
``prefix`` and ``suffix`` as a string value, not an object key, and is confirmed by decoding ``prefix + _PROBE +
suffix`` into the same chunk with the probe as its text. Characters that need no escaping cannot end a JSON string
early, so every such document lexes like those two but for that one string value (RFC 8259 §7); changing that value
changed the decoded text, so the text is that value, exactly the characters in between, and nothing else in the
chunk depends on it.
"""

_JSON_SPACE = " \t\n\r"  # insignificant whitespace (RFC 8259 §2)


# -- requests ----------------------------------------------------------------------------------------------------


def chat_request(
    model: str, messages: Prompt, max_tokens: int | None, **options: Unpack[GenerationOptions]
) -> RequestSpec:
    """A ``POST /chat/completions`` request.

    ``messages`` is a chat ``messages`` list, or a prompt text sent as one user message (token ids raise
    :class:`ValueError`). ``max_tokens`` None leaves the limit to the server. Streaming asks for
    ``stream_options.include_usage`` so the server reports token counts in a last chunk. ``ignore_eos`` (a vLLM /
    llama.cpp extension, sent only when True) makes the server generate exactly ``max_tokens`` tokens. ``extra``
    fields are merged into the body's top level last (they win), e.g. OpenAI's ``user`` field, which ``diagnose``
    uses to pad a request to a chosen size. The options: :class:`~latscope.dialects.base.GenerationOptions`.
    """
    return _request(
        "/chat/completions", CHAT_NAME, model, "messages", prompt_messages(messages, CHAT_NAME), max_tokens, options
    )


def completions_request(
    model: str, prompt: Prompt, max_tokens: int | None, **options: Unpack[GenerationOptions]
) -> RequestSpec:
    """A ``POST /completions`` request (legacy completions: no chat template, so the prompt is sent as is).

    ``prompt`` is text, or a list of token ids (servers that accept them — vLLM, llama.cpp — then see exactly that
    many prompt tokens); a ``messages`` list raises :class:`ValueError`. The options are as for
    :func:`chat_request`.
    """
    value = prompt_text(prompt, COMPLETIONS_NAME, token_ids=True)
    return _request("/completions", COMPLETIONS_NAME, model, "prompt", value, max_tokens, options)


def _request(
    path: str, dialect: str, model: str, key: str, value: object, max_tokens: int | None, options: GenerationOptions
) -> RequestSpec:
    stream = options.get("stream", True)
    body: dict[str, object] = {"model": model, key: value}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    body["stream"] = stream
    if stream and options.get("include_usage", True):
        body["stream_options"] = {"include_usage": True}
    for name in ("temperature", "seed"):
        if options.get(name) is not None:
            body[name] = options[name]
    if options.get("ignore_eos"):
        body["ignore_eos"] = True
    body.update(options.get("extra") or {})
    # `extra` may have set `stream`
    return json_request(
        path, body, dialect=dialect, model=model, max_tokens=max_tokens, stream=body.get("stream") is True
    )


# -- streams -----------------------------------------------------------------------------------------------------


class OpenAIStreamDecoder(SSEStreamDecoder):
    """Decodes an OpenAI-style event stream into one :class:`Chunk` per SSE event (a :class:`StreamDecoder`).

    ``mode`` is ``"chat"`` (text in ``choices[0].delta.content``) or ``"completions"`` (``choices[0].text``). Kinds:
    a role-only delta → ROLE; non-empty text → CONTENT (tokens=1); ``delta.reasoning_content`` / ``delta.reasoning``
    → REASONING (tokens=1); ``delta.tool_calls`` with a function name or argument text → TOOL_CALL (tokens=1, the
    argument text as its text); ``finish_reason`` without text → FINISH (a text chunk that carries it keeps CONTENT
    and has ``finish_reason`` set, as does vLLM's empty-text finish chunk, which carries its last token — told by
    the ``token_ids`` member vLLM's choices have); ``usage`` or ``timings`` with nothing more token-relevant →
    USAGE; an explicitly empty text (``"content": ""`` / ``"text": ""``) with none of those and no role → CONTENT
    with no text (tokens=1: llama-cpp-python and vLLM send one per generated token whose text is not printable yet);
    a choice's ``token_ids`` list (vLLM's ``return_token_ids``) counts as many tokens as it lists; an error object →
    ERROR; ``[DONE]`` → DONE; a known shape carrying nothing (an empty delta, ``choices: []`` alone) → OTHER; an
    unknown shape → OTHER and a warning (once). ``choices[0]`` is read and its ``index`` becomes the chunk's
    ``choice`` (servers send one choice per chunk when ``n > 1``).

    ``usage`` / ``timings`` / the lab's ``latscope`` object are picked up from whichever chunk carries them: a
    ``latscope.sent_ns`` integer (monotonic ns, sent by ``latscope lab --truth``) becomes ``server_sent_ns`` and the
    object is kept as ``extra["latscope"]``; vLLM's per-request ``metrics`` object (``--enable-per-request-metrics``)
    as ``extra["vllm_metrics"]``.

    Invalid JSON raises :class:`EventDecodeError` (a :class:`StreamDecodeError`) naming the event (1-based) and its
    stream byte offset, with the chunks of the same feed decoded before it in ``chunks``. Invalid UTF-8 is replaced
    (as the SSE spec says) and reported in ``warnings`` with its byte offset. A stream that ends without ``[DONE]``
    gets a warning at :meth:`close`, not an error. Events whose SSE type is neither ``message`` nor ``error`` are
    decoded like ``message`` ones.
    """

    __slots__ = (
        "_after_done_warned",
        "_batch",
        "_chat",
        "_done",
        "_parsed",
        "_plain",
        "_template",
        "_template_builds",
        "_token_ids_seen",
        "_unknown_warned",
        "mode",
    )

    def __init__(self, mode: str = "chat", *, limits: StreamLimits = DEFAULT_LIMITS) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown OpenAI mode {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self._chat = mode == "chat"
        # the mode's hot path, kept as a plain function (a bound method stored on self would be a reference cycle)
        self._plain = _plain_chat if self._chat else _plain_completions
        super().__init__(limits=limits)
        self._done = False
        self._unknown_warned = False
        self._after_done_warned = False
        # the events of the current feed, to number them in messages; None until an event needs them (built lazily)
        self._batch: list[SSEEvent] | None = []
        self._template: _Template | None = None
        self._template_builds = 0
        self._parsed = 0  # text chunks whose JSON was parsed (the others were decoded by templates, mostly)
        self._token_ids_seen = False

    @property
    def counted_token_ids(self) -> bool:
        """True once an event's tokens were counted from the token ids it listed (vLLM's ``return_token_ids``)."""
        return self._token_ids_seen

    @property
    def saw_done(self) -> bool:
        """True once the ``[DONE]`` sentinel arrived."""
        return self._done

    def feed(self, data: bytes) -> list[Chunk] | TextRun:
        """Consume the next body bytes; return one chunk per SSE event they completed."""
        sse = self._sse
        values = sse.feed_values(data)
        if len(sse.invalid_utf8_offsets) != self._utf8_seen:
            self._report_invalid_utf8()
        if values is None:
            # an event with an SSE type of its own (`event: error`) among them: the general way, event by event
            events = sse.last_events()
            self._batch = events
            return self._decode_all(map(self._decode_message, events))
        if not values:
            return []
        self._batch = None
        if len(values) == 1:
            return [self._decode_value(values[0], 0)]  # the common case when tokens arrive one per read
        if self._template is not None:
            chunks = self._decode_run(values)
            if chunks is not None:
                return chunks
        return self._decode_all(map(self._decode_value, values, count()))

    @staticmethod
    def _decode_all(chunks: Iterator[Chunk]) -> list[Chunk]:
        """The chunks of several events, decoded by the ``chunks`` map. ``list.extend`` appends each chunk as it is
        made (C-level iteration, no bytecode per event), so when an event fails to decode, the chunks before it are
        already in the list and leave with the error (:class:`EventDecodeError`)."""
        out: list[Chunk] = []
        try:
            out.extend(chunks)
        except EventDecodeError as exc:
            exc.chunks = out
            raise
        return out

    def missing_end(self) -> str | None:
        return None if self._done else f"stream ended without [DONE] after {self._sse.events} events"

    # -- the fast paths ------------------------------------------------------------------------------------------
    #
    # A `message` event arrives as its data string (SSEParser.feed_values). A text chunk with nothing else attached
    # (and, with the lab's --truth, its send stamp) is decoded by _plain_chat / _plain_completions after one
    # orjson.loads; a stream's text chunks usually differ only in their text, and once a template of that shape is
    # known (see _Template) they are decoded without parsing JSON at all. Anything else goes to _decode_event, which
    # handles every shape.

    def _decode_value(self, value: str, index: int) -> Chunk:
        """The chunk of the ``index``-th event of this feed, a ``message`` event with data ``value``."""
        template = self._template
        fits = False
        if template is not None and value.startswith(template[0]) and value.endswith(template[1]):
            fits = True
            text = value[template[2] : template[3]]
            if text and '"' not in text and "\\" not in text and text.isprintable():
                return _new_chunk(Chunk, (template[4], text, 1, template[5], None, None, None, None, None, template[6]))
        if value == DONE or self._done:
            return self._decode_event(self._event(index), _UNPARSED)
        try:
            obj = _loads(value)
        except _JSONDecodeError:
            return self._decode_event(self._event(index), _UNPARSED)
        chunk = self._plain(obj)
        if chunk is None:
            return self._decode_event(self._event(index), obj)
        self._parsed += 1
        if not fits and chunk[8] is None:
            # No template yet, or the stream's text chunks changed shape (llama.cpp's `created` moved on a second):
            # learn this one while the budget allows; a template that no longer fits is dropped either way, so it
            # costs nothing on the events that follow. (A text that needs escaping fits and is only parsed.)
            self._template = None
            unparsed = self._sse.events - self._parsed  # about the events templates decoded (not counted there)
            if self._template_builds < TEMPLATE_TRIES + unparsed // EVENTS_PER_TEMPLATE_TRY:
                self._learn_template(value, chunk)
        return chunk

    def _decode_run(self, values: list[str]) -> TextRun | None:
        """The chunks of a run of events that all fit the template, or None when one does not. C-level iteration
        only: no bytecode per event."""
        template = self._template
        assert template is not None  # the caller checked
        texts = slice_texts(values, *template[:4])  # _decode_value's checks, on all the values at once
        return None if texts is None else TextRun(template[4], texts, template[5], template[6])

    def _learn_template(self, value: str, chunk: Chunk) -> None:
        """Make ``value`` (just decoded into ``chunk``, a text chunk with nothing else attached) the template, when
        its text appears in it verbatim once and a probe proves that position is where the text comes from."""
        self._template_builds += 1
        text = chunk[1]
        if '"' in text or "\\" in text or not text.isprintable() or _PROBE in value:
            return  # the text must need no escaping, like every text the template will take
        quoted = '"' + text + '"'
        at = value.find(quoted)
        if at < 0 or value.find(quoted, at + 1) >= 0:
            return  # not written verbatim, or ambiguous
        prefix = value[: at + 1]
        suffix = value[at + 1 + len(text) :]
        if suffix[1:].lstrip(_JSON_SPACE)[:1] == ":":
            return  # an object key (RFC 8259 §4), not a value
        try:
            probe = self._plain(_loads(prefix + _PROBE + suffix))
        except _JSONDecodeError:
            return
        # Both documents lex alike but for one string value, between prefix and suffix; the decoded text differs
        # (text vs probe), so it is read from that value, which is exactly the characters in between. The rest of the
        # chunk (kind, finish_reason, no usage / timings / stamp) is then the same for any text that needs no
        # escaping.
        if probe != (chunk[0], _PROBE, 1, chunk[3], None, None, None, None, None, chunk[9]):
            return
        self._template = (prefix, suffix, len(prefix), -len(suffix), chunk[0], chunk[3], chunk[9])

    def _event(self, index: int) -> SSEEvent:
        """The ``index``-th event of this feed as an SSEEvent (for the general path and its messages)."""
        if self._batch is None:
            self._batch = self._sse.last_events()
        return self._batch[index]

    def _decode_message(self, event: SSEEvent) -> Chunk:
        """The per-event path of SSEEvent input (events that come with an SSE type): the mode's plain shape first."""
        data = event[1]
        if data == DONE or event[0] != "message" or self._done:
            return self._decode_event(event, _UNPARSED)
        try:
            obj = _loads(data)
        except _JSONDecodeError:
            return self._decode_event(event, _UNPARSED)
        chunk = self._plain(obj)
        return chunk if chunk is not None else self._decode_event(event, obj)

    def _decode_event(self, event: SSEEvent, obj: Any) -> Chunk:
        """One SSE event → one chunk, whatever its shape (``obj``: the parsed data, or ``_UNPARSED``)."""
        data = event[1]
        if event[0] == "error":
            return _error_chunk(api_error_from_text(data))
        if data == DONE:
            self._done = True
            self._template = None  # after [DONE] every event takes this path (its warning)
            return _DONE_CHUNK
        if obj is _UNPARSED:
            try:
                obj = _loads(data)
            except _JSONDecodeError as exc:
                if not data.strip():
                    return self._unknown(event, None)
                raise EventDecodeError(
                    f"invalid JSON in SSE event {self._number(event)} (ending at stream byte {event[4]}): {exc}; "
                    f"data: {excerpt(data)}"
                ) from None
        if self._done and not self._after_done_warned:
            self._after_done_warned = True
            self._warnings.append(f"events after [DONE] (first: SSE event {self._number(event)})")
        if type(obj) is not dict:
            return self._unknown(event, None)
        choices = obj.get("choices")
        kind: EventKind | None = None
        text = ""
        finish = None
        role = False
        content = None
        index = 0
        token_ids = None
        per_output = False
        if choices:
            try:
                choice = choices[0]
                index = choice.get("index", 0)
                if self._chat:
                    delta = choice["delta"]
                    content = delta.get("content")
                    if content:
                        kind = _CONTENT
                        text = content
                    else:
                        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                        if reasoning:
                            kind = _REASONING
                            text = reasoning
                        elif delta.get("tool_calls"):
                            kind, text = _tool_call_delta(delta["tool_calls"])
                        else:
                            role = "role" in delta
                else:
                    content = choice["text"]
                    if content:
                        kind = _CONTENT
                        text = content
                finish = choice.get("finish_reason")
                token_ids = choice.get("token_ids")
                per_output = "token_ids" in choice
            except (KeyError, IndexError, TypeError, AttributeError):
                return self._unknown(event, obj)
            if text.__class__ is not str or (finish is not None and finish.__class__ is not str):
                return self._unknown(event, obj)
            if index.__class__ is not int:
                index = 0
        elif choices is None and ("error" in obj or obj.get("object") == "error"):
            return _error_chunk(api_error_from(obj))
        usage = obj.get("usage")
        timings = obj.get("timings")
        lab = obj.get("latscope")
        if kind is None:
            if finish:
                # vLLM sends one event per engine output, each with a token (its choices carry a `token_ids`
                # member, null unless asked for): its finish chunk is its last token, with empty text when the
                # token's bytes completed no character. llama.cpp's finish chunk has the same empty text and no token.
                kind = _CONTENT if content == "" and per_output else _FINISH
            elif usage or timings:
                kind = _USAGE
            elif role:
                kind = _ROLE
            elif content == "":
                # A token whose text is empty, as llama-cpp-python sends one for each token it generates while it
                # holds back an incomplete UTF-8 sequence or drops a control token: the server generated a token now.
                kind = _CONTENT
            elif choices is None and not lab:
                return self._unknown(event, obj)
            else:
                kind = _OTHER  # an empty delta, or `choices: []` alone (Azure's content-filter chunk)
        usage_obj = _usage(usage) if usage.__class__ is dict else None
        if timings.__class__ is not dict:
            timings = None
        sent_ns = None
        extra = None
        if lab.__class__ is dict:
            extra = {"latscope": lab}
            sent_ns = lab.get("sent_ns")
            if sent_ns.__class__ is not int:
                sent_ns = None
        metrics = obj.get("metrics")
        if metrics.__class__ is dict and any(key in metrics for key in VLLM_METRICS_KEYS):
            extra = {**(extra or {}), VLLM_METRICS_FIELD: metrics}
        tokens = 1 if kind is _CONTENT or kind is _REASONING or kind is _TOOL_CALL else 0
        if token_ids.__class__ is list:
            kind, tokens = self._count_ids(kind, text, token_ids)
        return _new_chunk(Chunk, (kind, text, tokens, finish, usage_obj, timings, None, sent_ns, extra, index))

    def _count_ids(self, kind: EventKind, text: str, token_ids: list[Any]) -> tuple[EventKind, int]:
        """The kind and token count of an event whose choice lists the token ids it carries (vLLM's
        ``return_token_ids``): as many tokens as ids, whatever the text — the finish chunk and an event of partial
        UTF-8 bytes carry a token with no text, and with ``--stream-interval`` above 1 one event carries several."""
        self._token_ids_seen = True
        count = len(token_ids)
        if count and kind not in (_CONTENT, _REASONING, _TOOL_CALL):
            return _CONTENT, count
        if not count and kind is _CONTENT and not text:
            return _OTHER, 0
        return kind, count if count else (1 if kind in (_CONTENT, _REASONING, _TOOL_CALL) else 0)

    def _unknown(self, event: SSEEvent, obj: dict[str, Any] | None) -> Chunk:
        """An event of a shape this decoder does not know: OTHER, a warning the first time, fields kept."""
        if not self._unknown_warned:
            self._unknown_warned = True
            self._warnings.append(
                f"unrecognised event shape (first: SSE event {self._number(event)}, ending at stream byte "
                f"{event[4]}): {excerpt(event[1])}"
            )
        if obj is None:
            return Chunk(_OTHER)
        usage = obj.get("usage")
        timings = obj.get("timings")
        return Chunk(
            _OTHER,
            usage=_usage(usage) if isinstance(usage, dict) else None,
            timings=timings if isinstance(timings, dict) else None,
        )

    def _number(self, event: SSEEvent) -> int:
        """The 1-based position of ``event`` in the stream (for messages)."""
        if self._batch is None:
            self._batch = self._sse.last_events()
        batch = self._batch
        for index, candidate in enumerate(batch):
            if candidate is event:
                return self._sse.events - len(batch) + index + 1
        return self._sse.events


def _tool_call_delta(calls: Any) -> tuple[EventKind | None, str]:
    """``(TOOL_CALL, arguments text)`` for a ``delta.tool_calls`` list whose calls carry a name or argument text (the
    first piece of a call names the function; later ones add argument text), else ``(None, "")``. Raises
    :class:`TypeError` for a shape that is not a list of calls (the caller's unknown-shape path)."""
    parts: list[str] = []
    named = False
    for call in calls:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if arguments:
            parts.append(arguments if arguments.__class__ is str else str(arguments))
        named = named or bool(function.get("name"))
    text = "".join(parts)
    return (_TOOL_CALL, text) if text or named else (None, "")


def _plain_chat(obj: Any) -> Chunk | None:
    """The chunk of a parsed chat chunk that carries text and nothing else (no usage, no timings; the lab's stamp
    allowed), or None for any other shape (then the general decoding applies)."""
    try:
        choice = obj["choices"][0]
        delta = choice["delta"]
        kind = _CONTENT
        text = delta.get("content")
        if not text:
            kind = _REASONING
            text = delta.get("reasoning_content") or delta.get("reasoning")
        finish = choice.get("finish_reason")
        index = choice.get("index", 0)
        if choice.get("token_ids") is not None:
            return None  # vLLM's return_token_ids: the ids, not the event, count the tokens
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return _plain_text_chunk(obj, kind, text, finish, index)


def _plain_completions(obj: Any) -> Chunk | None:
    """:func:`_plain_chat` for legacy completions (text in ``choices[0].text``)."""
    try:
        choice = obj["choices"][0]
        text = choice["text"]
        finish = choice.get("finish_reason")
        index = choice.get("index", 0)
        if choice.get("token_ids") is not None:
            return None  # vLLM's return_token_ids: the ids, not the event, count the tokens
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return _plain_text_chunk(obj, _CONTENT, text, finish, index)


def _plain_text_chunk(obj: Any, kind: EventKind, text: Any, finish: Any, index: Any) -> Chunk | None:
    """The text-only chunk for ``text``/``finish`` taken from ``obj``, or None when ``obj`` carries more (usage,
    timings) or a field has an unexpected type. The lab's ``latscope`` stamp is allowed."""
    if (
        not text
        or text.__class__ is not str
        or (finish is not None and finish.__class__ is not str)
        or obj.get("usage") is not None
        or "timings" in obj
        or index.__class__ is not int
    ):
        return None
    lab = obj.get("latscope")
    if lab is None:
        return _new_chunk(Chunk, (kind, text, 1, finish, None, None, None, None, None, index))
    if lab.__class__ is not dict:
        return None
    sent_ns = lab.get("sent_ns")
    if sent_ns.__class__ is not int:
        sent_ns = None
    return _new_chunk(Chunk, (kind, text, 1, finish, None, None, None, sent_ns, {"latscope": lab}, index))


def _error_chunk(error: ApiError) -> Chunk:
    return Chunk(EventKind.ERROR, error=error)


def _usage(usage: dict[str, Any]) -> Usage:
    """An OpenAI ``usage`` object (fields that are not integers are left None)."""
    return token_usage(usage, "prompt", "completion")


# -- non-streamed bodies -----------------------------------------------------------------------------------------


def decode_response_body(body: bytes, mode: str = "chat") -> DecodedResponse:
    """Decode a non-streamed ``chat.completion`` (``mode="chat"``) or ``text_completion`` body.

    Returns the text of ``choices[0]`` (``message.content`` / ``text``), its reasoning text, ``finish_reason``,
    ``usage`` and llama.cpp's ``timings``; an error object in place of a result is returned in ``error``. Raises
    :class:`StreamDecodeError` when the body is not a JSON object.
    """
    obj = decode_json_object(body)
    choices = obj.get("choices")
    if not choices and ("error" in obj or obj.get("object") == "error"):
        return DecodedResponse(text="", error=api_error_from(obj))
    text = ""
    reasoning = ""
    finish: str | None = None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        if mode == "chat":
            message = choice.get("message")
            if isinstance(message, dict):
                text = as_text(message.get("content"))
                reasoning = as_text(message.get("reasoning_content")) or as_text(message.get("reasoning"))
        else:
            text = as_text(choice.get("text"))
        finish_value = choice.get("finish_reason")
        finish = finish_value if isinstance(finish_value, str) else None
    usage = obj.get("usage")
    timings = obj.get("timings")
    return DecodedResponse(
        text=text,
        finish_reason=finish,
        usage=_usage(usage) if isinstance(usage, dict) else None,
        timings=timings if isinstance(timings, dict) else None,
        reasoning=reasoning,
    )


CHAT = Dialect(
    name=CHAT_NAME,
    description="OpenAI chat completions (POST /v1/chat/completions): vLLM, SGLang, TGI, llama.cpp, Ollama's /v1, "
    "hosted APIs",
    build_request=chat_request,
    framing=Framing.SSE,
    stream_media_types=(SSE_MEDIA_TYPE,),
    new_decoder=partial(OpenAIStreamDecoder, "chat"),
    decode_response=partial(decode_response_body, mode="chat"),
    decode_error=decode_error_body,
    parse_models=parse_models,
)
"""The OpenAI chat completions dialect."""

COMPLETIONS = dataclasses.replace(
    CHAT,
    name=COMPLETIONS_NAME,
    description="OpenAI legacy completions (POST /v1/completions): the prompt sent as is, no chat template",
    build_request=completions_request,
    new_decoder=partial(OpenAIStreamDecoder, "completions"),
    decode_response=partial(decode_response_body, mode="completions"),
)
"""The OpenAI legacy completions dialect."""
