"""``multimodal-preprocessing``: the server spends time per MB of image before the first token, beyond what the same
bytes cost it as text.

Mechanism: a vision model's server decodes every image it is sent (base64, then PNG/JPEG), resizes and normalises it
and cuts it into patches before the prompt reaches the engine; a processor that does this on the request path, in
Python or on a busy CPU, holds the first token for tens of ms per MB. The experiment sends the same short prompt with
an image part (an incompressible PNG as a ``data:`` URI) at several sizes, and next to each the control: the very same
URI text in a field the model never reads, so both requests carry the same body bytes — receiving and parsing them
cost the same — and only the image differs. Each pair's TTFT difference (``ttft_after_setup_ms``: connection setup
excluded) against the image's MB gives the cost per MB of image; a fixed cost per image (the image's prompt tokens)
goes into the line's intercept, not its slope.

Two lines, as for parsing: through every pair (slope, its standard error, the residual noise) and through each size's
fastest image minus its fastest control (a busy host only ever adds time, so the per-size minimum is the server's own
cost). A finding needs the fastest-line slope at or above :data:`MIN_EXCESS_MS_PER_MB` on a steady line
(:data:`MIN_FLOOR_R2`), the line through each size's median pair difference at or above it too (across a network
path time is also taken away: a 1 MB upload on a connection whose congestion window an earlier one opened saves
whole round trips, so one fast control can steepen the fastest line; the median of a size's pairs is the image's cost
whichever way one request strays), no more than one control in :data:`SLOW_CONTROL_SHARE` at the largest size as
slow as the images there (a delay that controls show too is not the image's: behind nginx with ``tcp_nodelay off``
the origin gets a body's last segment 40 ms late, its delayed ACK, on any request at random, and may meet every
image of a size), and the cost at
the largest image at least :data:`NOISE_MULTIPLE` × the scatter of one request here (the controls', measured in the
same run) and :data:`MIN_COST_MS`; clear needs the fastest-line slope below the threshold and the all-pairs slope's
lower edge (:data:`SLOPE_Z` standard errors) below it too; anything else is inconclusive. Not tested when the
dialect has no image parts or the server refused an image (the status is given).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import MAD_TO_SD, LineFit, fit_line, median
from latscope.findings import Clear, Confidence, Inconclusive, NotTested, Outcome
from latscope.timeline.model import PHASES_BEFORE_FIRST_TOKEN
from latscope.units import BYTES_PER_MB

MULTIMODAL_ID = "multimodal-preprocessing"

#: The experiment's images are incompressible PNGs, the fewest pixels per MB any image format carries, so a
#: compiled decoder spends only a few ms per MB of them (Pillow, base64 included: under 10 ms/MB even on a busy
#: host). Twice that worst beyond the same bytes as text is preprocessing well past
#: decoding: resizing and normalising in Python, or a processor queued behind other work.
MIN_EXCESS_MS_PER_MB = 20.0
#: The all-pairs slope's uncertainty band is ± this many standard errors (≈ 95 %).
SLOPE_Z = 2.0
#: The cost at the largest image must stand this many times above the noise of one request here: the controls'
#: scatter around their own line (a robust standard deviation, :func:`control_noise_ms`).
NOISE_MULTIPLE = 3.0
#: Each size's fastest pair must lie on a line this well (R²) for a finding: preprocessing grows with the image's
#: bytes, while a difference that jumps between sizes is something else (or a stall that hit every repeat).
MIN_FLOOR_R2 = 0.8
#: …and be at least this much, ms, to be worth a finding at all.
MIN_COST_MS = 2.0
#: At the largest size at most one control in this many may be as slow as the images (nearer the fastest image
#: than the fastest control) for a finding: a per-MB cost delays every image and no control, while a stall that
#: strikes any request (nginx with ``tcp_nodelay off`` holds a body's last segment for the origin's 40 ms delayed
#: ACK, at random) delays controls as well, and once in a while every image of a size.
SLOW_CONTROL_SHARE = 4
#: Pairs, and distinct image sizes among them, a line needs before it can say anything.
MIN_PAIRS = 4
MIN_SIZES = 3
#: Sizes within this many bytes are one size (repeats of a size differ by a few bytes of PNG framing).
SIZE_BUCKET_BYTES = 32 * 1024
#: A fit this good through each size's fastest pair is high-confidence evidence on its own.
HIGH_CONFIDENCE_R2 = 0.9


@dataclass(frozen=True, slots=True)
class ImagePair:
    """One size of the image experiment, sent twice: the short prompt with an image part of ``image_bytes`` (the
    image file's size; its ``data:`` URI is a third longer), and the control, the same prompt carrying the very same
    URI text where the model never reads it (same body bytes, no image)."""

    image_bytes: int
    image: RequestSample
    text: RequestSample


@dataclass(frozen=True, slots=True)
class MultimodalEvidence:
    """The image experiment: the same short prompt with an image part of growing size, each next to a control of
    the same bytes as text.

    Fields:
        dialect: the dialect of the run.
        supported: the dialect carries image parts (OpenAI chat ``image_url``); when False nothing was sent.
        control: how the control carries the bytes: ``"user"`` (OpenAI's ``user`` string, never tokenised) or
            ``"whitespace"`` (JSON whitespace), None when no control was accepted.
        probe: a small image sent first: does the server accept image parts at all? (None when nothing was sent.)
        pairs: every size's image and control, in the order sent; failed requests included (their samples say why).
    """

    dialect: str
    supported: bool = True
    control: str | None = None
    probe: RequestSample | None = None
    pairs: tuple[ImagePair, ...] = ()


def _usable(sample: RequestSample) -> float | None:
    """The sample's TTFT after connection setup when it completed with a token, else None."""
    if not sample.ok or sample.refused or sample.output_tokens < 1:
        return None
    return sample.ttft_after_setup_ms


def _server_before_token_ms(sample: RequestSample) -> float | None:
    """What the server reported for its phases before the first token, summed (None when it reported none)."""
    phases = [sample.server_ms[p] for p in PHASES_BEFORE_FIRST_TOKEN if p in sample.server_ms]
    return sum(phases) if phases else None


class PairedTtft(NamedTuple):
    """One pair whose two requests both completed: the image's size (MB) and both TTFTs (ms, after setup)."""

    image_mb: float
    image_ms: float
    text_ms: float

    @property
    def excess_ms(self) -> float:
        """What the image cost beyond the same bytes as text, ms."""
        return self.image_ms - self.text_ms


def paired_ttfts(pairs: tuple[ImagePair, ...]) -> list[PairedTtft]:
    """Every pair whose image and control both completed with a token, in the order sent."""
    out: list[PairedTtft] = []
    for pair in pairs:
        image, text = _usable(pair.image), _usable(pair.text)
        if image is not None and text is not None:
            out.append(PairedTtft(pair.image_bytes / BYTES_PER_MB, image, text))
    return out


def _bucket(image_mb: float) -> int:
    return round(image_mb * BYTES_PER_MB / SIZE_BUCKET_BYTES)


def _by_size(paired: list[PairedTtft]) -> list[list[PairedTtft]]:
    """``paired`` grouped by image size (:data:`SIZE_BUCKET_BYTES`), smallest first."""
    groups: dict[int, list[PairedTtft]] = {}
    for p in paired:
        groups.setdefault(_bucket(p.image_mb), []).append(p)
    return [groups[b] for b in sorted(groups)]


def _floors(groups: list[list[PairedTtft]]) -> list[tuple[float, float]]:
    """Per image size (``groups``, :func:`_by_size`), its fastest image request minus its fastest control:
    ``(MB, ms)``."""
    out: list[tuple[float, float]] = []
    for group in groups:
        fastest = min(group, key=lambda p: p.image_ms)
        out.append((fastest.image_mb, fastest.image_ms - min(p.text_ms for p in group)))
    return out


def _pair_medians(groups: list[list[PairedTtft]]) -> list[tuple[float, float]]:
    """Per image size (``groups``, :func:`_by_size`), its pairs' median difference (image minus its own control):
    ``(MB, ms)``."""
    out: list[tuple[float, float]] = []
    for group in groups:
        mid = median([p.excess_ms for p in group])
        assert mid is not None
        out.append((sum(p.image_mb for p in group) / len(group), mid))
    return out


def _controls_as_slow_as_images(group: list[PairedTtft]) -> int:
    """How many of one size's controls were as slow as an image: nearer the size's fastest image than its fastest
    control."""
    midway = (min(p.image_ms for p in group) + min(p.text_ms for p in group)) / 2
    return sum(p.text_ms >= midway for p in group)


def control_noise_ms(paired: list[PairedTtft]) -> float:
    """How much one request's TTFT scatters here, ms: the controls' deviations from their own line, as a robust
    standard deviation (1.4826 × their median absolute deviation: one stalled request does not move it)."""
    fit = fit_line([p.image_mb for p in paired], [p.text_ms for p in paired])
    if fit is None:
        return 0.0
    deviations = [abs(p.text_ms - fit.at(p.image_mb)) for p in paired]
    return MAD_TO_SD * (median(deviations) or 0.0)


def _server_slope(pairs: tuple[ImagePair, ...]) -> float | None:
    """The slope (ms per MB of image) of the server's own before-first-token report, image minus control; None
    unless it reported on every pair used."""
    points: list[tuple[float, float]] = []
    for pair in pairs:
        if _usable(pair.image) is None or _usable(pair.text) is None:
            continue
        image, text = _server_before_token_ms(pair.image), _server_before_token_ms(pair.text)
        if image is None or text is None:
            return None
        points.append((pair.image_bytes / BYTES_PER_MB, image - text))
    fit = fit_line([x for x, _ in points], [y for _, y in points]) if len(points) >= MIN_PAIRS else None
    return None if fit is None else fit.slope


def _evidence(ev: MultimodalEvidence, fit: LineFit, floor: LineFit, paired: list[PairedTtft]) -> dict[str, Any]:
    sizes = [p.image_mb for p in paired]
    text_fit = fit_line(sizes, [p.text_ms for p in paired])
    image_fit = fit_line(sizes, [p.image_ms for p in paired])
    return {
        "control": ev.control,
        "pairs": len(paired),
        "largest_image_mb": round(max(sizes), 3),
        "excess_ms_per_mb": round(floor.slope, 3),
        "excess_ms_per_mb_all_pairs": round(fit.slope, 3),
        "excess_ms_per_mb_se": None if fit.slope_se is None else round(fit.slope_se, 3),
        "intercept_ms": round(floor.intercept, 3),
        "r2_fastest": round(floor.r2, 4),
        "residual_sd_ms": round(fit.residual_sd, 3),
        "image_ttft_ms_per_mb": None if image_fit is None else round(image_fit.slope, 3),
        "text_ttft_ms_per_mb": None if text_fit is None else round(text_fit.slope, 3),
        "threshold_ms_per_mb": MIN_EXCESS_MS_PER_MB,
        "points": [[round(p.image_mb, 3), round(p.image_ms, 3), round(p.text_ms, 3)] for p in paired],
    }


@dataclass(frozen=True, slots=True)
class _Cost:
    """The image's cost: ``fit`` (the line through every pair) and ``floor`` (through each size's fastest pair, the
    decision and the cost), the largest image (MB), and the control's TTFT per MB as text (ms/MB, None when it has
    no line)."""

    fit: LineFit
    floor: LineFit
    largest: float
    text_rate: float | None

    @property
    def excess(self) -> float:
        """ms per MB of image beyond the same bytes as text, on each size's fastest pair."""
        return self.floor.slope

    @property
    def at_largest(self) -> float:
        """That cost at the largest image (ms)."""
        return self.excess * self.largest


def check_multimodal_preprocessing(ev: MultimodalEvidence, reference: Reference | None) -> Outcome:
    """Finding when a MB of image costs the server at least :data:`MIN_EXCESS_MS_PER_MB` before the first token
    beyond the same bytes as text, clearly above the noise (see the module docstring)."""
    unmeasured = _unmeasured(ev)
    if unmeasured is not None:
        return unmeasured
    paired = paired_ttfts(ev.pairs)
    groups = _by_size(paired)
    if len(paired) < MIN_PAIRS or len(groups) < MIN_SIZES:
        return _too_few_pairs(ev, paired, groups)
    fit = fit_line([p.image_mb for p in paired], [p.excess_ms for p in paired])
    floors = _floors(groups)
    floor = fit_line([x for x, _ in floors], [y for _, y in floors])
    if fit is None or floor is None or fit.slope_se is None:
        return Inconclusive(MULTIMODAL_ID, "the image sizes did not span enough for a line; run again")
    evidence = _evidence(ev, fit, floor, paired)
    reported = _server_slope(ev.pairs)
    if reported is not None:
        evidence["server_reported_ms_per_mb"] = round(reported, 3)
    c = _Cost(fit, floor, max(p.image_mb for p in paired), evidence["text_ttft_ms_per_mb"])
    evidence["cost_at_largest_ms"] = round(c.at_largest, 3)
    clear = _clear(c, evidence)
    if clear is not None:
        return clear
    noise = control_noise_ms(paired)
    evidence["control_noise_ms"] = round(noise, 3)
    medians = _pair_medians(groups)
    typical = fit_line([x for x, _ in medians], [y for _, y in medians])
    typical_slope = c.excess if typical is None else typical.slope
    evidence["excess_ms_per_mb_pair_medians"] = round(typical_slope, 3)
    undecided = _undecided(c, groups, typical_slope, noise, evidence)
    if undecided is not None:
        return undecided
    return _finding(reference, c, noise, evidence)


def _unmeasured(ev: MultimodalEvidence) -> NotTested | None:
    """Why no image could be compared with its control (no image parts, the probe refused, no control accepted),
    None when one could."""
    if not ev.supported:
        return NotTested(
            MULTIMODAL_ID, f"images are sent only as OpenAI chat image_url parts; the {ev.dialect} dialect has none"
        )
    probe = ev.probe
    if probe is None or _usable(probe) is None:
        if probe is None:
            why = "no image was sent"
        else:
            described = failures.describe(probe)
            if probe.status is not None and not described.startswith("HTTP"):
                described = f"HTTP {probe.status}: {described}"
            why = f"the server did not accept an image part ({described})"
        return NotTested(MULTIMODAL_ID, why)
    if ev.control is None:
        return NotTested(MULTIMODAL_ID, "the server accepted no control carrying the same bytes as text")
    return None


def _too_few_pairs(ev: MultimodalEvidence, paired: list[PairedTtft], groups: list[list[PairedTtft]]) -> NotTested:
    """Too few pairs, or sizes, completed for a line: why."""
    images = [p.image for p in ev.pairs]
    failed = failures.summarise([*images, *(p.text for p in ev.pairs)], total=2 * len(ev.pairs))
    refused = [s for s in images if s.status is not None and 400 <= s.status < 500]
    reason = f"only {len(paired)} image/text pair(s) over {len(groups)} size(s) completed"
    if refused:
        reason += f"; the server refused larger images (HTTP {refused[0].status})"
    return NotTested(MULTIMODAL_ID, reason + (f" ({failed})" if failed else ""))


def _clear(c: _Cost, evidence: dict[str, Any]) -> Clear | None:
    """Clear when both lines are below :data:`MIN_EXCESS_MS_PER_MB` (the all-pairs one at its lower edge)."""
    assert c.fit.slope_se is not None
    excess = c.excess
    low = c.fit.slope - SLOPE_Z * c.fit.slope_se
    if excess < MIN_EXCESS_MS_PER_MB and low < MIN_EXCESS_MS_PER_MB:
        return Clear(
            MULTIMODAL_ID,
            f"a MB of image costs the server {excess:.2f} ms before the first token beyond the same bytes as text "
            f"({c.text_rate} ms/MB as text), below {MIN_EXCESS_MS_PER_MB:g} ms/MB",
            evidence,
        )
    return None


def _undecided(
    c: _Cost, groups: list[list[PairedTtft]], typical_slope: float, noise: float, evidence: dict[str, Any]
) -> Inconclusive | None:
    """Inconclusive when the cost is not in a line above the threshold, not on the median pairs, met by the
    controls too, or within the noise; None when it makes a finding."""
    fit, floor, excess, largest, at_largest = c.fit, c.floor, c.excess, c.largest, c.at_largest
    assert fit.slope_se is not None
    if excess < MIN_EXCESS_MS_PER_MB or floor.r2 < MIN_FLOOR_R2:
        return Inconclusive(
            MULTIMODAL_ID,
            f"a MB of image costs {excess:.2f} ms on each size's fastest pair (R² {floor.r2:.2f}) and "
            f"{fit.slope:.2f} ± {SLOPE_Z * fit.slope_se:.2f} ms over all pairs (threshold "
            f"{MIN_EXCESS_MS_PER_MB:g} ms/MB): more repeats or larger images would settle it",
            evidence,
        )
    if typical_slope < MIN_EXCESS_MS_PER_MB:
        return Inconclusive(
            MULTIMODAL_ID,
            f"a MB of image costs {excess:.2f} ms on each size's fastest pair but {typical_slope:.2f} ms on each "
            f"size's median pair (threshold {MIN_EXCESS_MS_PER_MB:g} ms/MB): some request strayed from its repeats "
            "by more than the cost (a connection's congestion window saves whole round trips on a large upload); "
            "more repeats would settle it",
            evidence,
        )
    slow_controls, controls = _controls_as_slow_as_images(groups[-1]), len(groups[-1])
    evidence["controls_as_slow_as_images"] = slow_controls
    evidence["controls_at_largest"] = controls
    if slow_controls > controls // SLOW_CONTROL_SHARE:
        return Inconclusive(
            MULTIMODAL_ID,
            f"a MB of image costs {excess:.2f} ms on each size's fastest pair, but at the largest image "
            f"({largest:.2f} MB) {slow_controls} of {controls} controls carrying no image were as slow as the images: "
            "a delay the controls show too (a proxy holding a body's last segment for a delayed ACK stalls any "
            "request), which every image may have met; more repeats would settle it",
            evidence,
        )
    if at_largest < max(NOISE_MULTIPLE * noise, MIN_COST_MS):
        return Inconclusive(
            MULTIMODAL_ID,
            f"a MB of image costs {excess:.2f} ms, but at the largest image ({largest:.2f} MB) that is "
            f"{at_largest:.1f} ms, within {NOISE_MULTIPLE:g}× the controls' own scatter ({noise:.1f} ms): larger "
            "images would settle it",
            evidence,
        )
    return None


def _finding(reference: Reference | None, c: _Cost, noise: float, evidence: dict[str, Any]) -> Outcome:
    """The finding: ms per MB of image."""
    excess, largest, at_largest = c.excess, c.largest, c.at_largest
    steady = c.floor.r2 >= HIGH_CONFIDENCE_R2 and c.fit.r2 >= HIGH_CONFIDENCE_R2
    confidence = Confidence.HIGH if steady else Confidence.MEDIUM
    return costed_finding(
        MULTIMODAL_ID,
        excess,
        reference,
        cost_basis=(
            f"ms per MB of image before the first token, beyond the same bytes sent as text (a {largest:.2f} MB "
            f"image: {at_largest:.1f} ms); every request pays it per MB of image it carries"
        ),
        evidence=evidence,
        rule=(
            f"TTFT grows {excess:.2f} ms per MB of image beyond the same bytes as text ({c.text_rate} ms/MB as text), "
            f"≥ {MIN_EXCESS_MS_PER_MB:g} ms/MB and {at_largest:.1f} ms at {largest:.2f} MB, ≥ {NOISE_MULTIPLE:g}× "
            f"the controls' own scatter ({noise:.1f} ms)"
        ),
        confidence=confidence,
    )
