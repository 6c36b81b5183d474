"""Peak client memory under hostile streams: a line that never ends, an event that never ends, a stream that never
finishes. Each case runs the client in a fresh process against ``python -m tests.support.hostile MODE`` (its own
process), once with latscope's default limits and once with the limits lifted, and prints the client's peak RSS
(``ru_maxrss``), how the request ended and how many body bytes it read.

Usage::

    .venv/bin/python benchmarks/hostile_memory.py              # 200 MiB per endless case, ~1 minute
    .venv/bin/python benchmarks/hostile_memory.py --mb 50 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CLIENT = """
import asyncio, resource, sys
from latscope.dialects.openai import chat_request
from latscope.wire import Client, Limits, Timeouts
unbounded = sys.argv[2] == "unbounded"
limits = Limits(max_line_bytes=1 << 40, max_event_bytes=1 << 40, max_body_bytes=1 << 40) if unbounded else Limits()
async def main():
    async with Client(limits=limits, timeouts=Timeouts(total_s=float(sys.argv[3]))) as c:
        t = await c.request(chat_request("hostile-model", "hi", 16), sys.argv[1])
    kind = t.error.kind if t.error else "ok"
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, kind, t.response_body_bytes)
asyncio.run(main())
"""

CASES = [
    ("endless-line", "a 'data:' line that never ends"),
    ("endless-event", "'data:' lines, no blank line"),
    ("endless-stream", "well-formed tokens, never [DONE]"),
]


def measure(mode: str, mb: float, limits: str, max_time_s: float) -> tuple[float, str, int]:
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.support.hostile", mode, "--cap-mb", str(mb)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        done = subprocess.run(
            [sys.executable, "-c", CLIENT, url, limits, str(max_time_s)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=max_time_s + 60,
            check=True,
        )
        rss, kind, body = done.stdout.split()
        return float(rss), kind, int(body)
    finally:
        server.kill()
        server.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=200.0, help="MiB the endless cases send at most (default 200)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--max-time", type=float, default=20.0, help="the client's total timeout, s (default 20)")
    args = parser.parse_args()
    print(f"{'case':>15} {'limits':>10} {'peak RSS MiB':>22} {'ended':>10} {'body MiB read':>14}  what")
    for mode, what in CASES:
        for limits in ("default", "unbounded"):
            runs = [measure(mode, args.mb, limits, args.max_time) for _ in range(args.runs)]
            rss = [r[0] for r in runs]
            spread = (
                f"{statistics.median(rss):.1f} ({min(rss):.1f}–{max(rss):.1f})" if len(rss) > 1 else f"{rss[0]:.1f}"
            )
            kind, body = runs[-1][1], runs[-1][2]
            print(f"{mode:>15} {limits:>10} {spread:>22} {kind:>10} {body / 1048576:>14.1f}  {what}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
