"""The stream writer: one event per token, written as soon as the engine produces it.

The OpenAI chat and completions streams are :class:`ChunkFormat`'s; the other APIs' streams (Anthropic, Responses,
TGI, Ollama's NDJSON) are :mod:`latscope.lab.formats`'; the writer and its faults are the same for all.

A stream is, in order (OpenAI's chat format; the completions format has no role chunk)::

    data: {"id":…,"object":"chat.completion.chunk",…,"choices":[{"index":0,"delta":{"role":"assistant"},…}]}
    data: {… "delta":{"content":" tamo"} …}                       one per token
    data: {… "delta":{},"finish_reason":"length"}]}               the finish chunk
    data: {… "choices":[],"usage":{…},"timings":{…},"latscope":{…}}   with stream_options.include_usage
    data: [DONE]

``timings`` (llama.cpp) and ``latscope`` (the lab's own fields) always ride on the last JSON chunk: the usage chunk
when there is one, the finish chunk otherwise. Under ``--truth`` every chunk carries ``"latscope":{"sent_ns":N}``,
``time.monotonic_ns()`` taken immediately before the event is written (merged into the final chunk's object).

Hot path: the JSON around a token never changes within a response, so it is serialised once per response; a token
event is ``head + orjson.dumps(text) + tail`` and one :meth:`ResponseChannel.write`, i.e. one transport write.
Faults: ``proxy-buffering`` holds events until :data:`~latscope.lab.faults.PROXY_BUFFER_BYTES` have accumulated (or
the stream ends), as a buffering reverse proxy does; ``nagle`` is a socket option set by the edge stage, and it is
visible precisely because every event is its own small write.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from latscope.lab.formats import StreamFormat, arguments_piece
from latscope.lab.gateway import Endpoint
from latscope.lab.http.exchange import ResponseChannel
from latscope.lab.scheduler import RequestStream, TokenOut

DONE_EVENT = b"data: [DONE]\n\n"
SYSTEM_FINGERPRINT = "latscope-lab"


class ChunkFormat:
    """The pre-serialised pieces of one response's stream events."""

    def __init__(self, endpoint: Endpoint, completion_id: str, created: int, model: str) -> None:
        self.endpoint = endpoint
        self._base: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk" if endpoint is Endpoint.CHAT else "text_completion",
            "created": created,
            "model": model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }
        common = orjson.dumps(self._base)[:-1]  # without the closing brace: fields follow
        if endpoint is Endpoint.CHAT:
            self._token_head = b"data: " + common + b',"choices":[{"index":0,"delta":{"content":'
            self._token_tail = b'},"logprobs":null,"finish_reason":null}]'
        else:
            self._token_head = b"data: " + common + b',"choices":[{"index":0,"text":'
            self._token_tail = b',"logprobs":null,"finish_reason":null}]'

    def token(self, text: str) -> bytes:
        """A token event."""
        return self._token_head + orjson.dumps(text) + self._token_tail + b"}\n\n"

    def token_stamped(self, text: str, sent_ns: int) -> bytes:
        """A token event with the ``--truth`` send stamp."""
        return b'%b%b%b,"latscope":{"sent_ns":%d}}\n\n' % (
            self._token_head,
            orjson.dumps(text),
            self._token_tail,
            sent_ns,
        )

    def token_event(self, token: TokenOut, sent_ns: int | None) -> bytes:
        """A token event, stamped when ``sent_ns`` is given (the :class:`~latscope.lab.formats.StreamFormat` face)."""
        return self.token(token.text) if sent_ns is None else self.token_stamped(token.text, sent_ns)

    def frame(self, chunk: dict[str, Any]) -> bytes:
        """One JSON chunk as an SSE event."""
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def role(self) -> dict[str, Any]:
        """The first chat chunk: the assistant role, no text."""
        return {
            **self._base,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            ],
        }

    def finish(self, reason: str) -> dict[str, Any]:
        """The chunk that carries ``finish_reason`` and no text."""
        choice: dict[str, Any] = (
            {"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}
            if self.endpoint is Endpoint.CHAT
            else {"index": 0, "text": "", "logprobs": None, "finish_reason": reason}
        )
        return {**self._base, "choices": [choice]}

    def usage(self, usage: dict[str, int]) -> dict[str, Any]:
        """The usage chunk (``choices`` empty), sent when ``stream_options.include_usage`` is set."""
        return {**self._base, "choices": [], "usage": usage}


class ToolCallChunkFormat(ChunkFormat):
    """A chat stream whose answer calls ``tool``: the role chunk names the call, each token adds a piece of its
    ``arguments`` (``{"text": <the generated tokens>}``: the first piece opens the object, the last closes it), and
    the finish reason is ``tool_calls``."""

    def __init__(self, completion_id: str, created: int, model: str, tool: str) -> None:
        super().__init__(Endpoint.CHAT, completion_id, created, model)
        self.tool = tool
        self.call_id = "call_" + completion_id[-12:]
        self.opened = False
        common = orjson.dumps(self._base)[:-1]
        self._token_head = (
            b"data: " + common + b',"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":'
        )
        self._token_tail = b'}}]},"logprobs":null,"finish_reason":null}]'

    def token_event(self, token: TokenOut, sent_ns: int | None) -> bytes:
        piece = arguments_piece(token, first=not self.opened)
        self.opened = True
        return self.token(piece) if sent_ns is None else self.token_stamped(piece, sent_ns)

    def role(self) -> dict[str, Any]:
        call = {"index": 0, "id": self.call_id, "type": "function", "function": {"name": self.tool, "arguments": ""}}
        delta = {"role": "assistant", "content": None, "tool_calls": [call]}
        return {**self._base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}

    def finish(self, reason: str) -> dict[str, Any]:
        chunk = super().finish(reason)
        chunk["choices"][0]["finish_reason"] = "tool_calls"
        return chunk


class StreamWriter:
    """Writes one response's events to its channel, directly or through a proxy-like buffer."""

    def __init__(
        self, channel: ResponseChannel, fmt: ChunkFormat | StreamFormat, *, truth: bool, buffer_bytes: int | None
    ) -> None:
        self.channel = channel
        self.fmt = fmt
        self.truth = truth
        self.events = 0  #: events produced (written or buffered)
        self.tokens = 0  #: token events among them
        self._buffer_bytes = buffer_bytes
        self._held: list[bytes] = []
        self._held_len = 0

    def send(self, event: bytes) -> None:
        """One event: a write of its own, or into the buffer under ``proxy-buffering``."""
        self.events += 1
        if self._buffer_bytes is None:
            self.channel.write(event)
            return
        self._held.append(event)
        self._held_len += len(event)
        if self._held_len >= self._buffer_bytes:
            self._release()

    def send_json(self, chunk: dict[str, Any]) -> None:
        """A JSON chunk built as a dict (role, finish, usage: once per response, not per token)."""
        if self.truth:
            fields = chunk.setdefault("latscope", {})
            fields["sent_ns"] = time.monotonic_ns()
        self.send(self.fmt.frame(chunk))

    def send_token(self, token: TokenOut) -> None:
        """A token event (the hot path)."""
        self.tokens += 1
        self.send(self.fmt.token_event(token, time.monotonic_ns() if self.truth else None))

    async def pump(self, stream: RequestStream) -> TokenOut | None:
        """Write every remaining token of ``stream`` as it arrives; return the last one (None if there was none)."""
        channel = self.channel
        last: TokenOut | None = None
        # One pass per token; the stream ends after the request's max_tokens.
        async for token in stream:
            self.send_token(token)
            last = token
            if channel.paused:
                await channel.drain()  # the client reads slower than the engine generates: let the socket drain
        return last

    def close(self) -> None:
        """Release what a proxy-like buffer still holds and end the body."""
        self._release()
        self.channel.finish()

    def _release(self) -> None:
        if self._held:
            data = b"".join(self._held)
            self._held = []
            self._held_len = 0
            self.channel.write(data)
