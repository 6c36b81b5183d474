"""The server's batch size over time, drawn in the terminal: one row per gauge, one cell per time bin.

The data is what an experiment scraped from the target's metrics (the running-requests gauge is the batch an engine
steps over; the waiting one what queued behind it): ``(seconds, running, waiting)`` points and the times the load
changed. Each cell is the highest value the gauge had in its bin (a bin between two scrapes keeps the last value), as
one of nine block heights scaled to the row's maximum, so a batch that fills and a queue that builds show as the load
steps up; ``·`` marks time before the first scrape.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.text import Text

#: Cell heights, empty to full.
BLOCKS = " ▁▂▃▄▅▆▇█"
#: Cells per row.
WIDTH = 60


def _row(points: Sequence[tuple[float, float]], end_s: float, width: int) -> tuple[str, float]:
    """The cells of one gauge over ``0 … end_s`` and the row's maximum."""
    cells: list[float | None] = [None] * width
    for at, value in points:
        index = min(width - 1, max(0, int(at / end_s * width))) if end_s > 0 else 0
        current = cells[index]
        cells[index] = value if current is None else max(current, value)
    previous: float | None = None
    for index, cell in enumerate(cells):  # a gauge holds its value until the next scrape
        if cell is None:
            cells[index] = previous
        previous = cells[index]
    top = max((v for v in cells if v is not None), default=0.0)
    chars = []
    for cell in cells:
        if cell is None:
            chars.append("·")
        else:
            chars.append(BLOCKS[round(cell / top * (len(BLOCKS) - 1))] if top > 0 else BLOCKS[0])
    return "".join(chars), top


def batch_heatmap(
    series: Sequence[Sequence[float | None]],
    level_starts: Sequence[Sequence[object]],
    *,
    width: int = WIDTH,
    title: str = "Batch size over time (the server's gauges while the concurrency sweep ran)",
) -> RenderableType | None:
    """The running (and waiting) gauges over time with the load's steps (``(label, seconds)``) marked below; None
    without points."""
    running = [(float(p[0] or 0.0), float(p[1])) for p in series if len(p) > 1 and p[1] is not None]
    if len(running) < 2:
        return None
    waiting = [(float(p[0] or 0.0), float(p[2])) for p in series if len(p) > 2 and p[2] is not None]
    end = max(at for at, _ in running)
    rows = [Text(title, style="bold")]
    for name, points in (("running", running), ("waiting", waiting)):
        if not points:
            continue
        cells, top = _row(points, end, width)
        line = Text(f"{name:>8} ", style="dim")
        line.append(cells, style="cyan" if name == "running" else "yellow")
        line.append(f" max {top:g}", style="dim")
        rows.append(line)
    marks = [" "] * width
    labels: list[str] = []
    for start in level_starts:
        if len(start) < 2:
            continue
        at = float(str(start[1]))
        index = min(width - 1, max(0, int(at / end * width))) if end > 0 else 0
        marks[index] = "|"
        labels.append(f"{start[0]}@{at:.1f}s")
    rows.append(Text(f"{'load':>8} " + "".join(marks), style="dim"))
    rows.append(Text(f"{'':>8} step@time: " + ", ".join(labels) + f"; {end:.1f} s in all", style="dim"))
    return Group(*rows)
