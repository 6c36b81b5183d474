"""Image parts of OpenAI chat requests: what the lab's gateway does with them before the engine sees the prompt.

OpenAI chat carries an image as a content part ``{"type": "image_url", "image_url": {"url": …, "detail": …}}``
(https://platform.openai.com/docs/guides/images-vision). The lab accepts only ``data:`` URIs (RFC 2397) with a
base64 payload of an ``image/*`` media type: it has no network to fetch a URL from. It decodes the payload, and
when Pillow is installed, decodes the image itself too (every pixel, as a vision model's processor must before it
resizes and normalises them); a payload that is not an image is refused with a 400 naming the part, never a crash.

What a real preprocessor then spends (resizing, normalising, patching into tensors) is simulated by the gateway: the
whole image stage, decoding included, takes :data:`DEFAULT_MS_PER_MB` per MB of image, or what decoding took when
that was longer (the ``slow-image-preprocessing`` fault raises it).
Every accepted image adds :data:`IMAGE_TOKENS` to the prompt, whatever its size (OpenAI's low-detail price).
"""

from __future__ import annotations

import base64
import binascii
import io
import time
from collections.abc import Callable
from dataclasses import dataclass

#: The tuned lab's image stage, ms per MB of image: a compiled decoder, resize and normalisation pass. Decoding
#: alone (Pillow and base64) usually takes longer; then that is the stage's time.
DEFAULT_MS_PER_MB = 1.0
#: Prompt tokens an accepted image adds (OpenAI's fixed price of a low-detail image).
IMAGE_TOKENS = 85
#: The most pixels the lab decodes in one image (Pillow's own decompression-bomb limit is twice this).
MAX_PIXELS = 64 * 1024 * 1024

try:  # Pillow is optional: without it the lab checks the data URI and its base64, not the image inside
    from PIL import Image as _PilImage
except ImportError:  # pragma: no cover - depends on the environment
    _PilImage = None  # type: ignore[assignment]


class ImageError(ValueError):
    """An image part the lab cannot accept; the message says why, for the 400 answer."""


@dataclass(frozen=True, slots=True)
class DecodedImage:
    """One accepted image: its media type, its size as sent (bytes after base64), its pixel size when it was
    decoded (None without Pillow) and how long decoding took (ns)."""

    media_type: str
    nbytes: int
    size: tuple[int, int] | None
    decode_ns: int


def pillow_available() -> bool:
    """True when the lab decodes the images themselves (Pillow is installed)."""
    return _PilImage is not None


def decode_data_uri(url: str) -> tuple[str, bytes]:
    """``(media type, payload)`` of a base64 ``data:image/…`` URI; raises :class:`ImageError` otherwise."""
    if not url.startswith("data:"):
        scheme = url.partition(":")[0] if ":" in url else "no scheme"
        raise ImageError(f"the lab accepts images only as data: URIs (it fetches nothing); got {scheme[:16]!r}")
    header, comma, payload = url[5:].partition(",")
    if not comma:
        raise ImageError("the data: URI has no ',' before its payload")
    params = header.split(";")
    media_type = params[0].strip().lower() or "text/plain"
    if not media_type.startswith("image/"):
        raise ImageError(f"the data: URI's media type is {media_type[:40]!r}, not an image type")
    if "base64" not in (p.strip().lower() for p in params[1:]):
        raise ImageError("the data: URI's payload is not base64 (';base64' is missing)")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the data: URI's payload is not valid base64") from None
    if not data:
        raise ImageError("the data: URI's payload is empty")
    return media_type, data


def decode_image(url: str, *, now_ns: Callable[[], int] = time.monotonic_ns) -> DecodedImage:
    """Decode one image part's URL (see the module docstring); raises :class:`ImageError` for one it cannot accept."""
    started = now_ns()
    media_type, data = decode_data_uri(url)
    size: tuple[int, int] | None = None
    if _PilImage is not None:
        try:
            with _PilImage.open(io.BytesIO(data)) as image:
                if image.width * image.height > MAX_PIXELS:
                    raise ImageError(f"the image is {image.width}×{image.height} pixels, over the lab's {MAX_PIXELS}")
                image.load()
                size = image.size
        except ImageError:
            raise
        except Exception as exc:  # Pillow raises many kinds for a payload that is not an image it can decode
            raise ImageError(f"the data: URI's payload is not a decodable image ({type(exc).__name__})") from None
    return DecodedImage(media_type, len(data), size, now_ns() - started)


__all__ = [
    "DEFAULT_MS_PER_MB",
    "IMAGE_TOKENS",
    "DecodedImage",
    "ImageError",
    "decode_data_uri",
    "decode_image",
    "pillow_available",
]
