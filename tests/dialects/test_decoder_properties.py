"""Properties every dialect's stream decoder keeps, on the lab's real bytes (tests/fixtures/lab/):

- any split of a valid stream into reads gives the same chunks as one read;
- mutated bytes give chunks or a named error (:class:`StreamDecodeError`, :class:`StreamLimitError`), never a crash.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from latscope.dialects import DIALECTS
from latscope.dialects.base import Chunk, StreamDecodeError
from latscope.sse.limits import StreamLimitError, StreamLimits
from tests.support.httpfile import LAB, load_capture

#: Each dialect's stream as the lab sent it.
STREAMS = {
    "openai.chat": "openai.chat.stream.http",
    "openai.responses": "openai.responses.stream.http",
    "anthropic.messages": "anthropic.messages.stream.http",
    "tgi.generate": "tgi.generate.stream.http",
    "ollama.chat": "ollama.chat.stream.http",
    "ollama.generate": "ollama.generate.stream.http",
}
#: small limits, so that mutations reach the limit paths too
LIMITS = StreamLimits(max_line_bytes=1024, max_event_bytes=2048)


def test_every_registered_dialect_has_a_lab_stream_here() -> None:
    assert set(STREAMS) | {"openai.completions"} == set(DIALECTS)


def body(dialect: str) -> bytes:
    return load_capture(STREAMS[dialect], LAB).body


def run(dialect: str, pieces: list[bytes]) -> list[Chunk]:
    decoder = DIALECTS[dialect].new_decoder(limits=LIMITS)
    chunks = [chunk for piece in pieces for chunk in decoder.feed(piece)]
    return chunks + decoder.close()


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@pytest.mark.parametrize("dialect", sorted(STREAMS))
@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 1 << 16), max_size=40))
def test_any_split_gives_the_same_chunks(dialect: str, cuts: list[int]) -> None:
    data = body(dialect)
    whole = run(dialect, [data])
    assert sum(c.tokens for c in whole) == 6  # every capture streams six tokens
    assert run(dialect, split(data, cuts)) == whole


def mutate(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray(data)
    for position, action, payload in edits:
        at = position % (len(out) + 1)
        if action == 0:
            out[at:at] = payload
        elif action == 1:
            del out[at : at + len(payload) + 1]
        else:
            out[at : at + len(payload)] = payload
    return bytes(out)


EDITS = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 2), st.binary(min_size=1, max_size=8)), min_size=1)


@pytest.mark.parametrize("dialect", sorted(STREAMS))
@settings(max_examples=80, deadline=None)
@given(edits=EDITS, cuts=st.lists(st.integers(0, 1 << 16), max_size=8))
def test_mutated_bytes_give_chunks_or_a_named_error(
    dialect: str, edits: list[tuple[int, int, bytes]], cuts: list[int]
) -> None:
    data = mutate(body(dialect), edits)
    try:
        chunks = run(dialect, split(data, cuts))
    except (StreamDecodeError, StreamLimitError) as exc:
        assert str(exc)  # named: a message saying what and where
        return
    assert all(isinstance(c.text, str) and c.tokens >= 0 for c in chunks)
