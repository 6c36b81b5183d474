"""One self-contained HTML page: bokeh's JavaScript inlined (its core only, about 1.3 MB), every chart's data in the
page, no request to the network when it opens.

A page is a list of :class:`Section` views, each a heading, a sentence on how to read it, charts (bokeh models)
and HTML (tables, findings). ``#view=NAME`` in the address shows that view alone (``report.html#view=waterfall``),
which is how a screenshot of one view is taken. A small script counts the charts bokeh rendered into
``<body data-charts-rendered>`` and lists any script error in ``#render-errors``, so a broken page says so.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bokeh.embed import components
from bokeh.model import Model
from bokeh.resources import Resources

#: Only bokeh's core bundle is inlined: the charts use no widgets, tables or maths (tables are plain HTML).
RESOURCES = Resources(mode="inline", components=["bokeh"])

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1400px;
       padding: 12px 24px 40px; color: #1f2328; background: #fff; }
h1 { font-size: 22px; margin: 8px 0 2px; } h2 { font-size: 18px; margin: 28px 0 4px; border-bottom: 1px solid #d0d7de; }
h3 { font-size: 15px; margin: 16px 0 4px; }
p.how { color: #57606a; margin: 2px 0 8px; max-width: 110ch; }
nav a { margin-right: 14px; } nav { margin: 6px 0 4px; font-size: 13px; }
table.data { border-collapse: collapse; margin: 6px 0 10px; font-size: 13px; }
table.data th, table.data td { padding: 3px 10px; border-bottom: 1px solid #eaeef2; text-align: right; }
table.data th:first-child, table.data td:first-child { text-align: left; }
table.data th { background: #f6f8fa; }
.facts td { text-align: left !important; }
.sig-worse { color: #cf222e; font-weight: 600; } .sig-better { color: #1a7f37; font-weight: 600; }
.dim { color: #6e7781; } .warn { color: #9a6700; }
.finding { border: 1px solid #d0d7de; border-left: 6px solid #cf222e; border-radius: 6px; padding: 8px 14px;
           margin: 10px 0; }
.finding.medium { border-left-color: #d4a72c; } .finding.low { border-left-color: #8c959f; }
.finding h3 { margin: 2px 0 4px; } .finding .cost { float: right; font-weight: 700; font-size: 16px; }
.finding dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 6px 0; }
.finding dt { color: #57606a; } .finding dd { margin: 0; font-family: ui-monospace, monospace; font-size: 12px;
           white-space: pre-wrap; word-break: break-word; }
ul.outcomes li { margin: 3px 0; } code { font-size: 12px; }
#render-errors { color: #cf222e; white-space: pre-wrap; }
.chart { margin: 4px 0 12px; }
"""

#: ``#view=NAME`` shows one view; errors and the count of rendered charts are written into the page.
SCRIPT = """
(function () {
  var errors = [];
  function report() {
    var box = document.getElementById("render-errors");
    if (box) { box.textContent = errors.join("\\n"); box.hidden = errors.length === 0; }
  }
  window.addEventListener("error", function (e) { errors.push(String(e.message)); report(); });
  function only() {
    var m = /view=([\\w-]+)/.exec(location.hash);
    document.querySelectorAll("section.view").forEach(function (s) {
      s.hidden = !!m && s.dataset.view !== m[1];
    });
  }
  window.addEventListener("hashchange", only);
  document.addEventListener("DOMContentLoaded", only);
  var tries = 0;
  (function count() {
    var n = window.Bokeh && Bokeh.index ? Object.keys(Bokeh.index).length : 0;
    document.body && document.body.setAttribute("data-charts-rendered", String(n));
    if (tries++ < 100 && n < Number(document.body ? document.body.dataset.chartsExpected : 0)) {
      setTimeout(count, 50);
    }
  })();
})();
"""


@dataclass(slots=True)
class Section:
    """One view of the page."""

    view: str  #: short name, the ``#view=`` anchor (``waterfall``, ``streams``, ``cdf`` …)
    title: str
    how: str = ""  #: how to read it (plain text, escaped)
    charts: list[Model] = field(default_factory=list)  #: bokeh models, drawn in order before ``html``
    html: str = ""  #: trusted HTML built by this package (every value in it escaped)


def esc(value: object) -> str:
    """``value`` as HTML text."""
    return html.escape(str(value), quote=True)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, css: str = "data") -> str:
    """An HTML table; cells are escaped unless they are :class:`Markup`."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if isinstance(c, Markup) else esc(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


class Markup(str):
    """HTML that is already safe (built from escaped parts)."""

    __slots__ = ()


def render_page(
    title: str, subtitle: str, sections: Sequence[Section], *, facts: Sequence[tuple[str, Any]] = ()
) -> str:
    """The whole page: title, facts (label, value), a navigation line, then each section."""
    models = [chart for section in sections for chart in section.charts]
    script, divs = components(models) if models else ("", ())
    divs_iter = iter(divs)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title>",
        f"<style>{CSS}</style>",
        RESOURCES.render_js(),
        script,
        "</head>",
        f'<body data-charts-expected="{len(models)}">',
        f"<script>{SCRIPT}</script>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="how">{esc(subtitle)}</p>',
        '<pre id="render-errors" hidden></pre>',
    ]
    if facts:
        parts.append(table(("", ""), ((k, v) for k, v in facts), css="data facts"))
    parts.append(
        "<nav>"
        + "".join(f'<a href="#view={esc(s.view)}">{esc(s.title)}</a>' for s in sections)
        + '<a href="#">all</a></nav>'
    )
    for section in sections:
        parts.append(f'<section class="view" data-view="{esc(section.view)}" id="{esc(section.view)}">')
        parts.append(f"<h2>{esc(section.title)}</h2>")
        if section.how:
            parts.append(f'<p class="how">{esc(section.how)}</p>')
        for _ in section.charts:
            parts.append(f'<div class="chart">{next(divs_iter)}</div>')
        parts.append(section.html)
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)
