"""CPU time of other processes, for the benchmarks that measure a server or a cluster beside the client."""

from __future__ import annotations

import os
from pathlib import Path


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used (Linux /proc). Raises OSError once it is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
