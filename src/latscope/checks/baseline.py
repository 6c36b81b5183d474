"""The baseline's evidence: the prompt-length sweep and the typical request.

No check reads it; the diagnosis derives the :class:`~latscope.checks.samples.Reference` from it and sizes the other
experiments by it. Durations in ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from latscope.checks.samples import RequestSample


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One prompt of the baseline sweep: its size (about, in tokens) and TTFT without connection setup (ms)."""

    prompt_tokens: int
    ttft_ms: float


@dataclass(frozen=True, slots=True)
class BaselineEvidence:
    """The baseline: a prompt-length sweep (``max_tokens`` 1) and the typical request (``typical``: a few
    sequential streamed requests of ``typical_max_tokens`` tokens on one fresh client, the first one cold)."""

    sweep: tuple[SweepPoint, ...] = ()
    typical: tuple[RequestSample, ...] = ()
    typical_prompt_tokens: int = 0
    typical_max_tokens: int = 0
    failures: tuple[RequestSample, ...] = ()
    max_prompt_tokens_accepted: int | None = None
