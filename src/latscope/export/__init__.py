"""Timelines as OpenTelemetry traces.

* :mod:`~latscope.export.spans` — pure: a :class:`~latscope.timeline.model.Timeline` (or a bench run's
  ``requests.parquet`` row) in, plain :class:`~latscope.export.spans.Span` records out. No I/O, no OpenTelemetry
  import: tested with timelines built by hand.
* :mod:`~latscope.export.otlp` — the thin I/O shell: measures the monotonic → wall-clock offset, turns spans into the
  official SDK's span objects and sends them with its OTLP/HTTP exporter, or writes them as OTLP JSON lines. Needs
  the ``otel`` extra (``pip install 'latscope[otel]'``).
"""
