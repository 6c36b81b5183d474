"""``multimodal-preprocessing`` on hand-built evidence: each image's TTFT against its control's (the same bytes as
text), per MB of image."""

from __future__ import annotations

from latscope.checks.multimodal import (
    MIN_EXCESS_MS_PER_MB,
    ImagePair,
    MultimodalEvidence,
    check_multimodal_preprocessing,
)
from latscope.findings import Clear, Confidence, Finding, Inconclusive, NotTested
from tests.checks.builders import REF, failed, ok

MB = 1024 * 1024
SIZES_MB = (0.25, 0.5, 1.0)


def _pairs(
    image_ms_per_mb: float,
    *,
    text_ms: float = 5.0,
    text_ms_per_mb: float = 2.0,
    jitter: tuple[float, ...] = (),
    text_jitter: tuple[float, ...] = (),
    repeats: int = 3,
) -> tuple[ImagePair, ...]:
    """``repeats`` of every size: the control grows ``text_ms_per_mb``, the image that plus ``image_ms_per_mb``
    (and a fixed 3 ms for its prompt tokens); ``jitter`` is added to the images in turn, ``text_jitter`` to the
    controls."""
    pairs: list[ImagePair] = []
    for repeat in range(repeats):
        for size in SIZES_MB:
            n = len(pairs)
            text = text_ms + text_ms_per_mb * size
            image = text + 3.0 + image_ms_per_mb * size + (jitter[n] if n < len(jitter) else 0.0)
            text += text_jitter[n] if n < len(text_jitter) else 0.0
            pairs.append(
                ImagePair(
                    int(size * MB),
                    ok(f"image {size} MB #{repeat}", ttft_after_setup_ms=image, output_tokens=1),
                    ok(f"image control {size} MB #{repeat}", ttft_after_setup_ms=text, output_tokens=1),
                )
            )
    return tuple(pairs)


def _evidence(pairs: tuple[ImagePair, ...]) -> MultimodalEvidence:
    probe = ok("image probe", ttft_after_setup_ms=6.0, output_tokens=1)
    return MultimodalEvidence(dialect="openai.chat", control="user", probe=probe, pairs=pairs)


def test_an_image_that_costs_40_ms_per_mb_beyond_its_text_is_a_finding_priced_per_mb() -> None:
    out = check_multimodal_preprocessing(_evidence(_pairs(40.0, jitter=(0.3, -0.2, 0.4, -0.3, 0.2, -0.1))), REF)
    assert isinstance(out, Finding)
    assert abs(out.cost_ms - 40.0) < 1.0 and out.confidence is Confidence.HIGH
    assert abs(out.evidence["cost_at_largest_ms"] - 40.0) < 1.0  # the largest image is 1 MB
    assert out.evidence["text_ttft_ms_per_mb"] == 2.0  # the control's own growth is reported, and not counted
    assert "per MB of image" in out.cost_basis and "off the request path" in out.fix


def test_the_text_controls_growth_is_subtracted() -> None:
    # slow parsing makes both grow 30 ms per MB; the image adds only 4 ms per MB on top: no image cost to speak of
    out = check_multimodal_preprocessing(_evidence(_pairs(4.0, text_ms_per_mb=30.0)), REF)
    assert isinstance(out, Clear) and "below" in out.reason
    assert out.evidence["text_ttft_ms_per_mb"] == 30.0


def test_a_fixed_cost_per_image_is_not_a_cost_per_mb() -> None:
    # every image costs 3 ms (its prompt tokens) whatever its size: the intercept, not the slope
    out = check_multimodal_preprocessing(_evidence(_pairs(0.0)), REF)
    assert isinstance(out, Clear)
    assert abs(out.evidence["intercept_ms"] - 3.0) < 0.01


def test_a_cost_within_the_noise_of_one_request_is_not_a_finding() -> None:
    # 25 ms per MB, 25 ms at the largest image, on a host where a request's TTFT scatters by ±15 ms
    both = (15.0, -14.0, 12.0, -15.0, 14.0, -13.0, 15.0, -12.0, 14.0)
    out = check_multimodal_preprocessing(_evidence(_pairs(25.0, jitter=both, text_jitter=both[::-1])), REF)
    assert isinstance(out, Inconclusive), out


def test_one_stalled_request_does_not_hide_the_cost() -> None:
    # a 60 ms stall of one image and of one control: each size's fastest pair still shows 40 ms per MB
    out = check_multimodal_preprocessing(_evidence(_pairs(40.0, jitter=(60.0,), text_jitter=(0, 0, 0, 0, 60.0))), REF)
    assert isinstance(out, Finding) and abs(out.cost_ms - 40.0) < 1.0, out


def test_one_control_faster_than_its_repeats_is_not_an_image_cost() -> None:
    # nginx 20 ms away, no image cost: one 1 MB control came 45 ms (a round trip) faster than its two repeats, its
    # upload riding a congestion window an earlier one had opened; the fastest line alone read 60 ms per MB
    out = check_multimodal_preprocessing(_evidence(_pairs(4.0, text_jitter=(0, 0, -45.0))), REF)
    assert isinstance(out, Inconclusive), out
    assert out.evidence["excess_ms_per_mb"] >= MIN_EXCESS_MS_PER_MB > out.evidence["excess_ms_per_mb_pair_medians"]
    assert "median pair" in out.reason


