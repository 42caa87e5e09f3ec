"""Make a tiny model directory fit for `dynamo.mocker`: every token it emits must decode.

Why: the mocker (Dynamo 1.6.1) answers with random token ids in [1000, 2000), measured
here by decoding 500 of them. A vocabulary smaller than that decodes them to nothing, the
frontend then streams chunks without content, and AIPerf counts every request as failed
("No responses with actual content"). The word-level tokenizer of
benchmarks/tiny_tokenizer.py holds only the words the prompts use, so the rehearsal pads
it with filler words up to `MOCKER_MAX_TOKEN_ID` (the prompts' token ids are unchanged).
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

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
    from benchmarks.tiny_tokenizer import build_tiny_model_dir

    build_tiny_model_dir(path)
    pad_vocabulary(path)
    return path
