"""The live display while a bench step runs: completed, in flight, request rate, TTFT p50/p95 so far.

It runs in the parent process (workers only send counters), so drawing never competes with a worker's event loop.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from latscope.report.format import TABLE, fmt_ms, fmt_rate

#: Seconds of history the displayed request rate averages over.
RATE_WINDOW_S = 3.0


class LiveProgress:
    """A rich ``Live`` table fed with the workers' counter snapshots. Use as a context manager."""

    def __init__(self, console: Console, steps: int, target_requests: int | None, duration_s: float | None) -> None:
        self.console = console
        self.steps = steps
        self.target_requests = target_requests
        self.duration_s = duration_s
        self._live = Live(console=console, refresh_per_second=4, transient=True)
        self._step = 0
        self._label = ""
        self._workers = 1
        self._started = time.monotonic()
        self._history: deque[tuple[float, int]] = deque()
        self._snapshots: dict[int, dict[str, Any]] = {}

    def __enter__(self) -> LiveProgress:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(None, None, None)

    def start_step(self, step: int, label: str, workers: int) -> None:
        """A new step begins."""
        self._step, self._label, self._workers = step, label, workers
        self._started = time.monotonic()
        self._history.clear()
        self._snapshots = {}
        self._live.update(self._render())

    def update(self, step: int, snapshots: dict[int, dict[str, Any]]) -> None:
        """New counters from the workers of ``step``."""
        self._snapshots = dict(snapshots)
        now = time.monotonic()
        done = sum(int(s.get("completed", 0)) for s in snapshots.values())
        self._history.append((now, done))
        while self._history and now - self._history[0][0] > RATE_WINDOW_S:
            self._history.popleft()
        self._live.update(self._render())

    def _render(self) -> Table:
        snaps = self._snapshots.values()

        def total(key: str) -> int:
            return sum(int(s.get(key, 0)) for s in snaps)

        ttft = np.array([v for s in snaps for v in s.get("ttft_recent", [])], dtype=np.float64)
        rate = None
        if len(self._history) >= 2:
            (t0, n0), (t1, n1) = self._history[0], self._history[-1]
            rate = (n1 - n0) / (t1 - t0) if t1 > t0 else None
        elapsed = time.monotonic() - self._started
        measured = total("ok") + total("errors")
        target = f"/{self.target_requests:,}" if self.target_requests else ""
        clock = f"{elapsed:.0f}s" + (f"/{self.duration_s:g}s" if self.duration_s else "")

        table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
        for col in ("step", "elapsed", "measured", "warm-up", "in flight", "errors", "req/s", "TTFT p50", "TTFT p95"):
            table.add_column(col, justify="right" if col != "step" else "left")
        table.add_row(
            f"{self._step + 1}/{self.steps} {self._label} ({self._workers} worker{'s' if self._workers > 1 else ''})",
            clock,
            f"{measured:,}{target}",
            f"{total('warmup'):,}",
            f"{total('in_flight'):,}",
            Text(f"{total('errors'):,}", style="red" if total("errors") else ""),
            fmt_rate(rate, ""),
            fmt_ms(float(np.percentile(ttft, 50)), TABLE) if ttft.size else "–",
            fmt_ms(float(np.percentile(ttft, 95)), TABLE) if ttft.size else "–",
        )
        return table
