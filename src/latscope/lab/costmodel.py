"""The lab engine's cost model: how long each simulated GPU step takes, and how much KV cache there is.

A step's duration is a function of what the step does, never of which request is in it:

=====================  ==========================================================================================
prefill (one step)     ``a + Σ (b·n_i + c·n_i²)`` over the sequences prefilled in the step, ``n_i`` their tokens
prefill chunk          ``b·k + c·((p+k)² − p²)`` for ``k`` tokens starting at position ``p``: the chunks of a
                       prompt add up to exactly ``b·n + c·n²``; the step adds its base ``a`` once
decode (one step)      ``d + e·B`` for a batch of ``B`` running sequences, one token each, plus ``s`` when a
                       sequence in the batch samples (top-p, penalties, logprobs) on the host
mixed step             prefill cost of the chunk(s) + decode cost of the batch (chunked prefill)
=====================  ==========================================================================================

``a`` … ``e`` are :attr:`CostModel.prefill_base_ms`, :attr:`~CostModel.prefill_per_token_ms`,
:attr:`~CostModel.prefill_quadratic_ms`, :attr:`~CostModel.decode_base_ms` and :attr:`~CostModel.decode_per_seq_ms`.
The quadratic term is attention over the prompt; it is applied per sequence because attention never crosses
sequences in a batch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

#: The sampling paths engines take off the fused decode step (:func:`latscope.lab.gateway.sampling_paths`):
#: top-p/top-k filtering, presence/frequency/repetition penalties, logprobs.
NUCLEUS, PENALTIES, LOGPROBS = "nucleus", "penalties", "logprobs"
SAMPLING_PATHS: frozenset[str] = frozenset({NUCLEUS, PENALTIES, LOGPROBS})


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """Calibrated costs of the simulated engine (all durations in milliseconds) and its capacity limits.

    Fields:
        prefill_base_ms: ``a``, fixed cost of any step that prefills (kernel launches, scheduling), ms.
        prefill_per_token_ms: ``b``, per prompt token (the linear layers), ms/token.
        prefill_quadratic_ms: ``c``, per prompt token² of one sequence (attention), ms/token².
        decode_base_ms: ``d``, fixed cost of a decode step (reading the weights once per step), ms.
        decode_per_seq_ms: ``e``, per sequence in the decode batch (its KV reads, sampling), ms/sequence.
        kv_blocks: KV-cache budget, in blocks of ``kv_block_tokens`` tokens.
        max_batch: most sequences running (prefilling or decoding) at once.
        chunk_tokens: prefill token budget of one step under chunked prefill (priority policy).
        max_batched_tokens: most prompt tokens one unchunked prefill step batches (FIFO policy); the request at the
            head of the queue always runs whole, however long.
        kv_block_tokens: tokens per KV block (paged attention block size).
        sampling_ms: ``s``, host-side cost of a decode step whose batch holds a sequence that asks for more than
            greedy or plain-temperature sampling (top-p/top-k, penalties, logprobs), ms; 0 when sampling runs on the
            device with the step.
        host_sampling_paths: which of :data:`SAMPLING_PATHS` pay ``s`` (the others run on the device): all of them
            by default.
        prefix_cache_blocks: blocks of computed prompts the engine keeps for a later prompt that starts with them
            (:mod:`latscope.lab.prefixcache`, blocks of its own size); 0: no prefix caching.
    """

    prefill_base_ms: float
    prefill_per_token_ms: float
    prefill_quadratic_ms: float
    decode_base_ms: float
    decode_per_seq_ms: float
    kv_blocks: int
    max_batch: int
    chunk_tokens: int
    max_batched_tokens: int = 8192
    kv_block_tokens: int = 16
    sampling_ms: float = 0.0
    prefix_cache_blocks: int = 4096
    host_sampling_paths: frozenset[str] = SAMPLING_PATHS

    def __post_init__(self) -> None:
        for name in (
            "prefill_base_ms",
            "prefill_per_token_ms",
            "prefill_quadratic_ms",
            "decode_base_ms",
            "decode_per_seq_ms",
            "sampling_ms",
        ):
            value = getattr(self, name)
            if not value >= 0.0:  # also rejects NaN
                raise ValueError(f"CostModel.{name} must be >= 0, got {value!r}")
        for name in ("kv_blocks", "max_batch", "chunk_tokens", "max_batched_tokens", "kv_block_tokens"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"CostModel.{name} must be >= 1, got {value!r}")
        if not self.host_sampling_paths <= SAMPLING_PATHS:
            raise ValueError(f"CostModel.host_sampling_paths must be among {sorted(SAMPLING_PATHS)}")
        if self.prefix_cache_blocks < 0:
            raise ValueError(f"CostModel.prefix_cache_blocks must be >= 0, got {self.prefix_cache_blocks!r}")

    # -- per-step costs ------------------------------------------------------------------------------------------

    def prefill_ms(self, prompt_tokens: int) -> float:
        """Duration of one step that prefills a whole prompt of ``prompt_tokens`` tokens alone, ms: a + b·n + c·n²."""
        return self.prefill_base_ms + self.prefill_chunk_ms(0, prompt_tokens)

    def prefill_chunk_ms(self, start_token: int, tokens: int) -> float:
        """Cost of prefilling ``tokens`` tokens of one sequence starting at position ``start_token``, ms, without
        the step base ``a``: b·k + c·((p+k)² − p²). Chunks of one prompt sum to b·n + c·n²."""
        end = start_token + tokens
        return self.prefill_per_token_ms * tokens + self.prefill_quadratic_ms * (end * end - start_token * start_token)

    def decode_step_ms(self, batch_size: int) -> float:
        """Duration of one decode step over ``batch_size`` sequences (one token each), ms: d + e·B.

        A batch of zero costs nothing (there is no step)."""
        if batch_size <= 0:
            return 0.0
        return self.decode_base_ms + self.decode_per_seq_ms * batch_size

    def sampled_decode_step_ms(self, batch_size: int, sampled: frozenset[str]) -> float:
        """A decode step's duration, ms: :meth:`decode_step_ms` plus ``s`` when the batch's sequences ask for a
        sampling path (``sampled``: the union of theirs) that runs on the host."""
        step = self.decode_step_ms(batch_size)
        return step + self.sampling_ms if step and sampled & self.host_sampling_paths else step

    def kv_blocks_for(self, tokens: int) -> int:
        """KV blocks needed to hold ``tokens`` tokens: ceil(tokens / kv_block_tokens)."""
        return -(-tokens // self.kv_block_tokens)

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the whole KV cache holds."""
        return self.kv_blocks * self.kv_block_tokens

    # -- presets ---------------------------------------------------------------------------------------------------

    @classmethod
    def default(cls) -> CostModel:
        """A 7B-parameter model in fp16 on one modern 80 GB data-centre GPU.

        - Prefill ``a`` = 2 ms, ``b`` = 0.04 ms/token: about 25k prompt tokens/s, the compute-bound rate of a 7B
          model (≈ 14 GFLOP per token) at a realistic fraction of the GPU's dense fp16 peak.
        - ``c`` = 2.5e-7 ms/token²: attention (FlashAttention-style) adds 5 % at 8k tokens and 20 % at 32k, so the
          TTFT-vs-prompt curve bends upward only for long contexts, as measured on real servers.
        - Decode ``d`` = 12 ms, ``e`` = 0.1 ms: a step is bound by reading ≈ 14 GB of weights (≈ 12 ms), each
          sequence adds its KV reads and sampling; 12.1 ms at batch 1, 15.2 ms at batch 32, 18.4 ms at batch 64.
        - KV: 28 672 blocks × 16 tokens = 458 752 tokens: a Llama-3-8B-class model with grouped-query attention
          keeps 128 KiB of KV per token (2 × 32 layers × 8 KV heads × 128 dims × 2 bytes), and about 56 GiB of
          an 80 GB GPU remain for it after the weights and activations.
        - ``max_batch`` = 256 (vLLM's default ``max_num_seqs``), ``chunk_tokens`` = 2048 (vLLM's chunked-prefill
          token budget), ``max_batched_tokens`` = 8192 for unchunked prefill steps.
        - Prefix caching on (vLLM's default), 4096 blocks of 16 tokens: 65,536 tokens of prompts kept.
        """
        return cls(
            prefill_base_ms=2.0,
            prefill_per_token_ms=0.04,
            prefill_quadratic_ms=2.5e-7,
            decode_base_ms=12.0,
            decode_per_seq_ms=0.1,
            kv_blocks=28672,
            max_batch=256,
            chunk_tokens=2048,
            max_batched_tokens=8192,
            kv_block_tokens=16,
        )

    @classmethod
    def zero(cls) -> CostModel:
        """No simulated time at all: every step is free, so the lab streams as fast as its event loop allows
        (throughput tests of the HTTP layer and the client). Capacity stays that of :meth:`default`."""
        return cls.default().with_overrides(
            prefill_base_ms=0.0,
            prefill_per_token_ms=0.0,
            prefill_quadratic_ms=0.0,
            decode_base_ms=0.0,
            decode_per_seq_ms=0.0,
        )

    def with_overrides(self, **overrides: Any) -> CostModel:
        """A copy with the named fields replaced (validated like the constructor); unknown names raise TypeError."""
        return dataclasses.replace(self, **overrides)

    @property
    def is_zero(self) -> bool:
        """True when no step ever costs simulated time."""
        return not (
            self.prefill_base_ms
            or self.prefill_per_token_ms
            or self.prefill_quadratic_ms
            or self.decode_base_ms
            or self.decode_per_seq_ms
        )
