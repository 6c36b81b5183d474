"""Instructions per event of ``latscope bench`` itself, one event per read: the whole client, as the fidelity
benchmark runs it, counted by valgrind instead of timed.

``fidelity.py`` measures the client's CPU per event at 1k-20k events/s, but on a shared 2-core VM the same code
moves ±15 % from one run to the next: too much to judge a 15 % target or to tell which change paid. This counts the
instructions the bench process executes instead (valgrind's cachegrind, no cache simulation), which the machine's
load does not move: three counts of one row agree to 0.3 %. A change that only alters what the counted process
imports can still move a row by 2 %, so a difference of a few per cent is no difference.

The set-up, confirmed before anything is counted:

- a lab with a slow decode step (``--step-ms``, default 25) and a few streams (``--streams``, default 4), so each
  token leaves the lab in a write of its own and, under valgrind (~50× slower), the client still reads each one
  before the next arrives: one event per read, as at fidelity's rates. The share of events that shared a read with
  the previous one is printed; a run where more than 5 % did is refused (the client fell behind: a count of that
  run would be per event of a cheaper, batched path);
- ``bench_async`` in a process of its own under valgrind: a closed loop of ``--streams`` users, ``--tokens`` tokens
  per request, full recording (Parquet parts converted on the loop, merged at the end, ``run.json``), once with
  ``--requests`` requests and once with four times as many. The difference in instructions over the difference in
  events is the cost of one more event, with its share of the request around it: start-up, imports and the first
  connections cancel out; the per-request work (building the request, the join of the server's signals, the
  conversion to Parquet) and the end-of-run merge, which grow with the run, are in it;
- ``--stamps user`` and ``--stamps kernel`` rows (kernel receive stamps where the tree being counted has them).

Counts are of user-space instructions only: the kernel's share of each read (``recvmsg``, ``epoll_wait``) is not
in them, and one instruction of the interpreter's dispatch is not one of ``memcpy``. Compare rows of like work:
one commit's client with another's on the same lab. To count another checkout's client against the same lab, start
one lab and point both at it::

    .venv/bin/latscope lab --truth --port 18099 --decode-base-ms 25 --decode-ms-per-seq 0 --prefill-base-ms 0 \\
        --prefill-ms-per-token 0 --prefill-quadratic-ms 0 &
    .venv/bin/python benchmarks/bench_instructions.py --url http://127.0.0.1:18099/v1
    PYTHONPATH=/path/to/other/checkout/src .venv/bin/python benchmarks/bench_instructions.py \\
        --url http://127.0.0.1:18099/v1

Needs ``valgrind`` (Debian's package). Each row takes one to three minutes.

Run: ``.venv/bin/python benchmarks/bench_instructions.py [--requests 8] [--stamps user,kernel]``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: more than this share of tokens read together with the token before: the client fell behind, the count is refused
MAX_COALESCED = 0.05


def run_bench(url: str, streams: int, tokens: int, requests: int, stamps: str) -> dict[str, float]:
    """One bench run (the ``--run`` mode, under valgrind): events recorded and the share read with the one before."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from client_cpu import bench_config

    from latscope.load.bench import bench_async
    from latscope.wire.loop import run

    config = bench_config(url, streams, tokens, stamps, requests=requests, server_metrics=False)
    with tempfile.TemporaryDirectory(prefix="latscope-bench-instructions-") as tmp:
        run(bench_async(config, Path(tmp)))
        events = pq.read_table(Path(tmp) / "events.parquet", columns=["kind", "seq", "coalesced"])
        # a token after the first that came in the read of the token before it (the lab writes the role chunk with
        # the first token, and the finish, usage and [DONE] with the last: those share reads by design)
        later = pc.and_(pc.equal(events["kind"].cast("string"), "content"), pc.greater(events["seq"], 1))
        tokens = events.filter(later)["coalesced"]
        shared = int(pc.sum(tokens).as_py() or 0)
        return {"events": events.num_rows, "coalesced": shared / max(1, len(tokens))}


@dataclasses.dataclass
class Row:
    stamps: str
    per_event: float  #: instructions per event
    events: tuple[int, int]  #: events of the small and the large run
    coalesced: float  #: the larger share of tokens read with the token before, of the two runs


def row(url: str, args: argparse.Namespace, stamps: str) -> Row:
    # imported here, not at the top: a --run process may hold another checkout's latscope, which instructions.py's
    # own imports may not fit
    from instructions import SCALE, counted, per_event

    counts: dict[int, int] = {}
    shares = []
    for requests in (args.requests, args.requests * SCALE):
        command = [sys.executable, __file__, "--run", url, str(args.streams), str(args.tokens), str(requests), stamps]
        executed, stdout = counted(command)
        seen = orjson.loads(stdout.strip().splitlines()[-1])
        if seen["coalesced"] > MAX_COALESCED:
            raise SystemExit(
                f"{stamps} stamps, {requests} requests: {seen['coalesced']:.1%} of the tokens shared a read with the "
                f"token before (at most {MAX_COALESCED:.0%}): the client fell behind the lab under valgrind; give the "
                "lab a longer --step-ms or fewer --streams"
            )
        counts[int(seen["events"])] = executed
        shares.append(seen["coalesced"])
    small, large = sorted(counts)
    return Row(stamps, per_event(counts), (small, large), max(shares))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a lab already running (its /v1 URL); default: start one with the options below")
    parser.add_argument("--step-ms", type=float, default=25.0, help="the lab's decode step, ms (default 25)")
    parser.add_argument("--streams", type=int, default=4, help="concurrent streams (default 4)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per request (default 64)")
    parser.add_argument("--requests", type=int, default=8, help="requests of the smaller run (default 8)")
    parser.add_argument("--stamps", default="user,kernel", help="rows to count, comma-separated (default user,kernel)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--run", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        url, streams, tokens, requests, stamps = args.run
        print(orjson.dumps(run_bench(url, int(streams), int(tokens), int(requests), stamps)).decode())
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    from instructions import SCALE

    import latscope

    print(f"latscope from {Path(latscope.__file__).parent}")
    print(
        f"instructions per event, one event per read (valgrind; {args.streams} streams × {args.tokens} tokens, "
        f"{args.requests} and {args.requests * SCALE} requests, difference)\n"
    )
    print("| stamps | instructions/event | events counted | most tokens sharing a read |")
    print("|---|---:|---:|---:|")
    rows = []
    with contextlib.ExitStack() as stack:
        url = args.url
        if url is None:
            from fidelity import lab_args

            from latscope.lab.process import LabProcess

            lab = stack.enter_context(LabProcess(truth=True, args=lab_args(args.step_ms, args.streams)))
            assert lab.url is not None
            url = lab.url
        for stamps in args.stamps.split(","):
            r = row(url, args, stamps)
            rows.append(r)
            print(f"| {r.stamps} | {r.per_event:,.0f} | {r.events[0]:,} / {r.events[1]:,} | {r.coalesced:.1%} |")
    if args.json:
        args.json.write_bytes(orjson.dumps([dataclasses.asdict(r) for r in rows], option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
