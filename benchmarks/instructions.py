"""Client cost per event as a count of instructions: each dialect's row of the client-overhead benchmark, and each
dialect's stream decoder alone, under valgrind (cachegrind, no cache simulation).

CPU time per event on a shared 2-core VM moves by a third from one run to the next (the same code gave OpenAI chat
0.52–0.71 µs per event in four runs of ``client_overhead.py``), so a ratio such as "within 1.5× of OpenAI chat's"
is hard to tell from noise there. An instruction count is not moved by the machine: valgrind runs the program on a
simulated CPU and counts every instruction it executes, whatever else is running, so the ``decoder`` rows repeat to
within about 1 %. The ``client`` rows move more, by up to 7 % between runs: how many bytes each read of the socket
brings depends on timing even under valgrind, and each read costs instructions of its own. It is a proxy: an
instruction of ``memcpy`` is cheaper than one of the interpreter's dispatch or a cache miss, so compare counts of
like work (one dialect's decoder with another's), not counts with seconds, and check a gain in seconds too. Every
count runs with :data:`COUNTED_ENV` (a fixed hash seed, no OpenBLAS threads).

Each row is counted twice, at ``--events`` and at four times as many, and the table gives the difference divided
by the difference in events: start-up (interpreter, imports, the event loop, connecting) cancels out. The
``client`` rows run ``client_overhead.py --repeat 1 --only ROW`` (its warm-up and its measured run: two streams per
count); only the client process is counted, not its server. The ``decoder`` rows feed a stream built as
``decoders.py`` builds it, in reads of 64 KiB, to a fresh decoder, with the garbage collector off.

Needs ``valgrind`` (Debian's package); each count takes a few seconds to a minute (about 50× slower than native).

Run: ``.venv/bin/python benchmarks/instructions.py [--events 10000] [--only client|decoder]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from client_overhead import DIALECT_ROWS  # noqa: E402

BASELINE = "openai.chat"
DIALECTS = (BASELINE, *DIALECT_ROWS)
#: the client-overhead rows of each dialect (OpenAI chat's is the full recording row)
CLIENT_ROWS = {BASELINE: "wire (full recording)", **{name: f"wire (full, {name})" for name in DIALECT_ROWS}}
READ_BYTES = 65_536
#: the larger count's events over the smaller's
SCALE = 4
#: What makes two counts of the same program agree to within a few hundred thousand instructions of several
#: billion: a fixed hash seed (set and dict orders, and the work that follows them, the same each time), and no
#: OpenBLAS worker threads, which spin-wait after numpy's import for as long as the wall clock says (~0.1 s: under
#: valgrind tens of millions of instructions, a different number each run). latscope calls no BLAS routine.
COUNTED_ENV = {"PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}
_I_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def decode(dialect: str, body_path: str, events: int) -> None:
    """Feed the body of ``events`` tokens in ``body_path`` to a fresh decoder of ``dialect`` in reads of
    :data:`READ_BYTES` (the ``--decode`` mode this script runs itself in under valgrind)."""
    from latscope.dialects import get_dialect

    body = Path(body_path).read_bytes()
    reads = [body[i : i + READ_BYTES] for i in range(0, len(body), READ_BYTES)]
    gc.disable()
    decoder = get_dialect(dialect).new_decoder()
    # the chunks are kept, as a recording keeps them, but not walked: reading a run of text events back as one
    # chunk each would be the benchmark's cost, not the decoder's
    kept = [decoder.feed(data) for data in reads]
    decoder.close()
    assert sum(map(len, kept)) >= events, (dialect, sum(map(len, kept)), events)


def counted(command: list[str]) -> tuple[int, str]:
    """Instructions executed by ``command`` (valgrind's ``I refs``), run with :data:`COUNTED_ENV`, and what it
    printed on its standard output."""
    done = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *command],
        env={**os.environ, **COUNTED_ENV},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    found = _I_REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{' '.join(command)} failed under valgrind ({done.returncode}):\n{done.stderr[-2000:]}")
    return int(found[1].replace(",", "")), done.stdout


def instructions(command: list[str]) -> int:
    """Instructions executed by ``command`` (valgrind's ``I refs``)."""
    return counted(command)[0]


def per_event(counts: dict[int, int]) -> float:
    """Instructions per event from the counts at two sizes (events → instructions)."""
    (small, low), (large, high) = sorted(counts.items())
    return (high - low) / (large - small)


def client_row(dialect: str, events: int) -> float:
    """Instructions per event of the client-overhead row of ``dialect`` (two streams per run: warm-up, measured)."""
    counts = {}
    for n in (events, events * SCALE):
        command = [sys.executable, str(HERE / "client_overhead.py"), "--events", str(n), "--repeat", "1"]
        counts[2 * n] = instructions([*command, "--only", CLIENT_ROWS[dialect]])
    return per_event(counts)


def decoder_row(dialect: str, events: int, tmp: Path) -> float:
    """Instructions per event of ``dialect``'s decoder alone."""
    from decoders import body_of

    counts = {}
    for n in (events, events * SCALE):
        path = tmp / f"{dialect}-{n}.bin"
        path.write_bytes(body_of(dialect, n))
        counts[n] = instructions([sys.executable, __file__, "--decode", dialect, str(path), str(n)])
    return per_event(counts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000, help="events of the smaller count (default 10000)")
    parser.add_argument("--only", choices=["client", "decoder"], help="count only these rows")
    parser.add_argument("--decode", nargs=3, metavar=("DIALECT", "BODY", "EVENTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.decode:
        dialect, body, events = args.decode
        decode(dialect, body, int(events))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    kinds = [args.only] if args.only else ["client", "decoder"]
    print(f"instructions per event (valgrind; {args.events} and {args.events * SCALE} events, difference)")
    print(f"{'row':<9} {'dialect':<20} {'instructions/event':>19} {'÷ ' + BASELINE:>15}")
    with tempfile.TemporaryDirectory(prefix="latscope-instructions-") as tmp:
        for kind in kinds:
            base = 0.0
            for dialect in DIALECTS:
                count = (
                    client_row(dialect, args.events)
                    if kind == "client"
                    else decoder_row(dialect, args.events, Path(tmp))
                )
                base = base or count
                print(f"{kind:<9} {dialect:<20} {count:>19,.0f} {count / base:>15.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
