"""``python -m tests.fuzz TARGET SECONDS``: run a fuzz target (or ``all``) for SECONDS each; see tests/fuzz."""

from __future__ import annotations

import argparse
import time

from tests.fuzz.targets import TARGETS, run


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("target", choices=[*TARGETS, "all"])
    parser.add_argument("seconds", type=float)
    args = parser.parse_args()
    for name in TARGETS if args.target == "all" else [args.target]:
        started = time.monotonic()
        tried = run(name, args.seconds)
        took = time.monotonic() - started
        print(f"{name:>8}: {tried} inputs in {took:.1f} s, no failure", flush=True)


if __name__ == "__main__":
    main()
