"""Stream events are recorded as columns (EventLog), and a decoder's TextRun goes into them without a chunk per event.

What must hold: a timeline reads back exactly the events that were recorded, whichever way the decoder handed them
over (a list of chunks, one chunk per read, or a TextRun); the recorded events keep no object of their own that the
garbage collector tracks (what made a long stream's recording costly); the columns survive a pickle and a
serialised round trip.
"""

from __future__ import annotations

import gc
import pickle

import orjson
import pytest

from latscope.dialects.base import Chunk, TextRun
from latscope.dialects.openai import OpenAIStreamDecoder, chat_request
from latscope.timeline.model import EventKind, EventLog, StreamEvent, Timeline
from latscope.timeline.serialize import timeline_from_dict, timeline_to_dict
from latscope.wire import Client
from latscope.wire.exchange import Exchange
from tests.support.stream_server import Received, Reply, StreamServer, chat_chunk

C, R, F = EventKind.CONTENT, EventKind.REASONING, EventKind.FINISH


class Replay:
    """A decoder that hands over prepared results, one per feed."""

    def __init__(self, results: list[list[Chunk] | TextRun]) -> None:
        self.results = results
        self.warnings: list[str] = []

    def feed(self, data: bytes) -> list[Chunk] | TextRun:
        return self.results.pop(0)

    def close(self) -> list[Chunk]:
        return []


def _chunk(kind: EventKind, text: str, finish: str | None = None, choice: int = 0) -> Chunk:
    return Chunk(kind, text, 1, finish, None, None, None, None, None, choice)


async def _recorded(results: list[list[Chunk] | TextRun]) -> Timeline:
    t = Timeline(started_ns=1)
    exchange = Exchange(t, decoder=Replay(results), streamed=True, keep_text=True)
    exchange.response(200, [("content-type", "text/event-stream")], 10)
    for n in range(len(exchange._decoder.results)):  # type: ignore[union-attr]
        exchange.body(b"data: {}\n\n", 100 + n, n)
    exchange.end(1_000)
    return t


RUNS = [
    TextRun(R, ["think", "ing"]),
    TextRun(C, ["a", "bb", "ccc"]),
    TextRun(C, ["d", "e"], finish_reason="stop", choice=1),
]


async def test_a_text_run_is_recorded_as_the_chunks_it_stands_for() -> None:
    as_runs = await _recorded(list(RUNS))
    as_lists = await _recorded([list(run) for run in RUNS])
    as_ones = await _recorded([[chunk] for run in RUNS for chunk in run])
    assert as_runs.events == as_lists.events
    assert [e[2:] for e in as_runs.events] == [e[2:] for e in as_ones.events]  # kinds, sizes, stamps, choices
    assert [e.at_ns for e in as_runs.events] == [100, 100, 101, 101, 101, 102, 102]
    for t in (as_runs, as_lists, as_ones):
        assert (t.first_token_ns, t.last_token_ns, t.finish_reason) == (100, t.last_token_ns, "stop")
        assert t.output_text == "thinkingabbcccde"
    assert (as_runs.first_text_ns, as_lists.first_text_ns) == (101, 101)  # reasoning came first


def test_a_text_run_reads_as_its_chunks() -> None:
    run = TextRun(C, ["x", "yz"], finish_reason=None, choice=2)
    expected = [_chunk(C, "x", choice=2), _chunk(C, "yz", choice=2)]
    assert run == expected and list(run) == expected and run[1] == expected[1] and run[:1] == expected[:1]
    assert len(run) == 2 and run != [expected[0]]
    merged: list[Chunk] = [_chunk(F, "")]
    merged += run  # what a decoder does with a run among other events
    assert merged[1:] == expected


def test_an_event_log_reads_back_what_was_appended() -> None:
    events = [StreamEvent(5, 0, C, 3, 1, 4, 0), StreamEvent(6, 1, EventKind.DONE, 0, 0, None, 1)]
    log = EventLog(events)
    assert list(log) == events and log == events and log[1] == events[1] and log[-1] == events[-1]
    assert log[0:1] == events[:1] and len(log) == 2 and log.kind == [C, EventKind.DONE]
    assert pickle.loads(pickle.dumps(log)) == log
    assert Timeline(events=events).events == log  # a list given to a timeline becomes its columns
    t = Timeline(started_ns=1, events=events)
    assert timeline_from_dict(timeline_to_dict(t)).events == log


@pytest.mark.parametrize("events", [3, 2_000])
async def test_a_recorded_stream_keeps_no_tracked_object_per_event(events: int) -> None:
    # every event in a few large writes: the reads carry hundreds of events, the decoder's template path hands
    # them over as runs
    async def fast(request: Received, reply: Reply) -> None:
        await reply.start(200, [("content-type", "text/event-stream")])
        body = b"".join(b"data: " + orjson.dumps(chat_chunk(f"t{i}")) + b"\n\n" for i in range(events))
        for at in range(0, len(body), 64 * 1024):
            await reply.send(body[at : at + 64 * 1024])
        await reply.send(b"data: [DONE]\n\n")
        await reply.end()

    async with StreamServer(fast) as server, Client() as client:
        t = await client.request(chat_request("m", "hi", events), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.ok, t.error
    assert sum(t.events.tokens) == events and sum(t.events.text_chars) == sum(len(f"t{i}") for i in range(events))
    tracked = [x for column in t.events.columns() for x in column if gc.is_tracked(x)]
    assert all(isinstance(x, EventKind) for x in tracked)  # only the shared kinds: nothing made per event
