"""Terminal (rich) renderings of timelines: the per-request waterfall and a compact table of several requests."""

from latscope.report.waterfall import (
    PhaseSpan,
    TtftSegment,
    Waterfall,
    phase_spans,
    requests_table,
    ttft_breakdown,
    waterfall,
)

__all__ = ["PhaseSpan", "TtftSegment", "Waterfall", "phase_spans", "requests_table", "ttft_breakdown", "waterfall"]
