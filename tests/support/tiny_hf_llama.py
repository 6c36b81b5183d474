"""Write a tiny random-weight Llama in Hugging Face format (config, safetensors, tokenizer) that vLLM serves.

Nothing can be downloaded in CI, so the vLLM tests make their own model, as the llama.cpp ones do
(tests/support/tiny_llama.py): a llama-architecture network with random weights and a byte-level BPE tokenizer
trained here on text built from a fixed word list. It writes gibberish, but vLLM around it — the scheduler, continuous
batching, chunked prefill, the prefix cache, the OpenAI server — is the real thing, and that is what latscope measures.

The end-of-sequence row of the output projection is zeroed, so a random model almost never stops before
``max_tokens``. Sizes: hidden 256, 4 layers, 4 heads (2 KV heads), 4,096
positions; about 5 M parameters, a few seconds to build.

This file is run by vLLM's own interpreter (it needs ``transformers``, ``tokenizers`` and ``torch``, which latscope's
environment does not have): ``python tests/support/tiny_hf_llama.py OUT_DIR``. Writing the same directory again is a
no-op once its ``config.json`` exists.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

#: The words the tokenizer is trained on (and that prompts are made of): short English words, each a token or two.
WORDS = (  # noqa: SIM905 (a word list reads better as text)
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by word "
    "but not what all were we when your can said there use an each which she do how their if will up other about "
    "out many then them these so some her would make like him into time has look two more write go see number no "
    "way could people my than first water been call who oil its now find long down day did get come made may part "
    "over new sound take only little work know place year live me back give most very after thing our just name"
).split()

VOCAB_SIZE = 2048
MAX_POSITIONS = 4096
SPECIALS = ("<unk>", "<s>", "</s>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def _corpus(lines: int = 4000, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24))) for _ in range(lines)]


def write_tokenizer(out: Path) -> None:
    """A byte-level BPE trained on the word corpus, saved as a ``PreTrainedTokenizerFast`` with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<unk>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = MAX_POSITIONS
    fast.save_pretrained(out)


def write_model(out: Path, *, layers: int = 4, hidden: int = 256, seed: int = 0) -> None:
    """The random-weight Llama (bfloat16) whose vocabulary is the tokenizer's."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # spread the logits and never pick end-of-sequence, so responses run to max_tokens
        model.lm_head.weight.mul_(8.0)
        model.lm_head.weight[config.eos_token_id].zero_()
    model.to(torch.bfloat16).save_pretrained(out)
    generation = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    (out / "generation_config.json").write_text(json.dumps(generation))


def write_tiny_hf_llama(out: Path) -> Path:
    """Write the model and tokenizer into ``out`` (created); a directory already written is left as it is."""
    if (out / "config.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    write_tokenizer(out)
    write_model(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="directory to write the model into")
    args = parser.parse_args(argv)
    write_tiny_hf_llama(args.out)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
