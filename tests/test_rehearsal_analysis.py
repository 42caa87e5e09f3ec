"""The rehearsal's pure parts: option checks, stickiness figures, and the notes that say
whether (and why not) the rehearsal shows the seed's direction."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from benchmarks.aiperf_run import LevelSummary
from benchmarks.evidence import Stickiness, stickiness, worker_id_from_body
from benchmarks.report import ProfileRun
from benchmarks.sweep import MANIFEST_NAME, SweepError
from benchmarks.tiny_model import build_tiny_model_dir
from rehearsal.local_dynamo import MOCKER_MAX_TOKEN_ID, mock_model_dir
from rehearsal.rehearse import (
    Rehearsal,
    RehearsalConfig,
    config_problems,
    direction_notes,
    gain_lines,
    level_timeout,
    rehearsal_summary,
    summary_lines,
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


def test_a_rerun_with_other_settings_is_refused_before_a_level_runs(tmp_path: Path) -> None:
    """Resuming keeps finished levels, so a run id is bound to the settings it began with:
    the sweep compares the manifest's `deployment.shape` before it starts any stack, and
    the earlier run's dataset is left as it was."""
    first = RehearsalConfig(videos=4, profiles=("round-robin",), results_root=tmp_path,
                            run_id="r1")
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


def _add_level(run: ProfileRun, concurrency: int, summary: LevelSummary, sticky: Stickiness,
               cpu: float) -> None:
    """A finished level as the sweep records it (summary, stickiness, measured CPU)."""
    run.levels[concurrency] = summary
    run.stickiness[concurrency] = asdict(sticky)
    run.manifest["levels"][str(concurrency)] = {"measured": {"cpu_busy": cpu}}


def _outcome(name: str, rps: float, ttft: float, single: float, workers: float,
             hits: float, cpu: float) -> ProfileRun:
    summary = LevelSummary(16, 800, 0, rps, ttft, ttft * 2, 900.0, rps * 128, hits)
    sticky = stickiness({f"v{i}": list(range(int(workers))) if single == 0 else [1]
                         for i in range(10)})
    run = ProfileRun(name, Path(name), {"levels": {}})
    _add_level(run, 16, summary, sticky, cpu)
    return run


def test_a_resumed_run_says_its_time_and_memory_are_this_runs_only() -> None:
    rr = _outcome("round-robin", 10.0, 120.0, 0.0, 6, 55.0, 0.5)
    af = _outcome("session-affinity", 12.0, 60.0, 1.0, 1, 94.0, 0.5)
    fresh = summary_lines(rehearsal_summary(RehearsalConfig(), [rr, af], 390.0, 2**30, []))
    assert fresh[0].startswith("rehearsal done in 6.5 min, peak memory 1.00 GiB")
    assert "resumed" not in fresh[0]
    resumed = rehearsal_summary(RehearsalConfig(), [rr, af], 70.0, 2**29, [], kept=1)
    assert (resumed["levels_kept"], resumed["levels_total"]) == (1, 2)
    assert "resumed: 1 of 2 levels kept from the earlier run" in summary_lines(resumed)[0]


def test_notes_confirm_the_seed_direction() -> None:
    rr = _outcome("round-robin", 10.0, 120.0, 0.0, 6, 55.0, 0.5)
    af = _outcome("session-affinity", 12.0, 60.0, 1.0, 1, 94.0, 0.5)
    notes = direction_notes(rr, af, workers=8)
    assert len(notes) == 1 and notes[0].startswith("Direction as in the seed")
    assert "+20.0%" in notes[0]


def test_notes_explain_a_cpu_bound_result() -> None:
    rr = _outcome("round-robin", 30.0, 150.0, 0.0, 6, 65.0, 0.97)
    af = _outcome("session-affinity", 29.5, 190.0, 1.0, 1, 94.0, 0.98)
    text = "\n".join(direction_notes(rr, af, workers=8))
    assert text.startswith("NOT the seed's direction")
    assert "CPU-bound" in text and "98%" in text
    assert "94% vs 65%" in text  # affinity did save work, it just did not show


def test_notes_explain_broken_affinity() -> None:
    rr = _outcome("round-robin", 10.0, 100.0, 0.0, 6, 55.0, 0.4)
    af = _outcome("session-affinity", 9.0, 110.0, 0.0, 6, 50.0, 0.4)
    text = "\n".join(direction_notes(rr, af, workers=8))
    assert "affinity did not hold" in text and "no work to save" in text


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
    rr = _outcome("round-robin", 9.45, 61.0, 0.0, 6, 94.0, 0.5)
    locked = stickiness({f"v{i}": [1] * 20 if i < 8 else [1, 2] for i in range(10)})
    _add_level(rr, 8, rr.levels[16], locked, 0.5)
    af = _outcome("session-affinity", 12.0, 60.0, 1.0, 1, 95.0, 0.5)
    notes = direction_notes(rr, af, workers=8)
    assert notes[0].startswith("Direction as in the seed")
    assert len(notes) == 2
    assert "concurrency 8 (concurrency = fleet size) kept 80% of videos on one worker" in notes[1]


def test_notes_flag_round_robin_partly_in_step_too() -> None:
    """A calibrated run saw 19% of round robin's videos on one worker at concurrency 8
    (4.1 workers per video): flagged; 6 of 8 workers per video is round robin spreading."""
    rr = _outcome("round-robin", 9.45, 61.0, 0.0, 6, 94.0, 0.5)
    partly = stickiness({f"v{i}": [1] * 20 if i < 2 else list(range(5)) * 4 for i in range(10)})
    _add_level(rr, 8, replace(rr.levels[16], prompt_cache_read_pct=79.0), partly, 0.5)
    af = _outcome("session-affinity", 12.0, 60.0, 1.0, 1, 95.0, 0.5)
    notes = direction_notes(rr, af, workers=8)
    assert len(notes) == 2
    assert "concurrency 8 (concurrency = fleet size) kept 20% of videos on one worker" in notes[1]
    assert "(4.2 workers per video of 8)" in notes[1]


def test_gain_lines_give_each_interval_and_say_when_it_covers_zero() -> None:
    def row(profile: str, gain: float | None, low: float | None, high: float | None) -> dict:
        return {"profile": profile, "concurrency": 16, "throughput_gain_pct": gain,
                "throughput_gain_ci95_low": low, "throughput_gain_ci95_high": high}

    report = {"baseline": "round-robin", "rows": [
        row("round-robin", None, None, None), row("session-affinity", 10.04, 8.0, 14.2),
        row("kv-routing", 1.0, -2.5, 3.0)]}
    affinity, kv = gain_lines(report)
    assert affinity == ("session-affinity at concurrency 16: throughput +10.0% over "
                        "round-robin, 95% interval +8.0% to +14.2%")
    assert kv.endswith("95% interval -2.5% to +3.0%: no measurable difference")
