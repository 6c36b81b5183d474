"""What every chart of the HTML report shares: the phase colours (the terminal waterfall's, as web colours), the
step colours, and a figure with the same tools everywhere (pan and zoom along time, box zoom, reset, save as PNG)."""

from __future__ import annotations

from typing import Any

from bokeh.models.annotations import Title
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

#: Waterfall colours: connection setup cool, the server's time warm, streaming green (as the terminal's).
PHASE_COLORS: dict[str, str] = {
    "retry": "#e377c2",  # the earlier attempts of a retried request (bench --retries)
    "backoff": "#f7b6d2",  # the waits after them (backoff, Retry-After)
    "pool": "#8c959f",
    "dns": "#17becf",
    "connect": "#1f77b4",
    "tls": "#9467bd",
    "send": "#c9cdd2",
    "wait": "#e3b341",
    "first token": "#ff7f0e",
    "stream": "#2ca02c",
}
#: Server-reported phases: shades of red and brown, so they read as "the server" beside the client's bars.
SERVER_COLORS: dict[str, str] = {
    "parse": "#fdd0a2",
    "validate": "#fdae6b",
    "ingest": "#fd8d3c",
    "window_wait": "#f16913",
    "queue": "#d94801",
    "load": "#8c6d31",
    "slot_wait_templating": "#bd9e39",
    "prefill": "#a63603",
    "decode": "#7f2704",
    "e2e": "#bcbddc",
    "processing": "#bcbddc",
    "upstream": "#9e9ac8",
}


def phase_color(phase: str) -> str:
    """The colour of a client phase or a server phase (``server queue`` or ``queue``)."""
    name = phase.removeprefix("server ")
    return PHASE_COLORS.get(phase) or SERVER_COLORS.get(name) or "#6e7781"


def step_color(index: int) -> str:
    """A distinct colour per sweep step (or per run)."""
    return str(Category10_10[index % len(Category10_10)])


def new_figure(title: str, *, height: int = 320, **kwargs: Any) -> Any:
    """A figure stretched to the page's width with the report's tools (pan/zoom along x, box zoom, reset, save)."""
    fig = figure(
        title=title,
        height=height,
        sizing_mode="stretch_width",
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        active_drag="box_zoom",
        toolbar_location="above",
        **kwargs,
    )
    if isinstance(fig.title, Title):
        fig.title.text_font_size = "13px"
    fig.min_border_left = 60
    return fig
