"""Prometheus exposition text → snapshots, before/after deltas and histogram quantiles. Sans-IO.

A scraper only has to fetch ``/metrics`` and hand the text to :func:`parse_exposition` with the time it was taken;
everything else (deltas, means, quantiles, the per-engine adapters in :mod:`latscope.signals.engines`) works on the
resulting :class:`Snapshot` objects.

Parsing uses ``prometheus_client``'s parsers (the classic text format, and OpenMetrics when the text ends with
``# EOF``). Naming conventions handled:

* Metric names may contain ``:`` (``vllm:num_requests_running``, ``llamacpp:prompt_tokens_total``): they are legal
  in the exposition format, reserved for recording rules by convention only.
* Counters: the parser reports a counter family without its ``_total`` suffix and always names the samples
  ``<family>_total``, even when the server wrote the bare name (TGI's Rust exporter does). :meth:`Snapshot.series`
  therefore accepts either spelling.
* ``_created`` series (prometheus_client emits a ``<name>_created`` gauge family per counter and histogram in the
  classic format) are creation timestamps, not measurements, and are dropped.
* Histograms: ``<name>_bucket{le=…}`` cumulative counts, ``<name>_sum`` and ``<name>_count``. vLLM has a histogram
  whose own name ends in ``_total`` (``vllm:iteration_tokens_total``); it is a histogram all the same.

Malformed text never raises: if the whole text fails to parse, each metric block is parsed on its own and, within a
failing block, each sample line; lines that still fail are dropped with a warning.

Histogram quantiles follow Prometheus' ``histogram_quantile`` (promql/quantile.go): linear interpolation inside the
bucket holding the rank, the first bucket starting at 0, and a rank in the ``+Inf`` bucket answered with the highest
finite bound.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from prometheus_client.openmetrics import parser as _openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families as _text_families

from latscope.signals.headers import warn

# prometheus_client's OpenMetrics parser has no annotations; give it the same shape as the text parser.
_openmetrics_families: Callable[[str], Iterable[Any]] = _openmetrics_parser.text_string_to_metric_families

Labels: TypeAlias = tuple[tuple[str, str], ...]
"""A label set as sorted ``(name, value)`` pairs (hashable, order-independent)."""

Aggregation: TypeAlias = Literal["sum", "mean", "max", "min"]

# Family types whose samples only grow between resets (so a before/after difference means something).
CUMULATIVE_TYPES = frozenset({"counter", "histogram", "summary"})
# Suffixes of untyped samples that are cumulative by convention.
_CUMULATIVE_SUFFIXES = ("_total", "_count", "_sum", "_bucket")
_HEADER_LINE = re.compile(r"#\s+(HELP|TYPE)\s+(\S+)")


def labels_of(mapping: Mapping[str, str]) -> Labels:
    """A label mapping as a :data:`Labels` tuple."""
    return tuple(sorted(mapping.items()))


def _matches(labels: Labels, match: Mapping[str, str] | None) -> bool:
    if not match:
        return True
    have = dict(labels)
    return all(have.get(key) == value for key, value in match.items())


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample line: its name (with any ``_total`` / ``_bucket`` / ``_sum`` / ``_count`` suffix), labels, value."""

    name: str
    labels: Labels
    value: float


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family: its name as the parser reports it, its type, its HELP text and its samples."""

    name: str
    type: str  #: counter, gauge, histogram, summary, untyped, info, stateset, gaugehistogram or unknown
    documentation: str
    samples: tuple[Sample, ...]


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The ``q``-quantile (0 ≤ q ≤ 1) of cumulative ``(upper_bound, count)`` buckets, as Prometheus estimates it.

    Buckets may come in any order; duplicate bounds are summed; counts are forced non-decreasing (a scrape can catch
    buckets mid-update). Returns None where Prometheus returns NaN: fewer than two buckets, no ``+Inf`` bucket, or no
    observations. Where Prometheus would divide 0 by 0 (an empty bucket holding rank 0, only possible for q = 0) the
    bucket's lower bound is returned.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    merged: dict[float, float] = {}
    for bound, count in buckets:
        merged[bound] = merged.get(bound, 0.0) + count
    ordered = sorted(merged.items())
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]) or ordered[-1][0] < 0:
        return None
    monotonic: list[tuple[float, float]] = []
    running = 0.0
    for bound, count in ordered:
        running = max(running, count)
        monotonic.append((bound, running))
    observations = monotonic[-1][1]
    if observations <= 0:
        return None
    rank = q * observations
    index = next((i for i, (_, count) in enumerate(monotonic[:-1]) if count >= rank), len(monotonic) - 1)
    if index == len(monotonic) - 1:
        return monotonic[-2][0]  # the rank is in the +Inf bucket: the best answer is the highest finite bound
    upper, count = monotonic[index]
    if index == 0 and upper <= 0:
        return upper
    lower, below = (0.0, 0.0) if index == 0 else monotonic[index - 1]
    in_bucket = count - below
    if in_bucket <= 0:
        return lower
    return lower + (upper - lower) * ((rank - below) / in_bucket)


@dataclass(frozen=True, slots=True)
class Histogram:
    """A histogram's cumulative buckets ``(upper_bound, count)`` sorted by bound, its sum and its count.

    Units are the metric's own (seconds for ``*_seconds`` histograms, tokens for token histograms).
    """

    buckets: tuple[tuple[float, float], ...]
    sum: float | None
    count: float | None

    @property
    def mean(self) -> float | None:
        """sum ÷ count, or None without observations."""
        if self.sum is None or not self.count:
            return None
        return self.sum / self.count

    def quantile(self, q: float) -> float | None:
        """Estimated ``q``-quantile (see :func:`histogram_quantile`)."""
        return histogram_quantile(q, self.buckets)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The parsed state of one scrape, or the difference of two (:func:`delta`).

    ``taken_at_s`` is when the scrape was taken, on whatever clock the caller uses (seconds); for a delta it is the
    later scrape's time and ``interval_s`` the time between the two scrapes.
    """

    families: Mapping[str, Family]
    taken_at_s: float | None = None
    interval_s: float | None = None
    is_delta: bool = False
    _series: dict[str, dict[Labels, float]] = field(init=False, repr=False, compare=False)
    _types: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        series: dict[str, dict[Labels, float]] = {}
        types: dict[str, str] = {}
        for family in self.families.values():
            for sample in family.samples:
                series.setdefault(sample.name, {})[sample.labels] = sample.value
                types[sample.name] = family.type
        object.__setattr__(self, "_series", series)
        object.__setattr__(self, "_types", types)

    def sample_names(self) -> frozenset[str]:
        """Every sample name present."""
        return frozenset(self._series)

    def has_prefix(self, prefix: str) -> bool:
        """True when any sample name starts with ``prefix`` (used to recognise a server family)."""
        return any(name.startswith(prefix) for name in self._series)

    def _resolve(self, name: str) -> str | None:
        if name in self._series:
            return name
        if f"{name}_total" in self._series:
            return f"{name}_total"
        if name.endswith("_total") and name[: -len("_total")] in self._series:
            return name[: -len("_total")]
        return None

    def type_of(self, name: str) -> str | None:
        """The type of the family that holds sample ``name`` (either counter spelling accepted)."""
        resolved = self._resolve(name)
        return None if resolved is None else self._types[resolved]

    def series(self, name: str) -> Mapping[Labels, float]:
        """Every label set of sample ``name`` with its value; a counter may be named with or without ``_total``."""
        resolved = self._resolve(name)
        return {} if resolved is None else self._series[resolved]

    def value(
        self,
        name: str,
        match: Mapping[str, str] | None = None,
        *,
        aggregate: Aggregation = "sum",
    ) -> float | None:
        """Sample ``name`` aggregated over the label sets that contain ``match``; None when there is none.

        ``sum`` suits counts (requests, tokens, queue length summed over engines); ``mean`` / ``max`` suit ratios
        such as KV-cache usage, where a sum over engines would be meaningless.
        """
        values = [value for labels, value in self.series(name).items() if _matches(labels, match)]
        if not values:
            return None
        if aggregate == "sum":
            return math.fsum(values)
        if aggregate == "mean":
            return math.fsum(values) / len(values)
        return max(values) if aggregate == "max" else min(values)

    def by_label(self, name: str, label: str, match: Mapping[str, str] | None = None) -> dict[str, float]:
        """Sample ``name`` summed per value of ``label`` (e.g. requests per ``finished_reason``)."""
        out: dict[str, float] = {}
        for labels, value in self.series(name).items():
            if not _matches(labels, match):
                continue
            key = dict(labels).get(label, "")
            out[key] = out.get(key, 0.0) + value
        return out

    def histogram(self, name: str, match: Mapping[str, str] | None = None) -> Histogram | None:
        """Histogram ``name`` summed over the label sets that contain ``match`` (buckets merged by bound)."""
        buckets: dict[float, float] = {}
        for labels, value in self.series(f"{name}_bucket").items():
            if not _matches(labels, match):
                continue
            bound = _bucket_bound(dict(labels).get("le"))
            if bound is not None:
                buckets[bound] = buckets.get(bound, 0.0) + value
        total = self.value(f"{name}_sum", match)
        count = self.value(f"{name}_count", match)
        if not buckets and total is None and count is None:
            return None
        return Histogram(tuple(sorted(buckets.items())), total, count)

    def mean(self, name: str, match: Mapping[str, str] | None = None) -> float | None:
        """``_sum`` ÷ ``_count`` of histogram or summary ``name`` (its own unit), None without observations."""
        total = self.value(f"{name}_sum", match)
        count = self.value(f"{name}_count", match)
        if total is None or not count:
            return None
        return total / count


