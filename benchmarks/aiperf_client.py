"""The fidelity benchmark's ``aiperf`` row: NVIDIA's aiperf, run as its users run it, judged by the same lab truth.

aiperf (``pip install aiperf``, best in a virtual environment of its own: it pins its own dependencies) is started
as a subprocess against the lab: a closed loop of ``streams`` concurrent chat streams for the warm-up plus the
measured seconds, one worker process (``--workers-max 1``, as latscope's row runs one), its raw export on. The raw
export keeps every SSE message with ``perf_ns``, aiperf's ``time.perf_counter_ns()`` when the message was read,
which on Linux is CLOCK_MONOTONIC, the clock of the lab's ``latscope.sent_ns``: their difference is the delay aiperf
adds, exactly as for the other rows.

aiperf refuses to start without a Hugging Face tokenizer, and none can be downloaded here: a tiny word-level one is
written with aiperf's own ``tokenizers`` and ``transformers`` (its prompts are then words the lab counts as tokens).

Its CPU is that of its whole process tree (controller, worker, record processors …), sampled from /proc twice a
second and taken over the measured window, so its start-up is not counted.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import orjson

#: How aiperf is found: this variable, else ``aiperf`` on PATH.
AIPERF_ENV = "LATSCOPE_AIPERF"
#: The lab's send stamp inside an SSE message's JSON.
SENT_NS = re.compile(rb'"sent_ns":\s*(\d+)')
#: How often the process tree's CPU is sampled, s.
CPU_SAMPLE_S = 0.5
#: aiperf's own start-up (its services, the tokenizer, the dataset) before the first request, at most, s.
STARTUP_BUDGET_S = 90.0

_TOKENIZER_SCRIPT = """
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
words = ["[UNK]", *(f"w{i}" for i in range(4000))]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(sys.argv[1])
"""


def find_aiperf() -> str | None:
    """The aiperf executable: :data:`AIPERF_ENV`, else on PATH; None when neither."""
    explicit = os.environ.get(AIPERF_ENV)
    if explicit:
        return explicit
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory) / "aiperf"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) of ``root`` and every live descendant (Linux /proc)."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone since the listing
        pid = int(entry)
        parents[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
    total = 0.0
    for pid, used in cpu.items():
        p = pid
        while p > 1 and p != root:
            p = parents.get(p, 0)
        if p == root:
            total += used
    return total


def run_aiperf(
    aiperf: str, url: str, streams: int, seconds: float, warmup_s: float, max_tokens: int, prompt_tokens: int
) -> tuple[np.ndarray, float, int]:
    """Run aiperf against the lab at ``url`` (``…/v1``); returns the delays (ms) of the events read in the measured
    window, aiperf's CPU over that window (fraction of one core), and the events counted."""
    python = str(Path(aiperf).resolve().parent / "python")
    with tempfile.TemporaryDirectory(prefix="latscope-aiperf-") as tmp:
        tokenizer = Path(tmp) / "tokenizer"
        subprocess.run([python, "-c", _TOKENIZER_SCRIPT, str(tokenizer)], check=True, capture_output=True)
        artifacts = Path(tmp) / "artifacts"
        command = [
            aiperf, "profile",
            "--model", "lab-model",
            "--tokenizer", str(tokenizer),
            "--url", url.removesuffix("/v1"),
            "--endpoint-type", "chat",
            "--streaming",
            "--concurrency", str(streams),
            "--benchmark-duration", f"{warmup_s + seconds:g}",
            "--benchmark-grace-period", "2",
            "--isl", str(prompt_tokens),
            "--osl", str(max_tokens),
            "--osl-stddev", "0",
            "--extra-inputs", "ignore_eos:true",
            "--workers-max", "1",
            "--export-level", "raw",
            "--artifact-dir", str(artifacts),
            "--ui-type", "none",
        ]  # fmt: skip
        samples: list[tuple[int, float]] = []
        with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
            done = threading.Event()

            def sample() -> None:
                while not done.wait(CPU_SAMPLE_S):
                    samples.append((time.monotonic_ns(), _tree_cpu_s(proc.pid)))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                _, err = proc.communicate(timeout=STARTUP_BUDGET_S + warmup_s + seconds + 30)
            finally:
                done.set()
                sampler.join()
            if proc.returncode != 0:
                raise RuntimeError(f"aiperf failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}")
        pairs: list[tuple[int, int]] = []
        with open(artifacts / "profile_export_raw.jsonl", "rb") as raw:
            for line in raw:
                record = orjson.loads(line)
                for response in record.get("responses") or ():
                    for packet in response.get("packets") or ():
                        found = SENT_NS.search(str(packet.get("value", "")).encode())
                        if found:
                            pairs.append((int(response["perf_ns"]), int(found.group(1))))
    if not pairs:
        raise RuntimeError("aiperf recorded no event carrying the lab's send stamp")
    arr = np.array(pairs, dtype=np.int64)
    first = int(arr[:, 0].min())
    start, end = first + int(warmup_s * 1e9), first + int((warmup_s + seconds) * 1e9)
    keep = (arr[:, 0] >= start) & (arr[:, 0] < end)
    inside = [(t, c) for t, c in samples if start <= t <= end]
    cpu = (inside[-1][1] - inside[0][1]) / ((inside[-1][0] - inside[0][0]) / 1e9) if len(inside) >= 2 else float("nan")
    return (arr[keep, 0] - arr[keep, 1]) / 1e6, cpu, int(keep.sum())
