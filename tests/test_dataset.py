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
from benchmarks.dataset import (
    QUESTIONS,
    VideoSource,
    dataset_lines,
    standin_text,
    video_url,
)
from benchmarks.tiny_model import build_tiny_model_dir, is_tiny_model_dir
from infra.run import MAX_QUESTIONS, Workload

BASE = "http://videos.example.internal:8080/"


def _cli(module, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers())
    args = parser.parse_args(list(argv))
    return args.func(args)


def _lines(videos, source: VideoSource, pause_ms: float = 0, **workload) -> list[dict]:
    heads = source.heads(videos, workload.get("seed", 0))
    return dataset_lines(heads, Workload(**workload), source.standin_tokens is not None,
                         pause_ms)


def test_one_session_per_video_video_first_exact_output_length() -> None:
    heads = VideoSource(base_url=BASE).heads(range(4, 8), 0)
    assert heads[4] == "http://videos.example.internal:8080/video_0004.mp4"
    lines = dataset_lines(heads, Workload(questions_per_video=20, output_tokens=128))
    assert len(lines) == 80
    sessions = [(key, list(group)) for key, group in groupby(lines, lambda x: x["session_id"])]
    assert [key for key, _ in sessions] == [f"video-{i:04d}" for i in range(4, 8)]
    for (_, group), ref in zip(sessions, heads.values(), strict=True):
        assert len(group) == 20
        for line, question in zip(group, QUESTIONS, strict=True):
            (message,) = line["messages"]
            assert message["role"] == "user"
            assert message["content"] == [
                {"type": "video_url", "video_url": {"url": ref}},
                {"type": "text", "text": question},
            ]
            assert line["output_length"] == 128
    assert len(set(QUESTIONS)) == MAX_QUESTIONS == 20


def test_the_rehearsal_s_pause_is_seeded_per_video_and_read_by_aiperf() -> None:
    """A pause only after a video's first question, within its bound, the same for a video
    whatever else the chunk holds; the cluster's dataset (no pause) has none; AIPerf reads it
    as the line's `delay`."""
    from aiperf.dataset.loader.models import MooncakeTrace

    standin = VideoSource(standin_tokens=8)

    def pauses(videos: range, pause_ms: float) -> list[list[float | None]]:
        lines = _lines(videos, standin, pause_ms, questions_per_video=5)
        return [[line.get("delay") for line in group]
                for _, group in groupby(lines, lambda x: x["session_id"])]

    three = pauses(range(3), 60)
    assert all(video[0] is None and all(0 <= p <= 60 for p in video[1:]) for video in three)
    assert len({p for video in three for p in video[1:]}) == 12
    assert pauses(range(1, 3), 60) == three[1:]
    assert pauses(range(3), 0) == [[None] * 5] * 3
    line = _lines([0], standin, 60, questions_per_video=2)[1]
    assert MooncakeTrace.model_validate(line).delay == line["delay"]
    with pytest.raises(ValueError, match="pause before a question"):
        _lines([0], standin, -1)


def test_a_pause_is_a_tenth_of_a_millisecond_from_zero_and_none_unless_asked() -> None:
    standin = VideoSource(standin_tokens=8)
    delays = [line["delay"] for line in _lines(range(8), standin, 1.5, questions_per_video=4)
              if "delay" in line]
    assert len(delays) == 24 and all(0 <= d <= 1.5 and round(d, 1) == d for d in delays)
    assert min(delays) < 1 and any(d != int(d) for d in delays)
    heads = standin.heads([0], 0)
    assert all("delay" not in line for line in dataset_lines(heads, Workload(), True))


def test_a_video_source_names_its_references_as_given(tmp_path: Path) -> None:
    """URLs pass as they are, under any of the three schemes; a base URL loses only its
    trailing slash; a stand-in starts with the video's name."""
    for url in ("http://h/a.mp4", "https://h/a.mp4", "data:video/mp4;base64,AAAA"):
        assert video_url(url) == url
    with pytest.raises(ValueError, match=f"video {tmp_path / 'x.mp4'} does not exist: make "
                       "the videos first, or give URLs"):
        video_url(str(tmp_path / "x.mp4"))
    assert VideoSource(base_url="https://h/BOX/").heads([2], 0) == {
        2: "https://h/BOX/video_0002.mp4"}
    assert VideoSource(base_url="https://h").problems() == []
    assert standin_text(7, 4) == "video 7 shows :"
    with pytest.raises(ValueError, match=r"at least 4 tokens \(got 3\)"):
        standin_text(7, 3)
    assert VideoSource(standin_tokens=8).describe() == {
        "kind": "text stand-in", "standin_tokens": 8}
    assert VideoSource(base_url=BASE).describe() == {"kind": "video", "standin_tokens": None}
    (tmp_path / "videos.json").write_text(json.dumps({"videos": [{"name": "video_0000.mp4"}]}))
    assert VideoSource(directory=tmp_path).seed() is None  # a folder that records no seed


def test_local_videos_are_inlined_as_data_urls(tmp_path: Path) -> None:
    video = tmp_path / "video_0003.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42 not really a video")
    (line,) = _lines([3], VideoSource(directory=tmp_path), questions_per_video=1)
    url = line["messages"][0]["content"][0]["video_url"]["url"]
    assert url.startswith("data:video/mp4;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == video.read_bytes()


def test_text_standin_blocks_are_first_distinct_per_video_and_about_n_tokens(
    tmp_path: Path,
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(build_tiny_model_dir(tmp_path / "tiny")))
    lines = _lines(range(3), VideoSource(standin_tokens=500), questions_per_video=4,
                   output_tokens=128)
    assert len(lines) == 12
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
    assert standin_text(1, 500, seed=1) != distinct[1], "another seed, another content"
    assert _lines([1], VideoSource(standin_tokens=500), seed=1)[0] != lines[4]


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
        _lines([0], VideoSource(base_url=BASE), questions_per_video=21)
    assert VideoSource(directory=tmp_path).problems() == [
        f"--videos {tmp_path}: no videos.json there; make the videos first with "
        f"`python -m benchmarks videos --out {tmp_path}`"]
    assert VideoSource(base_url="videos:8080").problems() == [
        "--video-base-url must start with http:// or https:// (videos:8080)"]
    assert VideoSource(base_url=BASE, standin_tokens=8).problems() == [
        "give one of --video-base-url, --videos or --text-standin-tokens"]
    assert VideoSource(standin_tokens=3).problems() == [
        "--text-standin-tokens must be at least 4 (got 3)"]
    assert VideoSource(standin_tokens=0).problems() == [  # 0 is given, not absent
        "--text-standin-tokens must be at least 4 (got 0)"]
    assert VideoSource(standin_tokens=4).problems() == []


def test_a_video_folder_says_how_many_it_holds_and_their_seed(tmp_path: Path) -> None:
    assert _cli(videos, "videos", "--out", str(tmp_path), "--count", "2", "--duration", "2",
                "--width", "96", "--height", "64", "--seed", "5") == 0
    source = VideoSource(directory=tmp_path)
    assert (source.problems(), source.count(), source.seed()) == ([], 2, 5)
    assert VideoSource(base_url=BASE).count() is VideoSource(base_url=BASE).seed() is None


@pytest.mark.parametrize("module,name", [
    (videos, "videos"), (smoke, "smoke"), (sweep, "sweep"),
    (report, "report"),
])
def test_every_command_has_help(module, name, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _cli(module, name, "--help")
    assert exit_info.value.code == 0
    assert f"{name}" in capsys.readouterr().out