def _bucket_bound(le: str | None) -> float | None:
    if le is None:
        return None
    try:
        return float(le)  # accepts "+Inf"
    except ValueError:
        return None


def parse_exposition(
    text: str,
    *,
    taken_at_s: float | None = None,
    warnings: list[str] | None = None,
) -> Snapshot:
    """Parse Prometheus text (or OpenMetrics ending in ``# EOF``) into a :class:`Snapshot`. Never raises."""
    if re.search(r"^# EOF\s*$", text, flags=re.MULTILINE):
        try:
            return _snapshot(list(_openmetrics_families(text)), taken_at_s, warnings)
        except Exception as exc:  # the parser raises assorted error types; the text path is the fallback
            warn(warnings, f"prometheus: not valid OpenMetrics ({exc}); read as the classic text format")
            text = re.sub(r"^# EOF\s*$", "", text, flags=re.MULTILINE)
    try:
        metrics = list(_text_families(text))
    except Exception:  # any parser error: fall back to parsing block by block
        metrics = _parse_leniently(text, warnings)
    return _snapshot(metrics, taken_at_s, warnings)


def _try_parse(text: str) -> list[Any] | None:
    try:
        return list(_text_families(text))
    except Exception:  # any parser error means "this text is malformed"
        return None


def _blocks(text: str) -> list[list[str]]:
    """Split the text where a HELP/TYPE line names a different metric than the block before it."""
    blocks: list[list[str]] = []
    current: list[str] = []
    current_name: str | None = None
    for line in text.splitlines():
        header = _HEADER_LINE.match(line.strip())
        if header is not None and header.group(2) != current_name:
            if current:
                blocks.append(current)
            current, current_name = [], header.group(2)
        current.append(line)
    if current:
        blocks.append(current)
    return blocks


