"""The image experiment: the same short prompt with an image part of growing size, each next to a control that
carries the same bytes as text.

The image is an incompressible PNG (random pixels, so no encoder or transport squeezes it) written here with the
standard library, sent as a base64 ``data:`` URI in an OpenAI chat ``image_url`` content part (the OpenAI chat
dialect only: the others are not tested). Every request gets an image of its own, so a server that caches
preprocessed images by content cannot answer one from its cache. The control is the same prompt with the very same
URI text in OpenAI's ``user`` field (never tokenised) — or, when the server refuses that, as JSON whitespace of the
same length — so both requests carry the same body bytes and only the image differs. ``max_tokens`` is 1; each
request goes on a new connection (both bodies start from the same TCP state), and the order within a pair
alternates over the repeats.

A small image is sent first: when the server refuses it (a text-only model answers 400), the experiment stops there
and the check says so with the status. Sizes stop growing at the first refusal of an image (413, a limit of the
server's).

A finding is confirmed before it is reported: when the check names one on the planned repeats, or cannot decide on
them, another round of :data:`REPEATS` pairs per size is sent, up to :data:`EXTRA_ROUNDS` rounds, and the check
judges all the pairs; a finding stands once a round has been added to the pairs it was named on: a server whose
parsing costs a lot of CPU per MB of body (the lab's ``slow-parse``) scatters a large request on a busy host by more
than the images really cost, enough for three pairs per size to show a false cost.
"""

from __future__ import annotations

import base64
import math
import os
import struct
import zlib

import orjson

from latscope.checks.multimodal import ImagePair, MultimodalEvidence, check_multimodal_preprocessing
from latscope.checks.samples import RequestSample
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.dialects.base import RequestSpec
from latscope.dialects.openai import CHAT_NAME
from latscope.findings import Clear, Finding
from latscope.units import BYTES_PER_MB

#: The dialects whose requests carry image parts.
SUPPORTED_DIALECTS = frozenset({CHAT_NAME})
#: Image sizes, MB: large enough that a per-MB cost of a few ms stands out of a short request's noise, small enough
#: for any server's body limit (OpenAI accepts 20 MB images; a 2 MB image is a 2.7 MB body).
SIZES_MB = (0.25, 0.5, 1.0, 2.0)
SIZES_MB_QUICK = (0.25, 0.5, 1.0)
#: Repeats per size (each an image and its control): the check keeps each size's fastest of them.
REPEATS = 3
REPEATS_QUICK = 3
#: Rounds of :data:`REPEATS` more pairs per size at most, each sent while the check names a finding not yet
#: confirmed by an added round, or cannot decide.
EXTRA_ROUNDS = 2
#: The first image, bytes: small, to find out whether the server accepts image parts at all.
PROBE_IMAGE_BYTES = 16 * 1024
PROMPT_TOKENS = 16
#: Statuses that refuse what a request carries (not an overload, not the rate limiter): the control kind is then
#: changed, or the sizes stop growing.
REFUSALS = frozenset(range(400, 429)) | frozenset(range(430, 500))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def planned_requests(ctx: Context) -> int:
    """Requests this experiment sends at most (none for a dialect without image parts)."""
    if ctx.dialect.name not in SUPPORTED_DIALECTS:
        return 0
    sizes, repeats = (SIZES_MB_QUICK, REPEATS_QUICK) if ctx.quick else (SIZES_MB, REPEATS)
    return 3 + 2 * repeats * len(sizes)  # and as many per round while a finding is unconfirmed or undecided


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def noise_png(n_bytes: int) -> bytes:
    """A square RGB PNG of random pixels, about ``n_bytes`` long (PNG, RFC 2083: 8-bit truecolour, no filter, stored
    deflate blocks: random data does not compress, and storing it keeps the size exact and the writing cheap)."""
    side = max(1, round(math.sqrt(max(1, n_bytes - 64) / 3)))
    row = 3 * side
    pixels = os.urandom(row * side)
    raw = b"".join(b"\x00" + pixels[y * row : (y + 1) * row] for y in range(side))
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 0)) + _chunk(b"IEND", b"")


