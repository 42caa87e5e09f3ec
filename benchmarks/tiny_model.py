"""A tiny local model directory built offline, for AIPerf's tokenizer and the Dynamo mocker; word
level, so prompts' token counts are exact (docs/benchmark-toolkit.md, "The tiny model")."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

from benchmarks.dataset import QUESTIONS, STANDIN_WORDS

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

# Renders both plain-string content and lists of content parts (text parts only; a
# text-only model has nothing to do with a video part).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|> "
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}"
    "{{ part['text'] }} {% endif %}{% endfor %}{% endif %} {{ eos_token }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def vocabulary() -> list[str]:
    """Special tokens first, then digits, punctuation and every word the prompts use."""
    words: set[str] = set(STANDIN_WORDS)
    for question in QUESTIONS:
        words.update(re.findall(r"\w+|[^\w\s]", question))
    words.update(str(d) for d in range(10))
    words.update(".,:;!?'\"()-")
    words.update(w.lower() for w in list(words))
    return [UNK, BOS, EOS, *ROLE_TOKENS, *sorted(words)]


def build_tokenizer(vocab_size: int = 0) -> Tokenizer:
    """`vocab_size` pads the vocabulary with filler words (the prompts' ids unchanged)."""
    words = vocabulary()
    words += [f"mock{i}" for i in range(len(words), vocab_size)]
    vocab = {token: i for i, token in enumerate(words)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)]
    )
    tokenizer.add_special_tokens([UNK, BOS, EOS, *ROLE_TOKENS])
    return tokenizer


def is_tiny_model_dir(path: Path) -> bool:
    return all((path / name).is_file() for name in FILES)


def build_tiny_model_dir(path: Path, vocab_size: int = 0) -> Path:
    """Write the tiny model directory at `path` (deterministic: rebuild freely)."""
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_size)
    tokenizer.save(str(path / "tokenizer.json"))
    special = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": UNK}
    files = {
        # A small Llama-shaped config: enough for tools that size a KV cache from it.
        "config.json": {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": tokenizer.get_vocab_size(),
            "hidden_size": 256,
            "intermediate_size": 512,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "head_dim": 64,
            "max_position_embeddings": 65536,
            "torch_dtype": "bfloat16",
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 0,
            "tie_word_embeddings": False,
        },
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": 65536,
            "chat_template": CHAT_TEMPLATE,
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            **special,
        },
        "special_tokens_map.json": special,
        "generation_config.json": {"bos_token_id": 1, "eos_token_id": 2},
    }
    for name, content in files.items():
        (path / name).write_text(json.dumps(content, indent=2) + "\n")
    return path

