"""The sweep's dataset: one session per video, video first, fixed output length; the text
stand-in for a text-only mock model; the tiny local tokenizer that counts it."""

from __future__ import annotations

import argparse
import base64
import json
from itertools import groupby
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from benchmarks import report, smoke, sweep, videos
from benchmarks.__main__ import build_parser
from benchmarks.dataset import (
    MODE_TEXT_STANDIN,
    QUESTIONS,
    build_dataset,
    dataset_lines,
    load_dataset_info,
    standin_text,
    video_references,
)
from benchmarks.tiny_model import build_tiny_model_dir, is_tiny_model_dir
from infra.names import InputError

BASE = "http://videos.example.internal:8080/"


def _cli(module, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers())
    args = parser.parse_args(list(argv))
    return args.func(args)


def test_one_session_per_video_video_first_exact_output_length() -> None:
    refs = video_references(base_url=BASE, count=4)
    assert refs[0] == "http://videos.example.internal:8080/video_0000.mp4"
    lines = dataset_lines(video_refs=refs, questions_per_video=20, output_tokens=128)
    assert len(lines) == 80
    sessions = [(key, list(group)) for key, group in groupby(lines, lambda x: x["session_id"])]
    assert [key for key, _ in sessions] == [f"video-{i:04d}" for i in range(4)]
    for (_, group), ref in zip(sessions, refs, strict=True):
        assert len(group) == 20
        for line, question in zip(group, QUESTIONS, strict=True):
            (message,) = line["messages"]
            assert message["role"] == "user"
            assert message["content"] == [
                {"type": "video_url", "video_url": {"url": ref}},
                {"type": "text", "text": question},
            ]
            assert line["output_length"] == 128
    assert len(set(QUESTIONS)) == 20


def test_the_rehearsal_s_pause_is_seeded_per_video_and_read_by_aiperf() -> None:
    """A pause only after a video's first question, within its bound, the same for a video
    whatever the count; the cluster's dataset (no pause) has none; AIPerf reads it as the
    line's `delay`."""
    from aiperf.dataset.loader.models import MooncakeTrace

    def pauses(count: int, pause_ms: float) -> list[list[float | None]]:
        lines = dataset_lines(video_count=count, text_standin_tokens=8, questions_per_video=5,
                              pause_ms=pause_ms)
        return [[line.get("delay") for line in group]
                for _, group in groupby(lines, lambda x: x["session_id"])]

    three = pauses(3, 60)
    assert all(video[0] is None and all(0 <= p <= 60 for p in video[1:]) for video in three)
    assert len({p for video in three for p in video[1:]}) == 12
    assert pauses(2, 60) == three[:2]
    assert pauses(3, 0) == [[None] * 5] * 3
    line = dataset_lines(video_count=1, text_standin_tokens=8, questions_per_video=2,
                         pause_ms=60)[1]
    assert MooncakeTrace.model_validate(line).delay == line["delay"]
    with pytest.raises(ValueError, match="pause before a question"):
        dataset_lines(video_count=1, text_standin_tokens=8, pause_ms=-1)


def test_local_videos_are_inlined_as_data_urls(tmp_path: Path) -> None:
    video = tmp_path / "video_0000.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42 not really a video")
    (line,) = dataset_lines(video_refs=[str(video)], questions_per_video=1)
    url = line["messages"][0]["content"][0]["video_url"]["url"]
    assert url.startswith("data:video/mp4;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == video.read_bytes()


def test_text_standin_blocks_are_first_distinct_per_video_and_about_n_tokens(
    tmp_path: Path,
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(build_tiny_model_dir(tmp_path / "tiny")))
    out = tmp_path / "standin.jsonl"
    info = build_dataset(out, video_count=3, text_standin_tokens=500, questions_per_video=4,
                         output_tokens=128)
    assert info.mode == MODE_TEXT_STANDIN and info.requests == 12 and info.videos == 3
    assert load_dataset_info(out) == info
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    blocks = {}
    for line in lines:
        content = line["messages"][0]["content"]
        assert isinstance(content, str), "a text-only model gets a plain string"
        block, question = content.split("\n\n")
        assert question in QUESTIONS[:4]
        blocks.setdefault(line["session_id"], set()).add(block)
        assert line["output_length"] == 128
    assert all(len(b) == 1 for b in blocks.values()), "one block per video, on every question"
    distinct = [b.pop() for b in blocks.values()]
    assert len(set(distinct)) == 3
    assert len({b.split()[1] for b in distinct}) == 3, "blocks differ from their first words"
    for block in distinct:
        assert 500 <= len(tokenizer.encode(block, add_special_tokens=False)) <= 503
    assert standin_text(1, 500) == distinct[1], "deterministic"
    assert standin_text(1, 500, seed=1) != distinct[1]


def test_tiny_model_dir_has_what_aiperf_and_the_mocker_load(tmp_path: Path) -> None:
    path = build_tiny_model_dir(tmp_path / "tiny")
    assert is_tiny_model_dir(path)
    config = json.loads((path / "config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    assert config["vocab_size"] == len(tokenizer.get_vocab())
    assert config["eos_token_id"] == tokenizer.eos_token_id
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": "red box"}]}],
        tokenize=False, add_generation_prompt=True,
    )
    assert "red box" in prompt and prompt.rstrip().endswith("<|assistant|>")
    assert len(tokenizer.encode(QUESTIONS[0], add_special_tokens=False)) == 7
    assert tokenizer.unk_token_id not in tokenizer.encode(" ".join(QUESTIONS))


def test_bad_input_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--questions-per-video"):
        dataset_lines(video_refs=["http://x/v.mp4"], questions_per_video=21)
    with pytest.raises(ValueError, match="--video-count"):
        dataset_lines(text_standin_tokens=100)
    with pytest.raises(ValueError, match="make the videos first"):
        video_references(tmp_path)
    with pytest.raises(ValueError, match="--video-base-url must start with http"):
        video_references(base_url="videos:8080", count=1)


def test_the_sweep_builds_its_dataset_and_sidecar_from_a_video_directory(
        tmp_path: Path) -> None:
    videos_dir = tmp_path / "videos"
    assert _cli(videos, "videos", "--out", str(videos_dir), "--count", "2", "--duration", "2",
                "--width", "96", "--height", "64") == 0
    parser = build_parser("sweep")
    args = parser.parse_args(["sweep", "--url", "http://127.0.0.1:9", "--videos",
                              str(videos_dir), "--video-base-url", BASE,
                              "--questions-per-video", "3"])
    out = sweep._datasets_for(args, tmp_path / "run")
    assert load_dataset_info(out).requests == 6  # 2 videos x 3 questions
    info = load_dataset_info(out)
    assert info.video_source == BASE and info.video_settings["width"] == 96
    urls = {json.loads(x)["messages"][0]["content"][0]["video_url"]["url"]
            for x in out.read_text().splitlines()}
    assert urls == {BASE + "video_0000.mp4", BASE + "video_0001.mp4"}
    too_many = parser.parse_args(["sweep", "--url", "http://127.0.0.1:9", "--questions-per-video",
                                  "99", "--video-base-url", BASE, "--video-count", "1"])
    with pytest.raises(InputError, match="--questions-per-video"):
        sweep._datasets_for(too_many, tmp_path / "run-2")


@pytest.mark.parametrize("module,name", [
    (videos, "videos"), (smoke, "smoke"), (sweep, "sweep"),
    (report, "report"),
])
def test_every_command_has_help(module, name, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _cli(module, name, "--help")
    assert exit_info.value.code == 0
    assert f"{name}" in capsys.readouterr().out
