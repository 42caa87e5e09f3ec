"""A tiny local model directory (config.json + tokenizer files), built with no hub access.

AIPerf needs a tokenizer to count tokens, and the Dynamo mocker needs a model directory;
offline, both take this directory. The tokenizer is word level (one token per word,
digit or punctuation mark), and its vocabulary holds the question set and the text
stand-in words (benchmarks/prompts.py), so token counts of the rehearsal's prompts are
exact. Unknown words map to `<unk>` (still one token each), so any answer can be counted.
AIPerf 0.13 treats a local directory as a hub repo id when HF_HUB_OFFLINE=1 is set; keep
that variable away from AIPerf (the sweep removes it from AIPerf's environment).

For `dynamo.mocker` every token it emits must decode: the mocker (Dynamo 1.6.1) answers
with random token ids in [1000, 2000), measured here by decoding 500 of them. A smaller
vocabulary decodes them to nothing, the frontend then streams chunks without content, and
AIPerf counts every request as failed ("No responses with actual content"), so the
rehearsal pads the vocabulary with filler words up to `MOCKER_MAX_TOKEN_ID` (the prompts'
token ids are unchanged).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

from benchmarks.prompts import QUESTIONS, STANDIN_WORDS

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


def build_tokenizer() -> Tokenizer:
    vocab = {token: i for i, token in enumerate(vocabulary())}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)]
    )
    tokenizer.add_special_tokens([UNK, BOS, EOS, *ROLE_TOKENS])
    return tokenizer


def model_config(vocab_size: int) -> dict:
    """A small Llama-shaped config: enough for tools that size a KV cache from it."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
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
    }


def is_tiny_model_dir(path: Path) -> bool:
    return all((path / name).is_file() for name in FILES)


def build_tiny_model_dir(path: Path) -> Path:
    """Write the tiny model directory at `path` (created if needed); returns `path`.

    Deterministic: the same files every time, so it may be rebuilt freely.
    """
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.save(str(path / "tokenizer.json"))
    special = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": UNK}
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 65536,
        "chat_template": CHAT_TEMPLATE,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        **special,
    }
    files = {
        "config.json": model_config(tokenizer.get_vocab_size()),
        "tokenizer_config.json": tokenizer_config,
        "special_tokens_map.json": special,
        "generation_config.json": {"bos_token_id": 1, "eos_token_id": 2},
    }
    for name, content in files.items():
        (path / name).write_text(json.dumps(content, indent=2) + "\n")
    return path


MOCKER_MAX_TOKEN_ID = 1999
FILLER_PREFIX = "mock"


def pad_vocabulary(model_dir: Path, size: int = MOCKER_MAX_TOKEN_ID + 1) -> int:
    """Extend the word-level vocabulary of `model_dir` to `size` entries; returns the size.

    Idempotent. Updates `tokenizer.json` and `config.json`'s `vocab_size` together.
    """
    tokenizer_file = model_dir / "tokenizer.json"
    data = json.loads(tokenizer_file.read_text())
    model = data["model"]
    if model.get("type") != "WordLevel":
        raise ValueError(f"{tokenizer_file}: not a word-level tokenizer ({model.get('type')})")
    vocab: dict[str, int] = model["vocab"]
    next_id = max(vocab.values()) + 1
    while next_id < size:
        word = f"{FILLER_PREFIX}{next_id}"
        if word not in vocab:
            vocab[word] = next_id
            next_id += 1
    text = json.dumps(data, ensure_ascii=False)
    Tokenizer.from_str(text)  # refuses a malformed vocabulary before it is written
    tokenizer_file.write_text(text)
    config_file = model_dir / "config.json"
    config = json.loads(config_file.read_text())
    config["vocab_size"] = max(int(config.get("vocab_size", 0)), next_id)
    config_file.write_text(json.dumps(config, indent=2) + "\n")
    return next_id


def mock_model_dir(path: Path) -> Path:
    """The tiny model directory at `path`, padded for the mocker."""
    build_tiny_model_dir(path)
    pad_vocabulary(path)
    return path
