"""The rehearsal's own parts: option checks, stickiness figures, the schedule that runs
profiles side by side, and the note on round robin falling into step with the mock."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from benchmarks.evidence import stickiness, worker_id_from_body
from benchmarks.sweep import MANIFEST_NAME, SweepError
from benchmarks.tiny_model import build_tiny_model_dir
from rehearsal.local_dynamo import MOCKER_MAX_TOKEN_ID, mock_model_dir
from rehearsal.rehearse import (
    DEFAULT_PROFILES,
    IN_FLIGHT_BUDGET,
    Rehearsal,
    RehearsalConfig,
    Schedule,
    config_problems,
    done_line,
    level_timeout,
    lockstep_notes,
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


def test_bad_options_are_named() -> None:
    problems = config_problems(RehearsalConfig(
        videos=0, concurrencies=(4, 4), standin_tokens=10, speedup_ratio=0))
    text = "\n".join(problems)
    for option in ("--videos", "--concurrency", "--standin-tokens", "--speedup-ratio"):
        assert option in text
    assert config_problems(RehearsalConfig()) == []
    (few,) = config_problems(RehearsalConfig(videos=8))
    assert few.startswith("--videos 8 fill no chunk at --concurrency 16")


def test_a_rerun_with_other_settings_is_refused_before_a_level_runs(tmp_path: Path) -> None:
    """Resuming keeps finished levels, so a run id is bound to the settings it began with:
    the sweep compares the manifest's `deployment.shape` before it starts any stack, and
    the earlier run's dataset is left as it was."""
    first = RehearsalConfig(videos=4, concurrencies=(1, 2), profiles=("round-robin",),
                            results_root=tmp_path, run_id="r1")
    run_dir = tmp_path / "r1" / "round-robin"
    run_dir.mkdir(parents=True)
    (run_dir / MANIFEST_NAME).write_text(json.dumps({"deployment": {"shape": first.shape()}}))
    dataset = Rehearsal(first, say=lambda line: None).datasets(tmp_path / "r1")
    before = dataset.read_bytes()
    with pytest.raises(SweepError, match="new --run-id") as failure:
        Rehearsal(replace(first, videos=5), say=lambda line: None).run()
    assert "deployment.shape.--videos: 4 -> 5" in str(failure.value)
    assert not (run_dir / "stack").exists(), "a stack was started"
    assert dataset.read_bytes() == before, "the refused resume rebuilt the run's dataset"


def test_level_timeout_scales_with_work() -> None:
    small = level_timeout(RehearsalConfig(videos=4), 16)
    full = level_timeout(RehearsalConfig(videos=200), 1)
    assert 300 < small < full
    assert full > 200 * 20 * 1.0  # the full sweep at concurrency 1 is over an hour


def test_a_resumed_run_says_its_time_and_memory_are_this_runs_only() -> None:
    schedule = Schedule(DEFAULT_PROFILES, (8, 16))
    fresh = rehearsal_summary(RehearsalConfig(), 390.0, 2**30, 0, 61.4, schedule, [])
    assert done_line(fresh).startswith("rehearsal done in 6.5 min, peak memory 1.00 GiB")
    assert "resumed" not in done_line(fresh)
    assert fresh["ttft_floor_ms"] == 61.4 and fresh["levels_total"] == 10
    resumed = rehearsal_summary(RehearsalConfig(concurrencies=(16,)), 70.0, 2**29, 1, 60.0,
                                schedule, [])
    assert (resumed["levels_kept"], resumed["levels_total"]) == (1, 2)
    assert "resumed: 1 of 2 levels kept from the earlier run" in done_line(resumed)


def test_the_schedule_runs_a_level_side_by_side_while_the_budget_allows() -> None:
    profiles = ("round-robin", "session-affinity", "kv-routing")
    plan = Schedule(profiles, (1, 2, 4, 8, 16)).batches
    assert plan == [(1, profiles), (2, profiles), (4, profiles),
                    (8, profiles[:2]), (8, profiles[2:]),
                    (16, profiles[:1]), (16, profiles[1:2]), (16, profiles[2:])]
    assert all(level * len(group) <= IN_FLIGHT_BUDGET for level, group in plan)
    # above the budget: alone, never skipped
    assert Schedule(("a",), (32,)).batches == [(32, ("a",))]


def test_profiles_start_a_level_only_when_its_batch_is_due() -> None:
    """Real threads, as the rehearsal's sweeps: a level of 16 runs alone, and a profile
    whose level was kept (never entered) does not hold the others up."""
    schedule, lock = Schedule(DEFAULT_PROFILES, (1, 8, 16)), threading.Lock()
    running: dict[str, int] = {}
    peak = {"in_flight": 0, "side_by_side": 0}

    def sweep(profile: str, levels: tuple[int, ...]) -> None:
        try:
            for level in levels:
                schedule.wait_turn(profile, level)
                with lock:
                    running[profile] = level
                    peak["in_flight"] = max(peak["in_flight"], sum(running.values()))
                    peak["side_by_side"] = max(peak["side_by_side"], len(running))
                time.sleep(0.05)
                with lock:
                    del running[profile]
        finally:
            schedule.finish(profile)

    threads = [threading.Thread(target=sweep, args=("round-robin", (1, 8, 16))),
               threading.Thread(target=sweep, args=("session-affinity", (8, 16)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads), "the schedule deadlocked"
    assert peak == {"in_flight": IN_FLIGHT_BUDGET, "side_by_side": 2}


def test_a_stopped_schedule_refuses_to_start_a_level() -> None:
    schedule = Schedule(DEFAULT_PROFILES, (16,))
    schedule.stop()
    with pytest.raises(SweepError, match="stopping"):
        schedule.wait_turn("session-affinity", 16)


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


def test_a_lockstep_note_says_the_gain_is_understated_at_any_level() -> None:
    """The lockstep comes from the mock's identical request times at any concurrency, not
    only at the fleet size: the note says what that does to the gain, not to avoid a level."""
    locked = {f"v{i}": [1] * 20 for i in range(10)}
    (note,) = lockstep_notes(_manifest({2: locked}), workers=8)
    assert note.startswith("Round robin at concurrency 2 kept 100% of videos on one worker")
    assert "the gain over round robin at concurrency 2 understates what real workers" in note
    assert "compare profiles" not in note
