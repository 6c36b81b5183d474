"""Write a tiny random-weight llama model as a GGUF file that llama.cpp loads.

Nothing can be downloaded in CI, so the real-server tests make their own model: a llama-architecture network with a
small vocabulary and random weights. It produces gibberish, but the server around it (tokenising, the slot
scheduler, sampling, the HTTP/SSE stack) is the real thing, and that is what latscope measures.

The vocabulary is SentencePiece-style (llama tokenizer): ``<unk>``, ``<s>``, ``</s>``, the 256 byte-fallback tokens
``<0x00>``..``<0xFF>``, then ``▁word`` pieces for a list of short English words (so a prompt made of those words is
one token per word) and single letters. The output projection is scaled so logits spread widely and the row of the
end-of-sequence token is zeroed: a random model then almost never stops early, so responses reach ``max_tokens``.

Usage: ``python -m tests.support.tiny_llama OUT.gguf [--layers 4 --hidden 256]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

#: Words that become whole-word tokens (each costs one token in the prompts latscope generates).
WORDS = (  # noqa: SIM905 (a word list reads better as text)
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by word "
    "but not what all were we when your can said there use an each which she do how their if will up other about "
    "out many then them these so some her would make like him into time has look two more write go see number no "
    "way could people my than first water been call who oil its now find long down day did get come made may part "
    "over new sound take only little work know place year live me back give most very after thing our just name "
    "good sentence man think say great where help through much before line right too mean old any same tell boy "
    "follow came want show also around form three small set put end does another well large must big even such "
    "because turn here why ask went men read need land different home us move try kind hand picture again change "
    "off play spell air away animal house point page letter mother answer found study still learn should world"
).split()

SPECIALS = ("<unk>", "<s>", "</s>")
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6

#: A minimal chat template (ChatML-like) so /v1/chat/completions works on servers that require one.
CHAT_TEMPLATE = (
    "{% for message in messages %}<s>{{ message['role'] }}\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types of the tiny vocabulary (ids: 0 unk, 1 bos, 2 eos, 3..258 bytes, then words)."""
    tokens: list[str] = list(SPECIALS)
    types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TOKEN_BYTE] * 256
    pieces = [f"\u2581{w}" for w in dict.fromkeys(WORDS)]
    pieces += ["\u2581", *"abcdefghijklmnopqrstuvwxyz", *".,!?:;'\"-"]
    tokens += pieces
    types += [TOKEN_NORMAL] * len(pieces)
    # SentencePiece merges prefer higher scores: longer pieces first.
    scores = [0.0] * (3 + 256) + [float(len(p)) for p in pieces]
    return tokens, scores, types


def write_tiny_llama(
    path: Path,
    *,
    layers: int = 4,
    hidden: int = 256,
    heads: int = 4,
    ffn: int = 512,
    context: int = 4096,
    seed: int = 0,
) -> Path:
    """Write the model to ``path`` (a few MB) and return it. Deterministic for a given seed."""
    import gguf  # imported here: only the real-server tests need it

    rng = np.random.default_rng(seed)
    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)

    def weights(*shape: int, scale: float) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("latscope-tiny-llama")
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    writer.add_tensor("token_embd.weight", weights(n_vocab, hidden, scale=0.5))
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weights(hidden, hidden, scale=hidden**-0.5))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weights(ffn, hidden, scale=hidden**-0.5))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weights(ffn, hidden, scale=hidden**-0.5))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weights(hidden, ffn, scale=ffn**-0.5))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    output = weights(n_vocab, hidden, scale=4.0 * hidden**-0.5)
    output[2, :] = 0.0  # the end-of-sequence logit stays at 0 while others spread: responses run to max_tokens
    writer.add_tensor("output.weight", output)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_tiny_llama(args.out, layers=args.layers, hidden=args.hidden, seed=args.seed)
    print(args.out, args.out.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
