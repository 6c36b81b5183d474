"""The caching experiment sends its repeat again when the first one came late with its tokens together (a stall on
either side, as a loaded CI host showed), against a silent cache in front of a paced generator: a real socket, and
the server's own count of what it replayed as truth."""

from __future__ import annotations

import asyncio
import hashlib

import orjson

from latscope.diagnose import diagnose
from latscope.diagnose.experiments import caching
from latscope.findings import Finding, Inconclusive, Outcome
from tests.support.stream_server import SSE_HEADERS, Handler, Received, Reply, StreamServer, chat_chunk, models_handler

PREFILL_S, TOKEN_S = 0.010, 0.004  # a generator's first token after 10 ms, then one token every 4 ms
STALL_S = 0.150  # what the stalled replays wait before sending the stored stream


class StallingCache:
    """A cache without headers in front of a deterministic paced generator: a body seen before is replayed at once
    (the stored events in one write), after :data:`STALL_S` for the first ``stalls`` replays."""

    def __init__(self, stalls: int) -> None:
        self.stalls = stalls
        self.stored: dict[bytes, bytes] = {}
        self.replays = 0

    async def __call__(self, request: Received, reply: Reply) -> None:
        stored = self.stored.get(request.body)
        if stored is not None:
            self.replays += 1
            if self.replays <= self.stalls:
                await asyncio.sleep(STALL_S)
            await reply.start(200, SSE_HEADERS)
            await reply.send(stored)
            await reply.end()
            return
        wanted = int(orjson.loads(request.body).get("max_tokens") or 1)
        word = hashlib.sha256(request.body).hexdigest()[:6]
        events = [chat_chunk(role="assistant", content="")] + [chat_chunk(f"{word}{i} ") for i in range(wanted)]
        final = chat_chunk(finish_reason="length")
        final["usage"] = {"prompt_tokens": 16, "completion_tokens": wanted, "total_tokens": 16 + wanted}
        sent: list[bytes] = []
        await reply.start(200, SSE_HEADERS)
        await asyncio.sleep(PREFILL_S)
        for i, event in enumerate([*events, final]):
            if i > 1:
                await asyncio.sleep(TOKEN_S)
            data = b"data: " + orjson.dumps(event) + b"\n\n"
            sent.append(data)
            await reply.send(data)
        sent.append(b"data: [DONE]\n\n")
        await reply.send(sent[-1])
        await reply.end()
        self.stored[request.body] = b"".join(sent)


async def _diagnose(cache: StallingCache) -> Outcome:
    handler: Handler = models_handler(cache)
    async with StreamServer(handler) as server:
        result = await diagnose(server.base_url, quick=True, only="response-cached")
    outcome = result.outcome("response-cached")
    assert outcome is not None
    return outcome


async def test_a_repeat_that_stalled_is_sent_again_and_the_replay_found() -> None:
    cache = StallingCache(stalls=1)
    outcome = await _diagnose(cache)
    assert isinstance(outcome, Finding), outcome
    assert cache.replays == 2 and outcome.evidence["repeats_sent"] == 2


async def test_a_repeat_that_stalls_every_time_is_sent_a_bounded_number_of_times_and_left_undecided() -> None:
    cache = StallingCache(stalls=caching.EXTRA_REPEATS + 1)
    outcome = await _diagnose(cache)
    assert isinstance(outcome, Inconclusive) and "stall" in outcome.reason, outcome
    assert cache.replays == 1 + caching.EXTRA_REPEATS
