"""The rehearsal's own parts: option checks, stickiness figures, a resume's refusal, and the
note on round robin falling into step with the mock."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from benchmarks.evidence import stickiness, worker_id_from_body
from benchmarks.sweep import MANIFEST_NAME, SweepError
from benchmarks.tiny_model import build_tiny_model_dir
from infra.names import InputError
from infra.run import Workload
from rehearsal.local_dynamo import MOCK_BLOCK_SIZE, MOCKER_MAX_TOKEN_ID, mock_model_dir
from rehearsal.rehearse import (
    MOCK_REQUEST_SECS,
    REHEARSAL_WORKLOAD,
    Rehearsal,
    RehearsalConfig,
    config_problems,
    done_line,
    level_timeout,
    lockstep_notes,
    parse_config,
    rehearsal_summary,
)


def test_stickiness_figures() -> None:
    figures = stickiness({"v0": [1, 1, 1], "v1": [1, 2, 3], "v2": [4, 4]})
    assert figures.videos == 3
    assert figures.share_single_worker == 2 / 3
    assert figures.mean_workers_per_video == (1 + 3 + 1) / 3
    assert figures.workers_seen == 4
    assert stickiness({}).videos == 0


def test_worker_id_shapes() -> None:
    both = {"nvext": {"worker_id": {"prefill_worker_id": 7, "decode_worker_id": 9}}}
    assert worker_id_from_body(both) == 9
    assert worker_id_from_body({"nvext": {"worker_id": 5}}) == 5
    assert worker_id_from_body({"choices": []}) is None
    assert worker_id_from_body({"nvext": {"worker_id": True}}) is None


def test_bad_options_are_named(tmp_path: Path) -> None:
    problems = config_problems(RehearsalConfig(
        profiles=("a", "a"), standin_tokens=10, speedup_ratio=0))
    text = "\n".join(problems)
    for option in ("--profiles", "--standin-tokens", "--speedup-ratio"):
        assert option in text
    assert config_problems(RehearsalConfig()) == []
    # The workload's options are the sweep's, judged by the sweep before anything starts.
    few = parse_config(["--videos-per-level", "8", "--results-root", str(tmp_path)])
    with pytest.raises(InputError) as refused:
        Rehearsal(few, say=lambda line: None).run()
    assert "--videos-per-level: 8 videos fill no chunk at concurrency 16" in str(refused.value)
    assert not list(tmp_path.glob("*/stack")), "a stack was started"


def test_each_bad_option_is_refused_with_its_fix() -> None:
    """One cache block is the least stand-in the mocker can cache; either speed at 0 stops
    the mock."""
    assert config_problems(RehearsalConfig(profiles=())) == [
        "--profiles needs at least one stack name"]
    assert config_problems(RehearsalConfig(profiles=("a", "b", "a"))) == [
        "--profiles repeats a stack (a b a)"]
    assert config_problems(RehearsalConfig(standin_tokens=MOCK_BLOCK_SIZE)) == []
    assert config_problems(RehearsalConfig(standin_tokens=MOCK_BLOCK_SIZE - 1)) == [
        f"--standin-tokens must be at least {MOCK_BLOCK_SIZE}, one cache block (got "
        f"{MOCK_BLOCK_SIZE - 1}); a video is thousands of tokens"]
    assert config_problems(RehearsalConfig(speedup_ratio=1.0, decode_speedup_ratio=0.0)) == [
        "--speedup-ratio and --decode-speedup-ratio must be above 0 (got 1.0, 0.0); 1 keeps "
        "the mocker's own timing"]


def test_the_help_names_the_command_and_each_default(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        parse_config(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m rehearsal ")
    assert "Local rehearsal: the profiles' comparison as the cluster's `compare` stack" in out
    assert "(default: 64)" in out  # --videos-per-level, the rehearsal's own default


def test_the_options_are_the_config_and_the_workloads_with_the_rehearsals_defaults() -> None:
    assert parse_config([]) == RehearsalConfig()
    assert RehearsalConfig().workload == REHEARSAL_WORKLOAD == Workload(
        videos=64, stop_within_pct=10.0)
    config = parse_config(["--profiles", "round-robin", "kv-routing", "--concurrency", "2",
                           "4", "--full", "--speedup-ratio", "2"])
    assert config == replace(RehearsalConfig(), profiles=("round-robin", "kv-routing"),
                             speedup_ratio=2.0, workload=replace(
                                 REHEARSAL_WORKLOAD, concurrencies=(2, 4), full=True))


@pytest.mark.parametrize("option,value", [("speedup_ratio", 0.5),
                                          ("decode_speedup_ratio", 1.0),
                                          ("standin_tokens", 2000)])
def test_a_rerun_with_another_mock_is_refused_before_a_level_runs(
        tmp_path: Path, option: str, value: float) -> None:
    """Resuming keeps finished levels, so a run id is bound to the mock it began with (its
    speed, its videos' size): the sweep compares the manifest's `deployment.shape` before
    it starts any stack, and the earlier run is left as it was."""
    first = RehearsalConfig(profiles=("round-robin",), results_root=tmp_path, run_id="r1",
                            workload=Workload(concurrencies=(1, 2), videos=4))
    profile_dir = tmp_path / "r1" / "round-robin"
    profile_dir.mkdir(parents=True)
    manifest = profile_dir / MANIFEST_NAME
    manifest.write_text(json.dumps({"deployment": {"shape": first.shape()}}))
    before = manifest.read_bytes()
    with pytest.raises(SweepError, match="new --run-id") as failure:
        Rehearsal(replace(first, **{option: value}), say=lambda line: None).run()
    flag = f"--{option.replace('_', '-')}"
    assert f"deployment.shape.{flag}: {first.shape()[flag]!r} -> {value!r}" in str(failure.value)
    assert not (tmp_path / "r1" / "stack").exists(), "a stack was started"
    assert manifest.read_bytes() == before, "the refused resume changed the earlier run"


def test_level_timeout_scales_with_work() -> None:
    small = level_timeout(RehearsalConfig(workload=Workload(videos=4, concurrencies=(16,))))
    full = level_timeout(RehearsalConfig(workload=Workload(videos=200)))
    assert 300 < small < full
    assert full > 200 * 20 * 1.0  # the full sweep at concurrency 1 is over an hour
    assert level_timeout(RehearsalConfig(level_timeout_secs=60.0)) == 60.0


def test_a_level_s_bound_is_three_times_its_mocked_time_plus_aiperf_s_start_ups() -> None:
    """Mocked time: every request of every profile, one at a time at the lowest level's
    concurrency, at the mock's speed."""
    one = RehearsalConfig(profiles=("round-robin", "session-affinity"), speedup_ratio=2.0,
                          workload=Workload(videos=8, concurrencies=(4, 8)))
    requests = 8 * 20 * 2
    assert level_timeout(one) == pytest.approx(3 * requests * MOCK_REQUEST_SECS / 2 / 4 + 300)


def test_a_resumed_run_says_its_time_and_memory_are_this_runs_only() -> None:
    fresh = rehearsal_summary(RehearsalConfig(), 390.0, 2**30, 0, 61.4, [])
    assert done_line(fresh).startswith("rehearsal done in 6.5 min, peak memory 1.00 GiB")
    assert "resumed" not in done_line(fresh)
    assert fresh["ttft_floor_ms"] == 61.4 and fresh["levels_total"] == 10
    one_level = RehearsalConfig(workload=Workload(concurrencies=(16,)))
    resumed = rehearsal_summary(one_level, 70.0, 2**29, 1, 60.0, [])
    assert (resumed["levels_kept"], resumed["levels_total"]) == (1, 2)
    assert "resumed: 1 of 2 levels kept from the earlier run" in done_line(resumed)


def test_the_summary_records_the_settings_as_json_and_the_time_to_a_tenth() -> None:
    config = RehearsalConfig(results_root=Path("/tmp/r"))
    summary = rehearsal_summary(config, 390.46, 2**30, 0, 61.4, ["a note"])
    assert summary["settings"]["results_root"] == "/tmp/r"
    assert summary["settings"]["workload"] == asdict(config.workload)
    assert summary["settings"]["profiles"] == config.profiles
    assert (summary["wall_time_secs"], summary["notes"]) == (390.5, ["a note"])
    assert done_line(summary) == ("rehearsal done in 6.5 min, peak memory 1.00 GiB (this "
                                  "process and all it started)")
    json.dumps(summary)  # the summary file is JSON


def _manifest(spreads: dict[int, dict[str, list[int]]]) -> dict:
    """A sweep's manifest with each level's routing stickiness, as the sweep records it."""
    return {"levels": {str(c): {"routing": asdict(stickiness(workers))}
                       for c, workers in spreads.items()}}


def test_vocabulary_padded_for_the_mocker(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    before = Tokenizer.from_file(str(build_tiny_model_dir(tmp_path / "m") / "tokenizer.json"))
    prompt = "video 3 shows : What is happening ?"
    model = mock_model_dir(tmp_path / "mock")
    assert json.loads((model / "config.json").read_text())["vocab_size"] == MOCKER_MAX_TOKEN_ID + 1
    after = Tokenizer.from_file(str(model / "tokenizer.json"))
    assert after.get_vocab_size() == MOCKER_MAX_TOKEN_ID + 1
    assert after.encode(prompt).ids == before.encode(prompt).ids
    assert after.decode([1000, MOCKER_MAX_TOKEN_ID]).strip() != ""


def test_notes_explain_round_robin_in_lockstep() -> None:
    spread = {f"v{i}": list(range(6)) for i in range(10)}
    locked = {f"v{i}": [1] * 20 if i < 8 else [1, 2] for i in range(10)}
    (note,) = lockstep_notes(_manifest({16: spread, 8: locked}), workers=8)
    assert "concurrency 8 (concurrency = fleet size) kept 80% of videos on one worker" in note


def test_notes_flag_round_robin_partly_in_step_too() -> None:
    """A calibrated run saw 19% of round robin's videos on one worker at concurrency 8
    (4.1 workers per video): flagged; 6 of 8 workers per video is round robin spreading."""
    spread = {f"v{i}": list(range(6)) for i in range(10)}
    partly = {f"v{i}": [1] * 20 if i < 2 else list(range(5)) * 4 for i in range(10)}
    (note,) = lockstep_notes(_manifest({16: spread, 8: partly}), workers=8)
    assert "concurrency 8 (concurrency = fleet size) kept 20% of videos on one worker" in note
    assert "(4.2 workers per video of 8)" in note


def test_lockstep_is_judged_against_the_workers_a_video_s_questions_can_reach() -> None:
    """With 4 questions a video reaches at most 4 of 8 workers: 3.5 workers per video is
    round robin spreading (under 3 would be in step); levels come in numeric order."""
    spread = {f"v{i}": [1, 2, 3, 4] if i % 2 else [1, 2, 3] for i in range(10)}
    manifest = {**_manifest({8: spread}), "workload": {"questions_per_video": 4}}
    assert lockstep_notes(manifest, workers=8) == []
    assert len(lockstep_notes(_manifest({8: spread}), workers=8)) == 1  # of 8 reachable
    locked = {f"v{i}": [1] * 20 for i in range(10)}
    notes = lockstep_notes(_manifest({16: locked, 2: locked}), workers=8)
    assert [note.split(" kept")[0] for note in notes] == [
        "Round robin at concurrency 2", "Round robin at concurrency 16"]
    assert notes[0] == (
        "Round robin at concurrency 2 kept 100% of videos on one worker (1.0 workers per video "
        "of 8): the mock workers' even request times (a fixed answer length, which the seeded "
        "pause before each question only partly breaks) let round robin's rotation fall into "
        "step with the in-flight videos, so each video's next question reached the worker "
        "that served its last one. Real workers' timing jitter breaks this lockstep, so the "
        "gain over round robin at concurrency 2 understates what real workers would show.")


def test_a_lockstep_note_says_the_gain_is_understated_at_any_level() -> None:
    """The lockstep comes from the mock's identical request times at any concurrency, not
    only at the fleet size: the note says what that does to the gain, not to avoid a level."""
    locked = {f"v{i}": [1] * 20 for i in range(10)}
    (note,) = lockstep_notes(_manifest({2: locked}), workers=8)
    assert note.startswith("Round robin at concurrency 2 kept 100% of videos on one worker")
    assert "the gain over round robin at concurrency 2 understates what real workers" in note
    assert "compare profiles" not in note
