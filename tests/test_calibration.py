"""The calibration arithmetic (infra/calibration.py), the planner against the seed's own
durations, and closing the loop with a measured run (the run beside the seed's table is the
report's: tests/test_report.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

import pytest

from benchmarks.aiperf_run import LevelSummary
from benchmarks.dataset import standin_text
from benchmarks.plan import feedback, measured_spread
from infra.calibration import H200, MOCK_MISS_SECS, mock_calibration, solve_hardware
from infra.names import SERVED_MODEL_NAME
from infra.planning import (
    CHUNK_START_SECS,
    REPLICATE_CV,
    chunks_needed,
    design_lines,
    plan_sweep,
    predicted_req_s,
    stack_plan,
)
from infra.routing import PROFILES
from infra.run import MIN_BLOCKS, SEED_WORKLOAD
from infra.seed import SEED_SWEEP_HOURS, SEED_TABLE
from infra.settings import parse_settings, stack_settings
from rehearsal.local_dynamo import LocalDynamo, mock_model_dir, mocker_command
from rehearsal.rehearse import STANDIN_TOKENS, RehearsalConfig
from tests.conftest import REPO_ROOT
from tests.support_pulumi import run_program, stack_config
from tests.support_report_runs import chunk, write_run


def test_the_concurrency_1_row_solves_to_an_h200_s_costs() -> None:
    """(1/0.94 - 1/1.16) s per request, times 20 questions over 7 extra first visits."""
    assert H200.miss_secs == pytest.approx((1 / 0.94 - 1 / 1.16) * 20 / 7)
    assert H200.miss_secs == pytest.approx(0.576, abs=0.001)
    assert H200.hit_secs == pytest.approx(1 / 1.16 - H200.miss_secs / 20)
    row = SEED_TABLE[0]
    assert predicted_req_s(H200, 1, 8, 20, affinity=False) == pytest.approx(row.rr_req_s)
    assert predicted_req_s(H200, 1, 8, 20, affinity=True) == pytest.approx(row.sa_req_s)


def test_the_mocker_is_stretched_to_h200_time_and_a_hit_with_its_pause_costs_the_h200_s(
        ) -> None:
    knobs = mock_calibration()
    assert knobs.speedup_ratio == pytest.approx(MOCK_MISS_SECS / H200.miss_secs, abs=0.001)
    assert knobs.hit_secs() + knobs.pause_ms / 2000 == pytest.approx(H200.hit_secs, abs=0.002)
    # Decode runs faster than the mocker's own: the pause's mean is paid back.
    assert knobs.speedup_ratio * knobs.decode_speedup_ratio > 1.05
    assert RehearsalConfig().speedup_ratio == knobs.speedup_ratio
    assert RehearsalConfig().decode_speedup_ratio == knobs.decode_speedup_ratio
    argv = mocker_command("python", LocalDynamo(
        {"round-robin": PROFILES["round-robin"]}, Path("m"), 8, Path("w"), knobs.speedup_ratio,
        knobs.decode_speedup_ratio))
    assert argv[argv.index("--speedup-ratio") + 1] == str(knobs.speedup_ratio)
    assert argv[argv.index("--decode-speedup-ratio") + 1] == str(knobs.decode_speedup_ratio)


@pytest.mark.parametrize("profile,affinity", [("round-robin", False),
                                              ("session-affinity", True)])
def test_the_plan_of_the_seed_sweep_matches_the_seed_s_durations(profile: str,
                                                                 affinity: bool) -> None:
    plan = plan_sweep(200, 20, (1, 2, 4, 8, 16), 8, 1, [affinity])
    hours = plan.sweep_secs / 3600
    print(f"{profile}: planned {hours:.2f} h, the seed's about {SEED_SWEEP_HOURS[profile]} h")
    assert hours == pytest.approx(SEED_SWEEP_HOURS[profile], rel=0.15)
    assert [p.concurrency for p in plan.levels] == [1, 2, 4, 8, 16]
    assert plan.levels[0].secs == pytest.approx(4000 / plan.levels[0].req_s)
    # Eight GPUs from the graph's start (a 90-minute cold start) to the sweep's end, one
    # during the download.
    assert plan.gpu_hours == pytest.approx((1800 + 8 * (5400 + plan.sweep_secs)) / 3600)


def test_the_compare_stack_costs_at_most_40_percent_of_the_seed_s_design() -> None:
    """One download and one cold start, both profiles interleaved at the stack's precision,
    beside the seed's design (a deployment, a cold start and a full sweep per profile) and two
    adaptive per-profile stacks; the cold start's estimate says where it comes from."""
    text = "\n".join(stack_plan(stack_settings("compare")).lines())
    mine, seed, stacks = (float(re.search(pattern, text)[1]) for pattern in (
        r"this stack: ([\d.]+) GPU-hours", r"the seed's design: ([\d.]+) GPU-hours",
        r"two adaptive per-profile stacks: ([\d.]+)"))
    assert mine <= 0.4 * seed and mine < stacks, text
    assert "a cold start of 90 min: 8 x 67 GiB of weights read from one ReadWriteMany share" \
        in text