def _parse_leniently(text: str, warnings: list[str] | None) -> list[Any]:
    metrics: list[Any] = []
    for block in _blocks(text):
        parsed = _try_parse("\n".join(block) + "\n")
        if parsed is not None:
            metrics += parsed
            continue
        headers = [line for line in block if line.lstrip().startswith("#")]
        if _try_parse("\n".join(headers) + "\n") is None:
            warn(warnings, f"prometheus: malformed HELP/TYPE lines dropped: {headers[:2]!r}")
            headers = []
        good: list[str] = []
        for line in block:
            if line.lstrip().startswith("#") or not line.strip():
                continue
            if _try_parse("\n".join([*headers, line]) + "\n") is None:
                warn(warnings, f"prometheus: malformed line dropped: {line[:200]!r}")
            else:
                good.append(line)
        metrics += _try_parse("\n".join([*headers, *good]) + "\n") or []
    return metrics


def _snapshot(metrics: Iterable[Any], taken_at_s: float | None, warnings: list[str] | None) -> Snapshot:
    merged: dict[str, tuple[str, str, list[Sample]]] = {}
    for metric in metrics:
        name, kind, doc = str(metric.name), str(metric.type), str(metric.documentation)
        entry = merged.setdefault(name, (kind, doc, []))
        for raw in metric.samples:
            value = float(raw.value)
            if math.isnan(value):
                warn(warnings, f"prometheus: {raw.name} is NaN; sample dropped")
                continue
            entry[2].append(Sample(str(raw.name), labels_of(raw.labels), value))
    families: dict[str, Family] = {}
    for name, (kind, doc, samples) in merged.items():
        base = name[: -len("_created")] if name.endswith("_created") else None
        if base is not None and merged.get(base, ("", "", []))[0] in CUMULATIVE_TYPES:
            continue  # the creation-time gauge prometheus_client adds beside a counter or histogram
        if kind in CUMULATIVE_TYPES:
            samples = [sample for sample in samples if not sample.name.endswith("_created")]
        families[name] = Family(name, kind, doc, tuple(samples))
    return Snapshot(families, taken_at_s=taken_at_s)


