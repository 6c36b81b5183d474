"""A handler for :class:`~tests.support.stream_server.StreamServer` that answers like Ollama's native API.

``GET /api/tags`` lists the models; ``POST /api/chat`` and ``POST /api/generate`` stream newline-delimited JSON
(``application/x-ndjson``), one object per token, ``interval_s`` apart, then a final ``"done": true`` object with
``done_reason``, the token counts and the durations in NANOSECONDS, as Ollama sends them
(https://github.com/ollama/ollama/blob/main/docs/api.md); ``"stream": false`` gets the whole answer as one JSON
object. The number of tokens is ``options.num_predict`` (default :data:`DEFAULT_TOKENS`). Anything else is 404 with
Ollama's ``{"error": "..."}`` shape. The server root is the base URL (``server.base_url`` minus its ``/v1``).
"""

from __future__ import annotations

import asyncio
import time

import orjson

from tests.support.stream_server import Handler, Received, Reply

MODEL = "llama3.2:1b"
DEFAULT_TOKENS = 8
NDJSON = [("content-type", "application/x-ndjson")]
#: what the fake engine reports it spent per phase, ns (constant, so a test can check the join)
LOAD_NS = 1_500_000
PROMPT_EVAL_NS = 3_000_000
EVAL_NS_PER_TOKEN = 2_000_000


def root_url(base_url: str) -> str:
    """The server root of a StreamServer's ``base_url`` (which ends in ``/v1``)."""
    return base_url.removesuffix("/v1")


def ollama_handler(interval_s: float = 0.002) -> Handler:
    """The handler (see the module docstring)."""

    async def handler(request: Received, reply: Reply) -> None:
        path = request.target.split("?", 1)[0]
        if request.method == "GET" and path == "/api/tags":
            await reply.send_json(200, {"models": [{"name": MODEL, "model": MODEL, "size": 1}]})
            return
        if request.method != "POST" or path not in ("/api/chat", "/api/generate"):
            await reply.send_json(404, {"error": f"404 page not found: {path}"})
            return
        body = orjson.loads(request.body)
        if body.get("model") != MODEL:
            await reply.send_json(404, {"error": f'model "{body.get("model")}" not found, try pulling it first'})
            return
        chat = path == "/api/chat"
        tokens = int((body.get("options") or {}).get("num_predict") or DEFAULT_TOKENS)
        prompt_chars = len(orjson.dumps(body.get("messages") if chat else body.get("prompt")))
        final = {
            "done": True,
            "done_reason": "length",
            "total_duration": LOAD_NS + PROMPT_EVAL_NS + tokens * EVAL_NS_PER_TOKEN + 250_000,
            "load_duration": LOAD_NS,
            "prompt_eval_count": max(1, prompt_chars // 4),
            "prompt_eval_duration": PROMPT_EVAL_NS,
            "eval_count": tokens,
            "eval_duration": tokens * EVAL_NS_PER_TOKEN,
        }
        if body.get("stream") is False:
            text = "".join(f" w{i}" for i in range(tokens))
            answer = {"message": {"role": "assistant", "content": text}} if chat else {"response": text}
            await reply.send_json(200, {"model": MODEL, "created_at": _now(), **answer, **final})
            return
        await reply.start(200, NDJSON)
        for i in range(tokens):
            if interval_s:
                await asyncio.sleep(interval_s)
            piece = {"message": {"role": "assistant", "content": f" w{i}"}} if chat else {"response": f" w{i}"}
            await reply.send(orjson.dumps({"model": MODEL, "created_at": _now(), **piece, "done": False}) + b"\n")
        last = {"message": {"role": "assistant", "content": ""}} if chat else {"response": ""}
        await reply.send(orjson.dumps({"model": MODEL, "created_at": _now(), **last, **final}) + b"\n")
        await reply.end()

    return handler


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