def test_a_stack_s_plan_is_in_its_outputs_and_its_preview() -> None:
    run = run_program("session-affinity", stack_config("session-affinity"))
    assert run.error is None
    plan = run.outputs["benchmarkPlan"]
    assert set(plan["levelMinutes"]) == {"1", "2", "4", "8", "16"}
    assert plan["sweepHours"] == pytest.approx(SEED_SWEEP_HOURS["session-affinity"], rel=0.15)
    assert any("benchmark plan" in line and "GPU-hours" in line for line in run.logs)


def _run_dir(tmp_path: Path, name: str, levels: dict[int, float]) -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"levels": {
        str(c): {"status": "complete", "summary": asdict(LevelSummary(c, 100, 0, r, None, None,
                                                                      None, None))}
        for c, r in levels.items()}}))
    return run


def test_a_measured_run_recalibrates_and_the_next_plan_says_how_far_it_was(
        tmp_path: Path) -> None:
    slower = solve_hardware(1, 0.8, 1.0, 8, 20)
    assert slower.miss_secs == pytest.approx((1 / 0.8 - 1 / 1.0) * 20 / 7)
    assert predicted_req_s(slower, 1, 8, 20, True) == pytest.approx(1.0)
    rr = _run_dir(tmp_path, "rr", {1: 0.8, 16: 11.0})
    sa = _run_dir(tmp_path, "sa", {1: 1.0, 16: 15.0})
    lines, measured = feedback(stack_settings("session-affinity"), rr, sa)
    assert lines == ["the previous prediction against what was measured (req/s):",
                     "  round-robin at 1: predicted 0.94, measured 0.80 (+18%)",
                     "  session-affinity at 1: predicted 1.16, measured 1.00 (+16%)",
                     "  round-robin at 16: predicted 15.04, measured 11.00 (+37%)",
                     "  session-affinity at 16: predicted 18.56, measured 15.00 (+24%)"]
    assert measured == solve_hardware(1, 0.8, 1.0, 8, 20)  # the lowest level both finished
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "plan", "--stack", "session-affinity",
         "--measured", str(rr), str(sa)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "round-robin at 1: predicted 0.94, measured 0.80 (+18%)" in out
    assert "session-affinity at 1: predicted 1.16, measured 1.00 (+16%)" in out
    assert "concurrency   1:   1.00 req/s" in out  # the next plan, on the measured hardware
    assert "your measured concurrency-1 level" in out


