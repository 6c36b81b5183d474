"""A real browser for the HTML reports: Debian's ``chromium``, headless, with networking off (every request goes to
a proxy on a closed port, so a page that fetched anything would log the failure), run once per page to read the DOM
after the scripts ran and the console messages, and once per view for a screenshot (``#view=NAME``).

Without chromium a test skips, except under CI (``CI`` or ``LATSCOPE_REQUIRE_CHROMIUM`` set), where it fails: CI
installs it (``.ci/run``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Where the console messages are: ``[pid:tid:date:LEVEL:CONSOLE:line] "message", source: url (line)`` (the format
#: of chromium's ``--enable-logging=stderr``; older builds write ``CONSOLE(line)``).
CONSOLE_LINE = re.compile(r":(?P<level>[A-Z]+):CONSOLE[:(](?P<rest>.*)$")
#: Console messages that are errors whatever level chromium logs them at.
ERROR_WORDS = re.compile(r"Uncaught|Error|ERR_|Failed to load|net::", re.IGNORECASE)
#: Enough virtual time for bokeh to render a few dozen charts.
VIRTUAL_TIME_MS = 10_000
TIMEOUT_S = 90


def chromium() -> str:
    """The chromium executable; skips (fails under CI) without one."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path is not None:
            return path
    message = "chromium is not installed (Debian: apt-get install chromium)"
    if os.environ.get("CI") or os.environ.get("LATSCOPE_REQUIRE_CHROMIUM"):
        pytest.fail(message + "; CI must have it (.ci/run installs it)")
    pytest.skip(message)


@dataclass(frozen=True, slots=True)
class PageLoad:
    """What the browser made of a page: its DOM after the scripts ran, and its console messages."""

    dom: str
    console: list[tuple[str, str]]  #: (level, message)

    @property
    def console_errors(self) -> list[str]:
        """Messages logged as errors, or naming an error, a failed load or a network failure."""
        return [msg for level, msg in self.console if level in ("ERROR", "FATAL") or ERROR_WORDS.search(msg)]

    def body_attribute(self, name: str) -> str | None:
        """An attribute of ``<body>`` as the scripts left it."""
        for attributes in re.findall(r"<body(\s[^>]*)>", self.dom):  # inlined scripts may spell "<body" too
            match = re.search(rf'{re.escape(name)}="([^"]*)"', attributes)
            if match is not None:
                return match.group(1)
        return None


def _args(browser: str, profile: Path) -> list[str]:
    return [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--proxy-server=127.0.0.1:9",  # nothing listens there: any fetch fails (and is logged)
        "--proxy-bypass-list=<-loopback>",
        f"--virtual-time-budget={VIRTUAL_TIME_MS}",
    ]


def load(page: Path, work: Path) -> PageLoad:
    """Open ``page`` and return its DOM and console."""
    browser = chromium()
    work.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [*_args(browser, work / "profile"), "--enable-logging=stderr", "--v=0", "--dump-dom", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    console = []
    for line in done.stderr.splitlines():
        match = CONSOLE_LINE.search(line)
        if match is not None:
            console.append((match.group("level"), match.group("rest")))
    return PageLoad(done.stdout, console)


def screenshot(page: Path, out: Path, *, view: str | None = None, width: int = 1400, height: int = 1000) -> Path:
    """A PNG of ``page`` (of one view when ``view`` is given) at ``width`` × ``height`` pixels."""
    browser = chromium()
    url = page.resolve().as_uri() + (f"#view={view}" if view else "")
    done = subprocess.run(
        [*_args(browser, out.parent / "profile"), f"--window-size={width},{height}", f"--screenshot={out}", url],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0 and out.exists(), done.stderr[-2000:]
    return out