def data_uri(png: bytes) -> str:
    """``png`` as a base64 ``data:`` URI (RFC 2397)."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _document(spec: RequestSpec) -> dict[str, object]:
    document = orjson.loads(spec.body)
    assert isinstance(document, dict)
    return document


def with_image(ctx: Context, spec: RequestSpec, uri: str) -> RequestSpec:
    """``spec`` (an OpenAI chat request) with ``uri`` as an image part after the text of its last message."""
    document = _document(spec)
    messages = document["messages"]
    assert isinstance(messages, list) and messages
    last = messages[-1]
    content = last.get("content")
    parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
    last["content"] = [*parts, {"type": "image_url", "image_url": {"url": uri}}]
    return ctx.with_body(spec, orjson.dumps(document))


def with_text(ctx: Context, spec: RequestSpec, uri: str, control: str) -> RequestSpec:
    """``spec`` carrying ``uri`` as text the model never reads: the ``user`` field, or JSON whitespace as long."""
    if control == "user":
        document = _document(spec)
        document["user"] = uri
        return ctx.with_body(spec, orjson.dumps(document))
    return ctx.with_body(spec, b"{" + b" " * (len(uri) + 32) + spec.body[1:])


async def run(ctx: Context, prior: Prior) -> MultimodalEvidence:
    """Run the image experiment (see the module docstring)."""
    dialect = ctx.dialect.name
    if dialect not in SUPPORTED_DIALECTS:
        return MultimodalEvidence(dialect=dialect, supported=False)
    sizes, repeats = (SIZES_MB_QUICK, REPEATS_QUICK) if ctx.quick else (SIZES_MB, REPEATS)
    pairs: list[ImagePair] = []
    async with ctx.client(quickack=True) as client:

        async def send(spec: RequestSpec, label: str) -> RequestSample:
            return await ctx.send(client, spec, label=label, new_connection=True)

        uri = data_uri(noise_png(PROBE_IMAGE_BYTES))
        probe = await send(with_image(ctx, ctx.spec(PROMPT_TOKENS, 1), uri), "image probe")
        if not probe.ok or probe.refused:
            return MultimodalEvidence(dialect=dialect, probe=probe)
        control: str | None = None
        for kind in ("user", "whitespace"):
            sample = await send(with_text(ctx, ctx.spec(PROMPT_TOKENS, 1), uri, kind), f"image control probe {kind}")
            if sample.ok and not sample.refused:
                control = kind
                break
            if sample.status not in REFUSALS:
                break  # not a refusal of the field: the other kind would fail the same way
        if control is None:
            return MultimodalEvidence(dialect=dialect, probe=probe)
        usable = list(sizes)
        unconfirmed = False  # the check named a finding on the pairs so far, before the round that confirms it
        for repeat in range(repeats * (1 + EXTRA_ROUNDS)):
            if repeat >= repeats and repeat % repeats == 0:
                so_far = MultimodalEvidence(dialect=dialect, control=control, probe=probe, pairs=tuple(pairs))
                outcome = check_multimodal_preprocessing(so_far, None)
                if isinstance(outcome, Clear) or (isinstance(outcome, Finding) and unconfirmed):
                    break
                unconfirmed = isinstance(outcome, Finding)
            for size_mb in list(usable):
                png = noise_png(int(size_mb * BYTES_PER_MB))
                uri = data_uri(png)
                image_spec = with_image(ctx, ctx.spec(PROMPT_TOKENS, 1), uri)
                text_spec = with_text(ctx, ctx.spec(PROMPT_TOKENS, 1), uri, control)
                label = f"{size_mb:g} MB #{repeat + 1}"
                if repeat % 2 == 0:
                    image = await send(image_spec, f"image {label}")
                    text = await send(text_spec, f"image control {label}")
                else:
                    text = await send(text_spec, f"image control {label}")
                    image = await send(image_spec, f"image {label}")
                pairs.append(ImagePair(len(png), image, text))
                if image.status in REFUSALS:
                    usable = [s for s in usable if s < size_mb]  # the server's limit: larger ones fail too
    return MultimodalEvidence(dialect=dialect, control=control, probe=probe, pairs=tuple(pairs))


EXPERIMENT = Experiment(
    family="multimodal",
    description="the same prompt with a 0.25–2 MB image part vs the same bytes as text: does the image cost per MB?",
    planned_requests=planned_requests,
    run=run,
)
