"""Image parts of OpenAI chat requests in the lab: accepted as base64 ``data:`` URIs and decoded, priced per MB of
image (``slow-image-preprocessing`` raises the price), and refused with a 400 that names the part when malformed."""

from __future__ import annotations

import base64

import pytest

from latscope.cli.lab import settings_from_options
from latscope.diagnose.experiments.multimodal import data_uri, noise_png
from latscope.dialects.base import RequestSpec
from latscope.dialects.openai import chat_request
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.lab.faults import SLOW_IMAGE_MS_PER_MB
from latscope.lab.images import (
    DEFAULT_MS_PER_MB,
    IMAGE_TOKENS,
    ImageError,
    decode_data_uri,
    decode_image,
    pillow_available,
)
from latscope.timeline.model import Timeline
from latscope.wire import Client

COST = CostModel.default().with_overrides(prefill_base_ms=1.0, decode_base_ms=2.0)
MB = 1024 * 1024


def _with_image(url: object) -> RequestSpec:
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, url]}]
    return chat_request("lab-model", messages, 1)  # type: ignore[arg-type]


def _image_part(url: str) -> dict[str, object]:
    return {"type": "image_url", "image_url": {"url": url}}


async def _send(lab: Lab, spec: RequestSpec) -> Timeline:
    async with Client(keep_text=True) as client:
        return await client.request(spec, lab.url)


def test_a_data_uri_gives_its_media_type_and_payload() -> None:
    media_type, data = decode_data_uri("data:image/png;base64," + base64.b64encode(b"\x89PNG").decode())
    assert (media_type, data) == ("image/png", b"\x89PNG")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://example.com/cat.png", "only as data: URIs"),
        ("data:image/png;base64", "no ','"),
        ("data:text/plain;base64,aGk=", "not an image type"),
        ("data:image/png,rawbytes", "not base64"),
        ("data:image/png;base64,***", "not valid base64"),
        ("data:image/png;base64,", "empty"),
    ],
)
def test_a_malformed_data_uri_is_an_image_error_saying_why(url: str, why: str) -> None:
    with pytest.raises(ImageError, match=why):
        decode_data_uri(url)


@pytest.mark.skipif(not pillow_available(), reason="Pillow decodes the image itself")
def test_with_pillow_the_pixels_are_decoded_and_a_payload_that_is_no_image_is_refused() -> None:
    decoded = decode_image(data_uri(noise_png(30_000)))
    assert decoded.size == (100, 100) and decoded.nbytes > 30_000 - 100
    with pytest.raises(ImageError, match="not a decodable image"):
        decode_image("data:image/png;base64," + base64.b64encode(b"not a png at all").decode())


async def test_an_image_part_is_accepted_decoded_and_priced_per_mb() -> None:
    png = noise_png(MB // 2)
    async with Lab(profile="tuned", cost=COST) as lab:
        t = await _send(lab, _with_image(_image_part(data_uri(png))))
        plain = await _send(lab, chat_request("lab-model", [{"role": "user", "content": "what is this?"}], 1))
        image, text = lab.records[-2], lab.records[-1]
    assert t.ok and plain.ok
    assert image.image_bytes == len(png) and image.preprocess_ms is not None and image.preprocess_ms > 0
    assert text.image_bytes == 0 and text.preprocess_ms is None
    assert image.prompt_tokens == text.prompt_tokens + IMAGE_TOKENS  # a fixed price per image, not per byte
    assert "preprocess;dur=" in t.response_headers["server-timing"]
    assert "preprocess" not in plain.response_headers["server-timing"]


async def test_slow_image_preprocessing_spends_its_cost_per_mb_of_image() -> None:
    png = noise_png(MB)
    async with Lab(profile="tuned", faults=["slow-image-preprocessing"], cost=COST) as lab:
        t = await _send(lab, _with_image(_image_part(data_uri(png))))
        record = lab.records[-1]
    expected = SLOW_IMAGE_MS_PER_MB * len(png) / MB
    assert t.ok and record.preprocess_ms is not None
    assert expected * 0.98 <= record.preprocess_ms <= expected * 1.5, record.preprocess_ms


async def test_the_cost_per_mb_is_configurable() -> None:
    png = noise_png(MB // 4)
    async with Lab(profile="tuned", cost=COST, image_ms_per_mb=100.0) as lab:
        await _send(lab, _with_image(_image_part(data_uri(png))))
        record = lab.records[-1]
    assert record.preprocess_ms is not None and record.preprocess_ms >= 100.0 * len(png) / MB * 0.98


@pytest.mark.parametrize(
    ("part", "said"),
    [
        (_image_part("https://example.com/cat.png"), "only as data: URIs"),
        (_image_part("data:image/png;base64,%%%"), "not valid base64"),
        pytest.param(
            _image_part("data:image/png;base64," + base64.b64encode(b"GIF89a but not really").decode()),
            "not a decodable image",
            marks=pytest.mark.skipif(not pillow_available(), reason="only Pillow decodes the image itself"),
        ),
        ({"type": "image_url", "image_url": {"url": 42}}, "url"),
        ({"type": "image_url"}, "url"),
    ],
)
async def test_a_malformed_image_part_is_a_400_naming_the_part_and_the_lab_keeps_serving(
    part: dict[str, object], said: str
) -> None:
    async with Lab(profile="tuned", cost=COST) as lab:
        bad = await _send(lab, _with_image(part))
        good = await _send(lab, _with_image(_image_part(data_uri(noise_png(4096)))))
    assert bad.status == 400 and bad.error is not None and good.ok
    assert said in bad.error.message and "'messages[0].content[1].image_url.url'" in bad.error.message


def test_the_command_line_sets_the_cost_per_mb_and_the_fault_implies_its_own() -> None:
    assert settings_from_options({"image_ms_per_mb": 12.0}).image_preprocess_ms_per_mb == 12.0
    faulty = settings_from_options({"image_ms_per_mb": None, "faults": ("slow-image-preprocessing",)})
    assert faulty.image_preprocess_ms_per_mb == SLOW_IMAGE_MS_PER_MB
    assert settings_from_options({}).image_preprocess_ms_per_mb == DEFAULT_MS_PER_MB