def test_feedback_reads_the_levels_both_profiles_finished_at_the_stack_s_shape(
        tmp_path: Path) -> None:
    """Only levels both runs finished are compared; the hardware is solved with the stack's
    own questions per video; a level measured at 0 req/s is no ratio; no level in common is
    an error naming both runs."""
    ten = parse_settings(stack_config("session-affinity", {"benchmarkQuestionsPerVideo": 10}),
                         "session-affinity")
    rr = _run_dir(tmp_path, "rr", {1: 0.8, 2: 0.0, 16: 11.0})
    sa = _run_dir(tmp_path, "sa", {1: 1.0, 2: 2.0})
    lines, measured = feedback(ten, rr, sa)
    assert [line.split(":")[0] for line in lines[1:]] == [
        "  round-robin at 1", "  session-affinity at 1", "  round-robin at 2",
        "  session-affinity at 2"]
    assert lines[3].endswith("measured 0.00 (+nan%)")
    assert measured == solve_hardware(1, 0.8, 1.0, 8, 10)
    other = _run_dir(tmp_path, "other", {4: 3.0})
    with pytest.raises(ValueError, match=f"{other} and {sa} share no finished level"):
        feedback(ten, other, sa)


def test_a_level_runs_the_chunks_its_stop_rule_needs() -> None:
    """t(T_QUANTILE, n-1) * cv / sqrt(n) <= 3%: at a 5% spread 19 chunks give 3.08%, 20 give
    2.99%; never fewer than MIN_BLOCKS, never more whole chunks than the videos make."""
    assert chunks_needed(1, 200, cv=0.05, within_pct=3.0) == 20
    assert chunks_needed(16, 200, cv=0.05, within_pct=3.0) == 12  # the videos run out
    assert chunks_needed(4, 200, cv=0.001, within_pct=3.0) == MIN_BLOCKS
    assert chunks_needed(4, 200, cv=0.05, within_pct=6.0) == 8  # 7 give 6.4%, 8 give 5.7%
    assert chunks_needed(8, 4, cv=0.05) == 1
    assert chunks_needed(1, 200, cv=0.05, within_pct=7.0) == 7  # 6 give 7.4%, 7 give 6.4%


def test_a_paired_level_runs_the_blocks_a_gain_needs() -> None:
    """A gain's spread is two chunks' (sqrt(2) x 5%): within 5 points takes 16 blocks (15 give
    5.06, 16 give 4.85), where one profile's rate takes 10 (9 give 5.1%, 10 give 4.7%)."""
    assert chunks_needed(1, 200, cv=0.05, within_pct=5.0, paired=True) == 16
    assert chunks_needed(1, 200, cv=0.05, within_pct=5.0) == 10
    one, both = (plan_sweep(200, 20, (1,), 8, 1, sticky, within_pct=5.0).levels[0]
                 for sticky in ([False], [False, True]))
    assert (one.chunks, both.chunks) == (10, 16)
    rr, sa = (predicted_req_s(H200, 1, 8, 20, affinity) for affinity in (False, True))
    assert both.req_s == one.req_s == rr  # the first profile's rate
    assert both.secs == pytest.approx(4000 / rr + 4000 / sa)  # every video, each profile
    assert both.adaptive_secs == pytest.approx(16 * (20 / rr + 20 / sa + 2 * CHUNK_START_SECS))


def test_a_paired_plan_prices_the_seed_s_design_on_its_own_levels() -> None:
    """The seed's design and two per-profile stacks: one download and two cold starts, at the
    plan's levels and spread; the two per-profile stacks stop at the seed's 3%."""
    plan = plan_sweep(200, 20, (1, 2), 8, 1, [False, True], cv=0.1, within_pct=5.0)
    rr, sa = (plan_sweep(200, 20, (1, 2), 8, 1, [affinity], cv=0.1) for affinity in (False, True))
    start = 5400 * 8 / 3600  # the second cold start of eight GPUs
    seed = plan.gpu_hours_of(rr.sweep_secs + sa.sweep_secs) + start
    stacks = plan.gpu_hours_of(rr.adaptive_secs + sa.adaptive_secs) + start
    mine = plan.gpu_hours_of(plan.adaptive_secs)
    assert design_lines(plan)[:2] == [
        f"  this stack: {mine:.1f} GPU-hours, one download and one cold start, both profiles "
        f"interleaved (gain within +-5 points): {mine / seed:.0%} of the seed's design",
        f"  the seed's design: {seed:.1f} GPU-hours (a deployment, a cold start and a full sweep "
        f"per profile); two adaptive per-profile stacks: {stacks:.1f}"]
    assert plan.lines()[-3:] == design_lines(plan)
    assert not any(line.startswith("  this stack:")  # one profile: no design to compare
                   for line in plan_sweep(200, 20, (1,), 8, 1, [True]).lines())


