"""A target that misbehaves during the experiments: some requests get 429 with Retry-After, some streams are reset
half-way, the rest stream normally. It answers the model list and the first request properly, so the diagnosis
starts and then has to cope."""

from __future__ import annotations

import asyncio
import itertools

import orjson

from tests.support.stream_server import SSE_HEADERS, Handler, Received, Reply, chat_chunk, models_handler

#: Streams carry at most this many tokens (keeps the experiments short).
MAX_EVENTS = 8


def flaky_handler(*, every_429: int = 3, every_reset: int = 5, healthy_first: int = 1) -> Handler:
    """Every ``every_429``-th chat request gets 429, every ``every_reset``-th stream is reset after two events; the
    first ``healthy_first`` requests are always answered properly. 0 disables a kind of failure."""
    counter = itertools.count(1)

    async def handler(request: Received, reply: Reply) -> None:
        n = next(counter)
        try:
            body = orjson.loads(request.body)
            wanted = int(body.get("max_tokens") or 1)
        except (orjson.JSONDecodeError, AttributeError, ValueError):
            await reply.send_json(400, {"error": {"message": "bad JSON", "type": "invalid_request_error"}})
            return
        if n > healthy_first and every_429 and n % every_429 == 0:
            await reply.send_json(
                429,
                {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}},
                headers=[("retry-after", "1")],
            )
            return
        await reply.start(200, SSE_HEADERS)
        await reply.send_event(chat_chunk(role="assistant", content=""))
        for i in range(min(wanted, MAX_EVENTS)):
            await asyncio.sleep(0.002)
            if n > healthy_first and every_reset and n % every_reset == 0 and i == 2:
                reply.reset()
                return
            await reply.send_event(chat_chunk(f"tok{i} "))
        final = chat_chunk(finish_reason="length")
        final["usage"] = {"prompt_tokens": 16, "completion_tokens": wanted, "total_tokens": 16 + wanted}
        await reply.send_event(final)
        await reply.send(b"data: [DONE]\n\n")
        await reply.end()

    return models_handler(handler)
