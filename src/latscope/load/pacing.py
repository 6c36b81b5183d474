"""Waking up on time: absolute deadlines on the monotonic clock, a coarse sleep, then a cooperative spin.

Event-loop timers are coarse: asyncio rounds its poll timeout up to whole milliseconds and libuv (uvloop) keeps time in
milliseconds, so ``await asyncio.sleep(d)`` wakes 0–1 ms late and a loop that sleeps "one gap" per request falls
behind its rate (the 183-instead-of-200-QPS effect). :func:`sleep_until` therefore

1. works on absolute deadlines (the step's start + the arrival's offset), so lateness never accumulates;
2. sleeps on the loop timer until ``spin_ns`` before the deadline;
3. spins the rest with ``await asyncio.sleep(0)``: each turn yields to the loop, which polls sockets with a zero
   timeout, so reads are still stamped promptly while the dispatcher waits. The spin costs CPU only during the last
   ``spin_ns`` of each gap.

It returns how late it woke (ns, ≥ 0): the request's schedule lag.
"""

from __future__ import annotations

import asyncio
import time

#: How long before a deadline the coarse sleep hands over to the spin, in ns. Must exceed the loop's timer
#: granularity (1 ms in asyncio and libuv) plus a wake-up's scheduling jitter; 1.5 ms covers both on an idle core.
DEFAULT_SPIN_NS = 1_500_000


class SpinMeter:
    """Wall time spent in spin phases, ns (this process). The health monitor subtracts it from the loop thread's
    CPU, so a dispatcher spinning towards its deadlines does not read as a saturated client."""

    spin_ns: int = 0


SPIN = SpinMeter()


async def sleep_until(deadline_ns: int, spin_ns: int = DEFAULT_SPIN_NS) -> int:
    """Wait until ``time.monotonic_ns() >= deadline_ns``; return the lateness in ns (0 or more).

    ``spin_ns = 0`` disables the spin (timer only: lower CPU, ~1 ms late).
    """
    clock = time.monotonic_ns
    now = clock()
    remaining = deadline_ns - now
    if remaining > spin_ns:
        await asyncio.sleep((remaining - spin_ns) / 1e9)
        now = clock()
    if spin_ns > 0:
        spin_start = now
        while now < deadline_ns:
            await asyncio.sleep(0)
            now = clock()
        SPIN.spin_ns += now - spin_start
    else:
        while now < deadline_ns:
            # Timer-only mode: the loop may wake a little early (its clock is coarser than ours); sleep again.
            await asyncio.sleep((deadline_ns - now) / 1e9)
            now = clock()
    return now - deadline_ns
