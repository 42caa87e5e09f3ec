"""The server-side evidence of a level and its verdict: the prefix-cache share from the
frontend's counters, the worker of each request from AIPerf's raw export, and where that
evidence contradicts the level's setup (workers replaced, affinity not kept)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.aiperf_run import RAW_EXPORT
from benchmarks.evidence import (
    ATTRIBUTION_FILE,
    Attribution,
    FrontendCounts,
    attribute_raw_export,
    chunk_evidence,
    evidence_line,
    frontend_counts,
    level_attribution,
    level_evidence,
    prefix_cache_hit_pct,
    routing_problems,
    stickiness,
    worker_id_from_body,
    worker_of_record,
    worker_spread,
)

PAGE = """# HELP dynamo_frontend_cached_tokens_sum cached
dynamo_frontend_cached_tokens_sum{model="a"} 30
dynamo_frontend_cached_tokens_sum{model="b",x="y"} 10.5
dynamo_frontend_cached_tokens_count 4
dynamo_frontend_input_sequence_tokens_sum{model="a"} 100
dynamo_frontend_input_sequence_tokens_sum_total 999
dynamo_frontend_output_tokens_sum 7
"""


def test_frontend_counters_are_summed_over_models_and_others_ignored() -> None:
    assert frontend_counts(PAGE) == FrontendCounts(40.5, 100.0, 4.0)
    assert frontend_counts("") == FrontendCounts(0.0, 0.0, 0.0)


def test_the_prefix_cache_share_is_of_the_levels_own_tokens() -> None:
    before, after = FrontendCounts(10, 100, 2), FrontendCounts(40, 200, 5)
    assert prefix_cache_hit_pct(before, after) == pytest.approx(30.0)
    # No prompt tokens in the level, or no response reported a cached count: unknown.
    assert prefix_cache_hit_pct(before, FrontendCounts(40, 100, 5)) is None
    assert prefix_cache_hit_pct(before, FrontendCounts(40, 90, 5)) is None
    assert prefix_cache_hit_pct(before, FrontendCounts(10, 200, 2)) is None
    assert prefix_cache_hit_pct(before, FrontendCounts(10, 101, 3)) == 0.0


def test_worker_ids_in_every_shape_the_frontend_sends() -> None:
    assert worker_id_from_body({"nvext": {"worker_id": {"prefill_worker_id": 7}}}) == 7
    assert worker_id_from_body({"nvext": {"worker_id": "12"}}) == 12
    assert worker_id_from_body({"nvext": {"worker_id": "w-1"}}) is None
    assert worker_id_from_body({"nvext": {"worker_id": 1.5}}) is None
    assert worker_id_from_body({"nvext": {"worker_id": {}}}) is None
    assert worker_id_from_body({"nvext": "worker_id"}) is None
    assert worker_id_from_body({"nvext": {}}) is None


def packet(body: Any) -> dict[str, Any]:
    return {"value": json.dumps(body) if not isinstance(body, str) else body}


def test_the_worker_of_a_record_is_the_first_packet_that_names_one() -> None:
    streamed = {"responses": [{"packets": [
        packet("data: not json worker_id"), packet({"choices": []}),
        packet({"nvext": {"worker_id": 3}}), packet({"nvext": {"worker_id": 4}})]}]}
    assert worker_of_record(streamed) == 3
    whole = {"responses": [{"packets": None, "text": json.dumps({"nvext": {"worker_id": 5}})}]}
    assert worker_of_record(whole) == 5
    later = {"responses": [{"packets": [{"value": 7}, packet('["worker_id"]'),
                                        packet({"nvext": {"worker_id": "x"}})]},
                           {"text": json.dumps({"nvext": {"worker_id": 6}})}]}
    assert worker_of_record(later) == 6
    assert worker_of_record({"responses": None}) is None
    assert worker_of_record({}) is None


def raw_record(video: str | None, worker: int | None, phase: str = "profiling"
               ) -> dict[str, Any]:
    body = {"nvext": {"worker_id": worker}} if worker is not None else {"choices": []}
    metadata = {"benchmark_phase": phase, **({"conversation_id": video} if video else {})}
    return {"metadata": metadata, "responses": [{"packets": [packet(body)]}]}


def write_raw(folder: Path, *records: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RAW_EXPORT).write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


RECORDS = (raw_record("v1", 1), raw_record("v1", 2), raw_record("v2", 2),
           raw_record(None, 3), raw_record("v3", None), raw_record("v1", 9, "warmup"))


def test_the_raw_export_is_read_per_video_warm_up_left_out(tmp_path: Path) -> None:
    attribution = attribute_raw_export(write_raw(tmp_path, *RECORDS) / RAW_EXPORT)
    assert attribution == Attribution({"v1": [1, 2], "v2": [2]}, 2)
    assert sum(map(len, attribution.workers_by_video.values())) + attribution.unattributed == 5


def test_stickiness_ignores_videos_without_a_worker() -> None:
    figures = stickiness({"v1": [1, 1], "v2": [], "v3": [2, 3]})
    assert (figures.videos, figures.share_single_worker, figures.mean_workers_per_video,
            figures.workers_seen) == (2, 0.5, 1.5, 3)
    assert stickiness({"v": []}) == stickiness({})
    assert stickiness({}).share_single_worker == 0.0


def test_a_chunks_attribution_is_saved_and_the_raw_export_then_goes(tmp_path: Path) -> None:
    folder = write_raw(tmp_path / "level", *RECORDS)
    before = FrontendCounts(0, 100, 0)
    evidence = chunk_evidence(folder, before, FrontendCounts(50, 200, 3), True)
    assert evidence == {"prefix_cache_hit_pct": 50.0, "routing": {
        "videos": 2, "share_single_worker": 0.5, "mean_workers_per_video": 1.5,
        "workers_seen": 2, "workers": [1, 2], "requests_per_worker_min": 1,
        "requests_per_worker_max": 2, "unattributed": 2}}
    assert not (folder / RAW_EXPORT).exists()
    assert json.loads((folder / ATTRIBUTION_FILE).read_text()) == {
        "workers_by_video": {"v1": [1, 2], "v2": [2]}, "unattributed": 2}
    # Read again from the saved file alone, its raw export already gone.
    assert level_attribution(folder) == Attribution({"v1": [1, 2], "v2": [2]}, 2)
    assert chunk_evidence(folder, None, None, True)["routing"] == evidence["routing"]


def test_evidence_is_only_what_was_measured(tmp_path: Path) -> None:
    folder = write_raw(tmp_path / "level", *RECORDS)
    assert chunk_evidence(folder, None, FrontendCounts(), False) == {}
    assert chunk_evidence(folder, FrontendCounts(), None, False) == {}
    assert (folder / RAW_EXPORT).exists()
    with pytest.raises(FileNotFoundError) as missing:
        level_attribution(tmp_path / "empty")
    assert str(missing.value) == (
        f"{tmp_path / 'empty' / RAW_EXPORT} is missing: this level ran without AIPerf's raw "
        "export, so the worker of each request is unknown (rerun the level with "
        "--attribute-workers)")


def test_a_levels_evidence_is_over_all_its_chunks(tmp_path: Path) -> None:
    """The routing over every video of the level's chunks (read back from each chunk's
    saved attribution); the prefix-cache share the mean of the chunks that measured one."""
    one = write_raw(tmp_path / "chunk-00", raw_record("v1", 1), raw_record("v1", 1))
    two = write_raw(tmp_path / "chunk-01", raw_record("v2", 2), raw_record("v2", 3),
                    raw_record(None, 3))
    chunks = [chunk_evidence(one, FrontendCounts(0, 100, 0), FrontendCounts(50, 200, 3), True),
              chunk_evidence(two, FrontendCounts(0, 100, 0), FrontendCounts(10, 200, 3), True)]
    assert chunks[0]["routing"]["workers_seen"] == 1
    entries = [{"dir": folder.name, "frontend": found, "prefix_cache_hit_ceiling_pct": ceiling}
               for folder, found, ceiling in zip((one, two), chunks, (50.0, 40.0), strict=True)]
    assert level_evidence(tmp_path, entries) == {
        "prefix_cache_hit_pct": 30.0, "prefix_cache_hit_ceiling_pct": 45.0, "routing": {
            "videos": 2, "share_single_worker": 0.5, "mean_workers_per_video": 1.5,
            "workers_seen": 3, "workers": [1, 2, 3], "requests_per_worker_min": 1,
            "requests_per_worker_max": 2, "unattributed": 1}}

    def level(*found: dict[str, Any]) -> dict[str, Any]:  # chunks as the manifest holds them
        return level_evidence(tmp_path, [{"dir": "-", "frontend": f} for f in found])

    unknown = [{"prefix_cache_hit_pct": None}, {"prefix_cache_hit_pct": 20.0}, {}]
    assert level(*unknown) == {"prefix_cache_hit_pct": 20.0,
                               "prefix_cache_hit_ceiling_pct": None}
    assert level({"prefix_cache_hit_pct": None}) == {"prefix_cache_hit_pct": None,
                                                     "prefix_cache_hit_ceiling_pct": None}
    assert level({}, {}) == {}
    assert level_evidence(tmp_path, [{"dir": "-"}]) == {}  # a chunk with no `frontend` entry


def test_an_empty_attribution_spreads_nothing() -> None:
    assert worker_spread(Attribution({}, 3)) == {
        "videos": 0, "share_single_worker": 0.0, "mean_workers_per_video": 0.0,
        "workers_seen": 0, "workers": [], "requests_per_worker_min": 0,
        "requests_per_worker_max": 0, "unattributed": 3}


def routing(seen: int, videos: int = 4, single: float = 1.0) -> dict[str, Any]:
    return {"workers_seen": seen, "videos": videos, "share_single_worker": single}


def test_more_workers_than_the_graph_has_over_the_run_fail_a_level() -> None:
    assert routing_problems(routing(8), 8, False) == []
    assert routing_problems(routing(9), None, False) == []
    [problem] = routing_problems(routing(9), 8, False)
    assert problem == ("9 worker ids answered but the graph has 8 workers: workers were "
                       "replaced during the run (a rollout?); rerun it once the graph is "
                       "settled")


def test_affinity_fails_a_level_where_a_video_moved() -> None:
    assert routing_problems(routing(8, single=0.75), 8, False) == []
    assert routing_problems(routing(8, single=1.0), 8, True) == []
    assert routing_problems(routing(0, videos=0, single=0.0), 8, True) == []
    [problem] = routing_problems(routing(8, single=0.75), 8, True)
    assert problem == ("session affinity is on but 1 of 4 videos were served by more "
                       "than one worker: the frontend did not keep its sessions (its "
                       "affinity flags, or a restart during the level)")
    assert len(routing_problems(routing(9, single=0.5), 8, True)) == 2
    assert routing_problems(None, 8, True) == routing_problems({}, 8, True) == []


def test_the_evidence_line_says_what_was_found() -> None:
    assert evidence_line({}) == "no server-side evidence"
    spread = {"share_single_worker": 0.5, "workers_seen": 2, "requests_per_worker_min": 1,
              "requests_per_worker_max": 3}
    assert evidence_line({"prefix_cache_hit_pct": 42.4, "routing": spread}) == (
        "42% of prompt tokens from prefix caches; 50% of videos on one worker, 2 workers "
        "served 1 to 3 requests each")