def _is_cumulative(family: Family, sample: Sample) -> bool:
    if family.type in ("histogram", "summary"):
        return sample.name != family.name  # a summary's quantile samples are not cumulative
    if family.type == "counter":
        return True
    return family.type in ("untyped", "unknown") and sample.name.endswith(_CUMULATIVE_SUFFIXES)


def delta(before: Snapshot, after: Snapshot, *, warnings: list[str] | None = None) -> Snapshot:
    """``after − before`` for every cumulative series (counters, histogram and summary buckets/sums/counts), per
    label set. Gauges are left out: read them from the snapshots themselves.

    A series missing from ``before`` is new and counts from 0. A series that went down was reset (the server
    restarted); as Prometheus' ``increase()`` does, its increase is taken to be its value in ``after``, with a
    warning.
    """
    if not before.families and after.families:
        warn(warnings, "prometheus: the 'before' snapshot is empty; the delta is the servers' lifetime totals")
    families: dict[str, Family] = {}
    reset_families: set[str] = set()
    for family in after.families.values():
        samples: list[Sample] = []
        for sample in family.samples:
            if not _is_cumulative(family, sample):
                continue
            previous = before.series(sample.name).get(sample.labels)
            increase = sample.value if previous is None else sample.value - previous
            if previous is not None and increase < 0:
                reset_families.add(family.name)
                increase = sample.value
            samples.append(Sample(sample.name, sample.labels, increase))
        if samples:
            families[family.name] = Family(family.name, family.type, family.documentation, tuple(samples))
    for name in sorted(reset_families):
        warn(warnings, f"prometheus: {name} went down between the snapshots (counter reset); counted from 0")
    interval = None
    if before.taken_at_s is not None and after.taken_at_s is not None:
        interval = after.taken_at_s - before.taken_at_s
    return Snapshot(families, taken_at_s=after.taken_at_s, interval_s=interval, is_delta=True)
