"""Rendering: everything latscope shows a person, one module per kind of thing shown.

* :mod:`~latscope.report.format` — durations (ms) and rates written for a person, one style per view
* :mod:`~latscope.report.waterfall` — one request's timeline as a waterfall, and a table of several requests
* :mod:`~latscope.report.probe` — a probe: its waterfalls, the requests table, the connection pool, the server's metrics
* :mod:`~latscope.report.diagnosis` — a diagnosis: where the time goes, then the findings ranked by cost
* :mod:`~latscope.report.run` — a bench run's summary: latency percentiles, throughput, goodput, health
* :mod:`~latscope.report.progress` — the live display while a bench step runs
"""

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
