"""The run contract (infra/run.py): what a run may send and how many fresh videos that takes,
what is wrong with a workload in words the stack, the sweep and the rehearsal share, and the
cluster run as the program hands it to the pods and `collect`."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from infra.run import (
    RETRY_CHUNKS,
    VIDEO_INDEX_BITS,
    Run,
    Workload,
    run_seed,
)

SEED = Workload()


def test_a_chunk_is_the_levels_concurrency_in_videos_or_all_of_them_when_full() -> None:
    assert [SEED.chunk_videos(c) for c in (1, 16)] == [1, 16]
    assert [SEED.max_blocks(c) for c in (1, 16, 200, 201)] == [200, 12, 1, 0]
    full = replace(SEED, full=True)
    assert full.chunk_videos(16) == 200 and full.max_blocks(16) == 1
    assert SEED.max_blocks(0) == 200  # a bad level counts as one video, never divides by 0


def test_a_run_takes_every_block_it_may_run_and_room_for_retries() -> None:
    """The seed's shape: 200 + 200 + 200 + 200 + 192 videos a profile, plus three retries of
    the largest chunk (16)."""
    assert SEED.videos_needed(1) == 992 + RETRY_CHUNKS * 16 == 1040
    assert SEED.videos_needed(2) == 2080
    assert replace(SEED, full=True).videos_needed(1) == 5 * 200 + RETRY_CHUNKS * 200
    assert replace(SEED, concurrencies=()).videos_needed(1) == 0


def problems(**changes: object) -> dict[str, str]:
    return dict(replace(SEED, **changes).problems())


def test_the_seed_workload_has_no_problem_and_each_edge_holds() -> None:
    assert problems() == {}
    assert problems(questions_per_video=1) == problems(questions_per_video=20) == {}
    assert problems(videos=16) == {}  # exactly the highest level
    assert problems(stop_within_pct=50.0) == problems(output_tokens=1) == {}


@pytest.mark.parametrize("change,field,words", [
    ({"questions_per_video": 0}, "questions_per_video", "0 is out of range; use 1..20 (the "
     "benchmark's questions about a video)"),
    ({"questions_per_video": 21}, "questions_per_video", "21 is out of range; use 1..20"),
    ({"videos": 15}, "videos", "15 videos fill no chunk at concurrency 16"),
    ({"output_tokens": 0}, "output_tokens", "0 is out of range; use at least 1"),
    ({"stop_within_pct": 0.0}, "stop_within_pct", "0 is out of range; use above 0 and at most"),
    ({"stop_within_pct": 50.5}, "stop_within_pct", "50.5 is out of range"),
    ({"concurrencies": (1, 1)}, "concurrencies", "levels repeat"),
])
def test_each_problem_names_its_field_and_the_fix(change: dict, field: str, words: str) -> None:
    found = problems(**change)
    assert list(found) == [field] and found[field].startswith(words)


def test_more_fresh_videos_than_a_run_can_make_distinct_is_refused() -> None:
    limit = 2**VIDEO_INDEX_BITS
    wide = replace(SEED, videos=4000, concurrencies=(1, 2, 4, 8, 16, 32, 64, 128, 256))
    assert wide.videos_needed(2) > limit
    assert dict(wide.problems(2))["videos"].startswith(
        f"4000 videos per level x 9 levels x 2 profile(s) need {wide.videos_needed(2)} fresh "
        f"videos, more than the {limit} a run can make distinct")
    assert wide.videos_needed(1) <= limit and "videos" not in dict(wide.problems())  # one
    assert replace(SEED, videos=4000).videos_needed(2) <= limit
    assert dict(replace(SEED, videos=4000).problems(2)) == {}
    # One level of one video a chunk: the edge is exact (3 retries + the videos).
    one = replace(SEED, concurrencies=(1,))
    assert dict(replace(one, videos=limit - RETRY_CHUNKS).problems()) == {}
    assert "videos" in dict(replace(one, videos=limit - RETRY_CHUNKS + 1).problems())


def test_no_level_is_one_problem_not_a_videos_one_too() -> None:
    """A level out of range is the levels' problem alone; the highest allowed still counts."""
    assert problems(concurrencies=(), videos=0) == {"concurrencies": "needs at least one level"}
    assert list(problems(concurrencies=(1025,), videos=70_000)) == ["concurrencies"]
    assert list(problems(concurrencies=(1024,), videos=65_536)) == ["videos"]


def test_refusals_put_each_problem_after_its_settings_name() -> None:
    wide = replace(SEED, videos=4000, concurrencies=(1, 2, 4, 8, 16, 32, 64, 128, 256))
    assert wide.refusals(str) == [] and len(wide.refusals(str, profiles=2)) == 1
    assert replace(SEED, videos=8).refusals(lambda f: f"--{f}") == [
        "--videos: 8 videos fill no chunk at concurrency 16 (a chunk is as many videos as its "
        "level's concurrency): use at least 16 videos or lower levels"]


def test_a_run_id_seeds_its_videos_the_same_each_time_and_another_differently() -> None:
    assert run_seed("run-1") == run_seed("run-1") != run_seed("run-2")
    assert run_seed("run-1") == 1315296251  # its SHA-256's first 8 hex digits, in base 16


RUN = Run(stack="compare", run_id="run-1", namespace="ns", cache_claim="c", image="i",
          workload=replace(SEED, concurrencies=(1, 16), seed=7),
          frontends=(("round-robin", "svc-rr", False), ("session-affinity", "svc-sa", True)),
          deployment=(("graph_uid", "u"),), pod_placement={"nodeSelector": {"a": "b"}})


def test_a_run_survives_its_trip_through_json_to_a_pod() -> None:
    """What the program exports and the pods parse: the same run, tuples and all."""
    back = Run.from_output(json.loads(json.dumps(RUN.output())))
    assert back == RUN
    assert back.workload.concurrencies == (1, 16)
    assert Run.from_output({**RUN.output(), "workload": {}}).workload == Workload()


def test_a_runs_targets_and_names_are_its_frontends_and_stack() -> None:
    assert RUN.targets == [
        ("round-robin", "http://svc-rr.ns.svc:8000", False),
        ("session-affinity", "http://svc-sa.ns.svc:8000", True)]
    assert RUN.video_base_url == "http://cosmos3-videos-compare.ns.svc:80/"
    assert RUN.results_path == "benchmarks/compare/run-1"
    assert (RUN.smoke_job, RUN.sweep_job) == ("cosmos3-smoke-compare-run-1",
                                             "cosmos3-sweep-compare-run-1")
    out = replace(RUN, sweep=False, smoke=False).output()
    assert out["sweepJob"] == out["smokeJob"] == out["followCommand"] == ""
    assert RUN.output()["collectCommand"] == "./run.sh collect --stack compare --run-id run-1"
