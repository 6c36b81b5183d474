"""Terminal (rich) renderings of timelines: the per-request waterfall and a compact table of several requests."""

from latscope.report.waterfall import PhaseSpan, Waterfall, phase_spans, requests_table, waterfall

__all__ = ["PhaseSpan", "Waterfall", "phase_spans", "requests_table", "waterfall"]
