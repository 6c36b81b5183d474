"""The batch-size heatmap: gauges over time drawn as block heights, the load's steps marked."""

from __future__ import annotations

from rich.console import Console

from latscope.report.batchsize import BLOCKS, batch_heatmap


def _render(renderable: object) -> str:
    console = Console(width=100, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_a_batch_that_fills_and_a_queue_that_builds_show_as_rising_cells() -> None:
    series = [(t / 10, min(4.0, t / 5), max(0.0, t / 5 - 4)) for t in range(0, 61)]
    text = _render(batch_heatmap(series, [(1, 0.0), (4, 2.0), (8, 4.0)], width=30))
    running = next(line for line in text.splitlines() if line.strip().startswith("running"))
    waiting = next(line for line in text.splitlines() if line.strip().startswith("waiting"))
    cells = running.split("running ")[1][:30]
    assert cells[0] == BLOCKS[0] and cells[-1] == BLOCKS[-1]  # empty at the start, the full batch at the end
    assert [BLOCKS.index(c) for c in cells] == sorted(BLOCKS.index(c) for c in cells)
    assert "max 4" in running and "max 8" in waiting
    assert "4@2.0s" in text and "8@4.0s" in text


def test_no_heatmap_without_a_series() -> None:
    assert batch_heatmap([], []) is None
    assert batch_heatmap([(0.0, None, None)], []) is None