#: A diagnosis across a 20 ms path of the lab behind nginx with ``tcp_nodelay off`` (no image fault: the server
#: reported 6 ms per MB of image): ``(MB, image TTFT, control TTFT)`` in the order sent. nginx held some bodies'
#: last segment for the origin's 40 ms delayed ACK: all six 1 MB images, two of their six controls.
STALLED_AT_RANDOM = (
    (0.251, 246.586, 241.286), (0.5, 287.491, 282.34), (1.0, 372.723, 322.064),
    (0.251, 246.296, 241.201), (0.5, 288.477, 323.387), (1.0, 375.901, 366.358),
    (0.251, 244.209, 241.394), (0.5, 328.465, 280.723), (1.0, 373.322, 323.531),
    (0.251, 244.073, 240.765), (0.5, 286.753, 283.835), (1.0, 377.652, 367.986),
    (0.251, 245.772, 240.854), (0.5, 328.266, 281.279), (1.0, 375.991, 325.398),
    (0.251, 243.632, 240.95), (0.5, 287.705, 282.597), (1.0, 379.937, 322.46),
)  # fmt: skip


def test_a_stall_the_controls_show_too_is_not_an_image_cost() -> None:
    pairs = tuple(
        ImagePair(
            int(size * MB),
            ok(f"image {size} MB", ttft_after_setup_ms=image, output_tokens=1),
            ok(f"image control {size} MB", ttft_after_setup_ms=text, output_tokens=1),
        )
        for size, image, text in STALLED_AT_RANDOM
    )
    out = check_multimodal_preprocessing(_evidence(pairs), REF)
    assert isinstance(out, Inconclusive), out
    # each of the other rules passed: the fastest line and the median pairs both read over 60 ms per MB
    assert out.evidence["excess_ms_per_mb"] > 60 and out.evidence["excess_ms_per_mb_pair_medians"] > 60
    assert out.evidence["controls_as_slow_as_images"] == 2 and out.evidence["controls_at_largest"] == 6
    assert "2 of 6 controls" in out.reason and "as slow as the images" in out.reason


def test_one_stalled_control_in_four_at_the_largest_image_does_not_hide_the_cost() -> None:
    # six repeats; the second 1 MB control stalled 60 ms, past the 40 ms the image costs there
    stalled = (0, 0, 0, 0, 0, 60.0)
    out = check_multimodal_preprocessing(_evidence(_pairs(40.0, text_jitter=stalled, repeats=6)), REF)
    assert isinstance(out, Finding) and abs(out.cost_ms - 40.0) < 1.0, out
    assert out.evidence["controls_as_slow_as_images"] == 1 and out.evidence["controls_at_largest"] == 6
    # a second such control is one in three: inconclusive
    twice = check_multimodal_preprocessing(_evidence(_pairs(40.0, text_jitter=(*stalled, 0, 0, 60.0), repeats=6)), REF)
    assert isinstance(twice, Inconclusive) and "2 of 6 controls" in twice.reason, twice


def test_a_dialect_without_image_parts_is_not_tested() -> None:
    out = check_multimodal_preprocessing(MultimodalEvidence(dialect="ollama.chat", supported=False), REF)
    assert isinstance(out, NotTested) and "ollama.chat" in out.reason


def test_a_server_that_refuses_images_is_not_tested_and_says_with_which_status() -> None:
    refused = failed("image probe", status=400, message="HTTP 400: image input is not supported by this model")
    out = check_multimodal_preprocessing(MultimodalEvidence(dialect="openai.chat", probe=refused), REF)
    assert isinstance(out, NotTested)
    assert "did not accept an image" in out.reason and "HTTP 400" in out.reason and "not supported" in out.reason


def test_an_image_answered_without_a_token_is_not_accepted() -> None:
    empty = ok("image probe", ttft_after_setup_ms=None, output_tokens=0)
    out = check_multimodal_preprocessing(MultimodalEvidence(dialect="openai.chat", probe=empty), REF)
    assert isinstance(out, NotTested) and "did not accept" in out.reason


def test_images_refused_past_a_size_leave_too_few_pairs() -> None:
    pairs = list(_pairs(40.0)[:2])  # 0.25 and 0.5 MB went through; 1 MB was refused, and the sizes stopped there
    too_large = failed("image 1 MB #0", status=413, message="HTTP 413: request body too large")
    pairs.append(ImagePair(MB, too_large, ok("image control 1 MB #0", ttft_after_setup_ms=7.0, output_tokens=1)))
    out = check_multimodal_preprocessing(_evidence(tuple(pairs)), REF)
    assert isinstance(out, NotTested) and "HTTP 413" in out.reason and "2 image/text pair(s)" in out.reason


def test_the_threshold_is_a_cost_per_mb_not_the_labs() -> None:
    # just above and below the threshold, with a clean line
    above = check_multimodal_preprocessing(_evidence(_pairs(MIN_EXCESS_MS_PER_MB + 5.0)), REF)
    below = check_multimodal_preprocessing(_evidence(_pairs(MIN_EXCESS_MS_PER_MB - 5.0)), REF)
    assert isinstance(above, Finding) and isinstance(below, Clear)
