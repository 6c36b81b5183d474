"""Fixes in the words of the engine that answered: its own flags, for the findings an engine's settings decide.

The catalogue's fix (:data:`latscope.findings.CATALOGUE`) is written for any server ("enable chunked prefill"); when
the diagnosis knows which engine served the requests (its ``/metrics`` family, or its ``server`` header), the
finding's fix names that engine's knobs instead — a vLLM user is told of ``--long-prefill-token-threshold``, which
vLLM has, not of chunked prefill, which it already runs. Every flag here was checked against the engine's own
``--help``: vLLM 0.32 (``python -m vllm.entrypoints.openai.api_server --help=all``) and llama.cpp's ``llama-server``
(the release ``.ci/run`` builds). Engines whose ``--help`` could not be read here (SGLang, TGI) keep the catalogue's
words.
"""

from __future__ import annotations

#: finding id → engine family (:func:`latscope.signals.detect_family`'s names) → the fix in that engine's words.
ENGINE_FIXES: dict[str, dict[str, str]] = {
    "queue-head-of-line": {
        "vllm": (
            "vLLM schedules first come, first served and lets one long prompt take a whole step's token budget "
            "(--max-num-batched-tokens): cap a long prompt's share of each step with --long-prefill-token-threshold N "
            "(or --long-prefill-token-threshold-adaptive), lower --max-num-batched-tokens, or serve short requests "
            "first with --scheduling-policy priority and a per-request `priority` (or the X-Vllm-Priority header). "
            "Chunked prefill is already on."
        ),
        "llamacpp": (
            "llama-server prefills one slot's prompt at a time in batches of -b/-ub tokens: more slots (--parallel N, "
            "with --ctx-size sized for N contexts) let short prompts start beside long ones, and a smaller "
            "--ubatch-size shortens each step a long prefill holds."
        ),
    },
    "capacity-saturation": {
        "vllm": (
            "vLLM runs at most --max-num-seqs requests at once and queues the rest (vllm:num_requests_waiting): raise "
            "--max-num-seqs while the KV cache has room (vllm:kv_cache_usage_perc), or add replicas."
        ),
        "llamacpp": (
            "llama-server runs one request per slot and defers the rest (llamacpp:requests_deferred): raise --parallel "
            "(and --ctx-size with it: the slots share it), or add replicas."
        ),
    },
    "prefix-cache-miss": {
        "vllm": (
            "vLLM recomputed a prefix it had just computed: prefix caching is on by default, so look for "
            "--no-enable-prefix-caching in the server's flags, a KV cache too small to keep prefixes between requests "
            "(--gpu-memory-utilization, --kv-cache-memory-bytes; --kv-offloading-size keeps evicted blocks in host "
            "memory), or a router that sends one session's turns to different replicas (vllm:prefix_cache_hits_total "
            "against vllm:prefix_cache_queries_total shows the hit rate; --enable-prompt-tokens-details reports each "
            "request's cached_tokens)."
        ),
        "llamacpp": (
            "llama-server reuses a prompt's KV only on the slot that computed it: keep --cache-prompt on, raise "
            "--cache-ram (the prompt cache's MiB) and --slot-prompt-similarity so a session returns to its slot, and "
            "--cache-reuse N to reuse chunks through KV shifting."
        ),
    },
    "kv-cache-pressure": {
        "vllm": (
            "vLLM preempted running requests (vllm:num_preemptions_total) when its KV cache ran out of blocks: give "
            "the cache more memory (--gpu-memory-utilization or --kv-cache-memory-bytes; on CPU, "
            "VLLM_CPU_KVCACHE_SPACE), admit fewer requests at once (--max-num-seqs), or shorten --max-model-len."
        ),
        "llamacpp": (
            "llama-server divides --ctx-size among its --parallel slots: raise --ctx-size or lower --parallel so each "
            "slot holds its request's prompt and output."
        ),
    },
}


def engine_fix(finding_id: str, family: str | None) -> str | None:
    """The fix for ``finding_id`` in the words of the engine ``family``, or None when there is none for it."""
    if family is None:
        return None
    return ENGINE_FIXES.get(finding_id, {}).get(family)