def test_a_stack_s_plan_follows_its_routing_and_its_gpus() -> None:
    """KV routing keeps a video's questions on one worker, as affinity does; a tensor-parallel
    worker holds its GPUs from the start and through the download."""
    rr, sa, kv = (stack_plan(stack_settings(s))
                  for s in ("round-robin", "session-affinity", "kv-routing"))
    assert kv.levels == sa.levels != rr.levels
    tp4 = stack_plan(stack_settings("vllm-super-tp4-rr"))
    assert (tp4.gpus, tp4.download_gpus) == (8, 4)
    assert tp4.gpu_hours_of(0) == pytest.approx((1800 * 4 + 5400 * 8) / 3600)


def test_the_compare_plan_says_each_level_s_blocks_and_its_precision_in_points() -> None:
    plan = stack_plan(stack_settings("compare"))
    lines = plan.lines()
    first = plan.levels[0]
    assert lines[0] == (
        f"  concurrency   1: {first.req_s:6.2f} req/s, full {first.secs / 60:6.1f} min, "
        f"adaptive {first.adaptive_secs / 60:5.1f} min ({first.chunks} blocks of 2 chunk(s), "
        f"{first.chunks * 2} videos)")
    assert lines[6] == (f"  adaptive sweep {plan.adaptive_secs / 3600:5.2f} h, "
                        f"{plan.adaptive_secs * 8 / 3600:5.1f} GPU-hours "
                        f"({plan.gpu_hours_of(plan.adaptive_secs):.1f} with download and graph "
                        "start)")
    assert "(stop within +-5 points)" in lines[7]
    big = plan_sweep(20000, 20, (1,), 8, 1, [False])  # GPU-hours at a precision that shows
    assert f"sweep {big.sweep_secs / 3600:5.2f} h, {big.sweep_secs * 8 / 3600:5.1f} GPU-hours " \
        in big.lines()[1]
    assert lines[8].startswith("  assumed: download 30 min, graph start 90 min; per request")


@pytest.mark.parametrize("affinity", [False, True])
def test_the_adaptive_seed_table_costs_at_most_35_percent_of_the_full_one(affinity: bool) -> None:
    plan = plan_sweep(200, 20, (1, 2, 4, 8, 16), 8, 1, [affinity])
    for level in plan.levels:
        chunks = chunks_needed(level.concurrency, 200, REPLICATE_CV)
        assert level.chunks == chunks
        assert level.adaptive_secs == pytest.approx(
            chunks * (level.concurrency * 20 / level.req_s + CHUNK_START_SECS))
    assert plan.adaptive_secs == pytest.approx(sum(p.adaptive_secs for p in plan.levels))
    assert plan.adaptive_secs <= plan.sweep_secs * 0.35
    assert plan.gpu_hours_of(plan.adaptive_secs) == pytest.approx(
        (1800 + 8 * (5400 + plan.adaptive_secs)) / 3600)
    lines = "\n".join(plan.lines())
    print(lines)
    assert f"full     sweep {plan.sweep_secs / 3600:5.2f} h, " \
        f"{plan.sweep_secs * 8 / 3600:5.1f} GPU-hours ({plan.gpu_hours:.1f} with" in lines
    assert f"adaptive sweep {plan.adaptive_secs / 3600:5.2f} h" in lines
    assert f"adaptive: {plan.adaptive_secs / plan.sweep_secs:.0%} of full's sweep " \
        "GPU-hours (stop within +-3%)" in lines
    # A looser stop rule needs fewer chunks.
    assert plan_sweep(200, 20, (1,), 8, 1, [affinity], within_pct=6.0).levels[0].chunks == 8
    # A wider spread needs more chunks, and costs more.
    assert plan_sweep(200, 20, (1,), 8, 1, [affinity], cv=0.1).adaptive_secs > (
        plan.levels[0].adaptive_secs)


