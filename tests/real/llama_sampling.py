"""What sampling costs a llama-cpp-python server on this host, timed without latscope: the truth the diagnosis tests
compare decode-host-overhead with. It differs by build and host (0.14-0.31 ms per token on one build, 0.4-0.8 ms on a
later one here, nothing measurable on one CI host), so a test that expects the finding measures it in the same run.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from dataclasses import dataclass

from latscope.checks import sampling as sampling_check
from latscope.diagnose.experiments import sampling
from tests.real.conftest import LlamaServer


@dataclass(frozen=True)
class SamplingHere:
    """What sampling costs this server on this host, timed right after the diagnosis without latscope: whole
    non-streamed completions (no stream, no TCP pacing, no writer running ahead), greedy against sampled, pair by
    pair on one prompt each. ``costs``/``free`` are True only well clear of the material line (twice it, half of
    it); between the two, the truth is too close to the line for either answer to be wrong."""

    greedy_ms_per_token: float
    added_ms_per_token: float  # the full sampled set, median over the pairs
    logprobs_added_ms_per_token: float  # logprobs with top_logprobs alone
    line_ms_per_token: float

    @property
    def costs(self) -> bool:
        return self.added_ms_per_token >= 2 * self.line_ms_per_token

    @property
    def free(self) -> bool:
        return self.added_ms_per_token <= 0.5 * self.line_ms_per_token

    @property
    def logprobs_cost(self) -> bool:
        return self.logprobs_added_ms_per_token >= 2 * self.line_ms_per_token

    @property
    def logprobs_free(self) -> bool:
        return self.logprobs_added_ms_per_token <= 0.5 * self.line_ms_per_token


TRUTH_PAIRS = 11
TRUTH_TOKENS = 64


def _completion_ms(server: LlamaServer, prompt: str, extra: dict[str, object]) -> tuple[float, int]:
    """One non-streamed chat completion: its time from send to the whole body (ms) and its completion tokens."""
    body = {"model": server.model, "messages": [{"role": "user", "content": prompt}], "max_tokens": TRUTH_TOKENS}
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        json.dumps({**body, **extra}).encode(),
        {"Content-Type": "application/json"},
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as reply:
        usage = json.loads(reply.read())["usage"]
    return (time.perf_counter() - started) * 1000, int(usage["completion_tokens"])


def _added_per_token(server: LlamaServer, extra: dict[str, object], tag: str) -> tuple[float, float]:
    """Greedy against ``extra``, :data:`TRUTH_PAIRS` pairs in alternating order: the greedy time per token (ms,
    fastest) and the median per-token difference of the pairs whose two answers are as long."""
    greedy: list[float] = []
    added: list[float] = []
    for i in range(TRUTH_PAIRS):
        prompt = f"truth {tag} {i}: tell me about the weather in {i} towns"
        kinds = ("greedy", "sampled") if i % 2 == 0 else ("sampled", "greedy")
        timed = {k: _completion_ms(server, prompt, sampling.GREEDY if k == "greedy" else extra) for k in kinds}
        (g_ms, g_tokens), (s_ms, s_tokens) = timed["greedy"], timed["sampled"]
        if g_tokens == s_tokens > 1:
            greedy.append(g_ms / g_tokens)
            added.append((s_ms - g_ms) / g_tokens)
    assert len(added) >= 3, "too few pairs of equal length to time sampling"
    return min(greedy), statistics.median(added)


def sampling_here_now(server: LlamaServer) -> SamplingHere:
    """Time the full sampled set and logprobs alone against greedy on ``server`` (about 2 s)."""
    greedy, added = _added_per_token(server, sampling.SAMPLED, "set")
    _, logprobs = _added_per_token(server, sampling.GROUPS["logprobs"], "logprobs")
    line = max(sampling_check.MIN_ADDED_MS, sampling_check.MATERIAL_SHARE * greedy)
    return SamplingHere(greedy, added, logprobs, line)
