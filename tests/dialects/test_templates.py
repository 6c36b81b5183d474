"""Token-event templates with holes (``latscope.dialects.templates``): what fits a learnt template, what does not, and
that the decoders give the same chunks with templates as without them, on captured bytes."""

from __future__ import annotations

import random

import orjson
import pytest

from latscope.dialects import get_dialect, jsonevents, ollama, templates
from latscope.dialects.base import Chunk
from latscope.dialects.templates import PROBE, EventTemplate
from tests.support.compiled import missing
from tests.support.httpfile import LAB, REAL, load_capture

COMPILED_FIT = templates._compiled_fit()


@pytest.fixture(autouse=True, params=["python", "compiled"])
def fit_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every case runs with the Python fit alone and with the compiled fit first (where it was built)."""
    if request.param == "compiled" and COMPILED_FIT is None:
        missing("latscope.dialects._templatefit")
    monkeypatch.setattr(templates, "_fit", None if request.param == "python" else COMPILED_FIT)
    return str(request.param)


OLLAMA = REAL.parent / "ollama"

NUMBERS = frozenset({"index", "id", "logprob"})


def tgi(index: int | str, token_id: int | str, text: str, logprob: str = "-0.25") -> str:
    return (
        f'{{"index":{index},"token":{{"id":{token_id},"text":"{text}","logprob":{logprob},"special":false}},'
        '"generated_text":null,"details":null,"top_tokens":null}'
    )


def learnt() -> EventTemplate:
    template = EventTemplate.learn(tgi(1, 25, " Deep"), " Deep", NUMBERS)
    assert template is not None
    return template


def test_the_text_and_the_named_numbers_are_holes() -> None:
    template = learnt()
    assert template.holes == 4 and template.pieces[2] == ',"text":"'
    assert orjson.loads(template.probe())["token"]["text"] == PROBE


def test_events_that_differ_in_text_and_numbers_fit() -> None:
    values = [tgi(i, i * 37, f" w{i}", f"-0.{i}5") for i in range(1, 50)] + [tgi(50, 0, "{x}:,", "1e-7")]
    assert learnt().texts(values) == [f" w{i}" for i in range(1, 50)] + ["{x}:,"]


def test_a_number_field_not_named_is_part_of_the_pieces() -> None:
    template = EventTemplate.learn(tgi(1, 25, " Deep"), " Deep", frozenset({"id"}))
    assert template is not None and template.holes == 2
    assert template.texts([tgi(1, 3, " a"), tgi(1, 4, " b")]) == [" a", " b"]
    assert template.texts([tgi(1, 3, " a"), tgi(2, 4, " b")]) is None


@pytest.mark.parametrize(
    "odd",
    [
        tgi(2, 7, 'say \\"hi\\"'),  # an escape: the parser's job
        tgi(2, 7, ""),  # no text: not a token event
        tgi(2, 7, " x", "-0.2.5"),  # not a JSON number
        tgi(2, 7, " x", "01"),
        tgi(2, 7, " x", "1,2"),
        tgi(2, 7, "tab\there"),
        tgi(2, 7, " x") + " ",
        tgi(2, 7, ' x","logprob":1,"special":true},"generated_text":null,"details":null,"top_tokens":null}'),
        tgi(2, 7, " x").replace("false", "true"),
        tgi(2, 7, " x\x00"),
        tgi(2, 7, " x")[:-1],
    ],
)
def test_an_event_of_another_shape_fails_the_whole_run(odd: str) -> None:
    assert learnt().texts([tgi(1, 5, " a"), odd, tgi(3, 9, " c")]) is None


def test_two_events_cut_in_the_wrong_places_do_not_fit() -> None:
    # the pieces all appear, the right number of times, but not one event's worth in each value
    first, second = tgi(1, 5, " a"), tgi(2, 6, " b")
    cut = first.index(',"text":"')
    assert learnt().texts([first[:cut], first[cut:] + second]) is None


def test_a_number_hole_fits_one_unread_value_that_holds_no_comma() -> None:
    template = learnt()
    for unread in ("null", "true", "0", "-1.5E+300", " 7 ", "[]", "{}"):
        assert template.texts([tgi(1, 5, " a"), tgi(2, 6, " b", unread)]) == [" a", " b"], unread
    for odd in ("[1", "[1]", "[0]", '"x"', "nul", "1 2", ""):
        assert template.texts([tgi(1, 5, " a"), tgi(2, 6, " b", odd)]) is None, odd


def test_a_bracket_and_a_comma_in_number_holes_do_not_balance_out() -> None:
    # [1 and 2] make one element of two holes, 3,4 two elements of one: the count is right, the cut is not
    assert learnt().texts([tgi(1, 5, " a"), tgi("[1", "2]", " b", "3,4")]) is None


def test_the_pieces_in_another_order_do_not_fit() -> None:
    # every piece once and the holes fine, but the token's id and logprob pieces swapped: no valid JSON
    event = tgi(2, "@ID", " b", "@LP").replace(',"token":{"id":@ID', "@P1").replace('","logprob":@LP', "@P3")
    swapped = event.replace("@P1", '","logprob":7').replace("@P3", ',"token":{"id":-0.25')
    assert learnt().texts([tgi(1, 5, " a"), swapped]) is None


def test_a_text_is_the_json_parsers_own() -> None:
    texts = [" plain", "é ü", "\u00e9", "emoji \ud83d\ude00"]
    assert learnt().texts([tgi(i, i, t) for i, t in enumerate(texts[:2])]) == texts[:2]
    # an escape is the parser's job: the run is left to it
    assert learnt().texts([tgi(i, i, t) for i, t in enumerate(texts)]) is None


def test_no_template_when_the_text_is_ambiguous_or_a_key() -> None:
    assert EventTemplate.learn('{"a":"x","b":"x"}', "x") is None
    assert EventTemplate.learn('{"x":"y"}', "x") is None
    assert EventTemplate.learn('{"a":"say \\"x\\""}', 'say "x"') is None


def stream_chunks(dialect: str, reads: list[bytes]) -> tuple[list[Chunk], list[str]]:
    decoder = get_dialect(dialect).new_decoder()
    chunks = [chunk for data in reads for chunk in decoder.feed(data)]
    return chunks + decoder.close(), decoder.warnings


def splits(body: bytes, seed: int) -> list[list[bytes]]:
    """The body in one read, event by event (blank-line cuts; lines for NDJSON), and in random reads."""
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(body)), min(20, len(body) - 1)))
    end = b"\n\n" if b"\n\n" in body else b"\n"
    events = [piece + end for piece in body.split(end) if piece]
    return [[body], events, [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]]


CAPTURES = [
    ("openai.responses", "openai.responses.stream.http", LAB),
    ("openai.responses", "llama-server.openai.responses.stream.http", REAL),
    ("anthropic.messages", "anthropic.messages.stream.http", LAB),
    ("anthropic.messages", "anthropic.messages.thinking.stream.http", LAB),
    ("anthropic.messages", "anthropic.messages.tool.stream.http", LAB),
    ("anthropic.messages", "llama-server.anthropic.messages.stream.http", REAL),
    ("tgi.generate", "tgi.generate.stream.http", LAB),
    ("ollama.chat", "ollama.chat.stream.http", LAB),
    ("ollama.generate", "ollama.generate.stream.http", LAB),
]


@pytest.mark.parametrize(("dialect", "name", "directory"), CAPTURES)
def test_captured_streams_decode_alike_with_and_without_templates(
    dialect: str, name: str, directory: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = load_capture(name, directory).body  # type: ignore[arg-type]
    body = body * 3  # repeated, so that runs of token events follow a learnt template
    for seed, reads in enumerate(splits(body, 1)):
        with_templates = stream_chunks(dialect, reads)
        monkeypatch.setattr(jsonevents, "TEMPLATE_TRIES", 0)
        monkeypatch.setattr(ollama, "TEMPLATE_TRIES", 0)
        without = stream_chunks(dialect, reads)
        monkeypatch.undo()
        assert with_templates == without, (name, seed)


@pytest.mark.parametrize("name", ["chat.stream.ndjson", "generate.stream.ndjson"])
def test_ollama_captures_decode_alike_with_and_without_templates(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    body = (OLLAMA / name).read_bytes()
    done = body.rfind(b"\n", 0, len(body) - 1) + 1
    body = body[:done] * 3 + body[done:]  # the token lines again and again, then the final line
    dialect = "ollama.chat" if name.startswith("chat") else "ollama.generate"
    for reads in splits(body, 2):
        with_templates = stream_chunks(dialect, reads)
        monkeypatch.setattr(ollama, "TEMPLATE_TRIES", 0)
        without = stream_chunks(dialect, reads)
        monkeypatch.undo()
        assert with_templates == without


def test_ollama_token_lines_are_decoded_by_their_template_though_created_at_changes() -> None:
    def line(i: int, text: str) -> bytes:
        created = f"2026-01-01T00:00:{i % 60:02d}.{i:06d}Z"
        obj = {"model": "m", "created_at": created, "message": {"role": "assistant", "content": text}, "done": False}
        return orjson.dumps(obj) + b"\n"

    texts = [f" w{i}" if i % 7 else "line\nbreak" for i in range(200)]
    decoder = ollama.OllamaStreamDecoder()
    chunks = [
        c
        for start in range(0, 200, 50)
        for c in decoder.feed(b"".join(map(line, range(start, start + 50), texts[start : start + 50])))
    ]
    assert [c.text for c in chunks] == texts and {c.tokens for c in chunks} == {1}
    assert decoder._templated > 100


def generated_stream(events: int, seed: int) -> bytes:
    """A TGI stream whose numbers vary as a real server's do, with odd texts among plain ones."""
    rng = random.Random(seed)
    odd = ['say "hi"', "back\\slash", "tab\t", "é", "", "\u2028", PROBE, '","logprob":0,"x":"']
    parts = []
    for i in range(events):
        text = rng.choice(odd) if rng.random() < 0.1 else f" w{rng.randrange(1000)}"
        token = {"id": rng.randrange(32000), "text": text, "logprob": -rng.random(), "special": False}
        obj = {"index": i + 1, "token": token, "generated_text": None, "details": None, "top_tokens": None}
        parts.append(b"data:" + orjson.dumps(obj) + b"\n\n")
    return b"".join(parts)


@pytest.mark.parametrize("seed", range(5))
def test_a_generated_stream_decodes_alike_with_and_without_templates(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = generated_stream(300, seed)
    for reads in splits(body, seed):
        with_templates = stream_chunks("tgi.generate", reads)
        monkeypatch.setattr(jsonevents, "TEMPLATE_TRIES", 0)
        without = stream_chunks("tgi.generate", reads)
        monkeypatch.undo()
        assert with_templates == without


def test_a_generated_stream_is_mostly_decoded_by_its_template() -> None:
    decoder = get_dialect("tgi.generate").new_decoder()
    body = generated_stream(300, 0)
    for start in range(0, len(body), 4096):
        decoder.feed(body[start : start + 4096])
    assert isinstance(decoder, jsonevents.JsonEventDecoder) and decoder._templated > 150