def test_the_spread_between_chunks_is_measured_from_runs(tmp_path: Path) -> None:
    """Each level's variance over its mean squared, pooled by degrees of freedom (n - 1);
    a level of one chunk has no spread and is left out."""
    rr = write_run(tmp_path, "rr", {1: [chunk(r) for r in (0.9, 1.0, 1.1)],
                                    2: [chunk(r) for r in (2.0, 2.2)], 4: [chunk(4.0)]})
    sa = write_run(tmp_path, "sa", {1: [chunk(r) for r in (1.2, 1.2, 1.2, 1.2)]})
    cv2 = [(2, 0.01 / 1.0), (1, 0.02 / 2.1**2), (3, 0.0)]
    expected = (sum(df * v for df, v in cv2) / 6) ** 0.5
    assert measured_spread([rr, sa]) == pytest.approx(expected)
    ones = [write_run(tmp_path, name, {1: [chunk(1.0)]}) for name in ("one", "two")]
    with pytest.raises(ValueError, match=f"no level of {ones[0]}, {ones[1]} ran two or more "
                       "chunks: measure the spread on an adaptive sweep's runs"):
        measured_spread(ones)
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "plan", "--stack", "round-robin", "--spread",
         str(rr), str(sa)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"spread of req/s between chunks: {expected:.1%} (measured in {rr}, {sa})" \
        in result.stdout
    assert f"at a {expected:.1%} spread of req/s between chunks" in result.stdout


def _seconds(url: str, text: str, tokens: int = 1) -> float:
    body = {"model": SERVED_MODEL_NAME, "max_tokens": tokens, "min_tokens": tokens,
            "ignore_eos": True, "messages": [{"role": "user", "content": text}]}
    request = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()
    return time.monotonic() - started


@pytest.mark.rehearsal
@pytest.mark.parametrize("calibrated", [False, True])
def test_the_real_mocker_s_first_visit_costs_what_the_calibration_says(
        tmp_path: Path, calibrated: bool) -> None:
    """On the pinned mocker, one worker: the first visit of a ~8,400-token stand-in costs
    MOCK_MISS_SECS more than a repeat at speedup 1, and the H200's 0.58 s calibrated."""
    knobs = mock_calibration() if calibrated else None
    local = LocalDynamo({"round-robin": PROFILES["round-robin"]},
                        mock_model_dir(tmp_path / "model"), 1, tmp_path / "stack",
                        knobs.speedup_ratio if knobs else 1.0,
                        knobs.decode_speedup_ratio if knobs else 1.0, ready_timeout_secs=90.0)
    expected = H200.miss_secs if calibrated else MOCK_MISS_SECS
    with local as stack:
        costs = []
        for video in range(3):
            text = f"{standin_text(video, STANDIN_TOKENS)}\n\nWhat happens?"
            first, again = _seconds(stack.url, text), _seconds(stack.url, text)
            costs.append(first - again)
        hits = sorted(_seconds(stack.url, text, SEED_WORKLOAD.output_tokens) for _ in range(3))
    print(f"first-visit cost {sorted(costs)} s, expected {expected:.3f} s; cache hit {hits} s")
    assert sorted(costs)[1] == pytest.approx(expected, rel=0.3)
    if knobs:  # a hit and the mean pause before it: the H200's hit
        assert hits[1] == pytest.approx(knobs.hit_secs(), rel=0.1)
        assert hits[1] + knobs.pause_ms / 2000 == pytest.approx(H200.hit_secs, rel=0.1)
