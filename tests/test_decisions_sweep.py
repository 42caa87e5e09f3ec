"""The sweep's verdicts on a level and on its settings, as pure functions over a written
level folder: a failed request, an answer of another length or without a count, a level
kept from an earlier attempt, a resume of other settings. A wrong verdict keeps a level
that measured a broken server, or throws away hours of a good one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks.__main__ import build_parser
from benchmarks.aiperf_run import RECORDS_EXPORT, SUMMARY_EXPORT, LevelSummary, length_check
from benchmarks.sweep import (
    STATUS_COMPLETE,
    Dataset,
    SweepConfig,
    _level_problems,
    changes,
    check_dataset,
    config_from_args,
    config_problems,
    kept_chunks,
    level_chunks,
    level_complete,
    level_summary,
    replicate_interval,
    resolve_affinity,
    settings_changes,
    stopped_by,
)
from infra.names import RUN_ID_MAX_LEN, SEED_SHAPE, InputError


def record(tokens: int | None, phase: str = "profiling", error: str | None = None
           ) -> dict[str, Any]:
    metrics = {} if tokens is None else {"output_sequence_length": {"value": tokens}}
    return {"metadata": {"benchmark_phase": phase}, "metrics": metrics,
            **({"error": error} if error else {})}


def level_dir(tmp_path: Path, *records: dict[str, Any]) -> Path:
    tmp_path.joinpath(RECORDS_EXPORT).write_text(
        "".join(json.dumps(r) + "\n" for r in records))
    return tmp_path


def test_a_level_where_every_answer_got_the_asked_length_is_not_flagged(tmp_path: Path) -> None:
    assert length_check(level_dir(tmp_path, record(8), record(8)), 8) is None
    assert length_check(tmp_path / "no-records", 8) is None  # summary export only


def test_other_lengths_are_counted_with_their_range(tmp_path: Path) -> None:
    """Warm-up records and failed requests are not the level's answers."""
    found = length_check(level_dir(tmp_path, record(8), record(5), record(9), record(8),
                                    record(1, phase="warmup"), record(None, error="500")), 8)
    assert found == {"requests": 4, "other": 2, "min": 5, "max": 9}


def test_answers_without_a_count_are_counted_apart(tmp_path: Path) -> None:
    found = length_check(level_dir(tmp_path, record(None), record(None), record(8)), 8)
    assert found == {"requests": 3, "other": 0, "missing": 2, "min": 8, "max": 8}
    only_missing = length_check(level_dir(tmp_path, record(None)), 8)
    assert only_missing == {"requests": 1, "other": 0, "missing": 1, "min": 0, "max": 0}


def summary(requests: int = 100, errors: int = 0) -> LevelSummary:
    return LevelSummary(concurrency=4, requests=requests, errors=errors,
                        request_throughput=1.0, ttft_p50_ms=1.0, ttft_p90_ms=1.0,
                        request_latency_p50_ms=1.0, output_token_throughput=1.0)


CONFIG = SweepConfig(url="http://127.0.0.1:9", dataset=Path("d.jsonl"), output_tokens=8)


def test_one_failed_request_fails_a_level_and_none_passes(tmp_path: Path) -> None:
    assert _level_problems(summary(), None, CONFIG, tmp_path) == []
    [problem] = _level_problems(summary(119, 1), None, CONFIG, tmp_path)
    assert problem == (f"1 of 120 requests failed, and a level keeps none (details: "
                       f"{tmp_path / SUMMARY_EXPORT}, error_summary)")


def test_other_lengths_fail_a_level(tmp_path: Path) -> None:
    lengths = {"requests": 4, "other": 4, "min": 5, "max": 5}
    [problem] = _level_problems(summary(), lengths, CONFIG, tmp_path)
    assert problem == (
        "4 requests got other than 8 output tokens (min 5, max 5): the server stops early "
        "or ignores the length fields; fix it")


def test_answers_without_a_count_fail_a_level(tmp_path: Path) -> None:
    lengths = {"requests": 4, "other": 0, "missing": 3, "min": 8, "max": 8}
    [problem] = _level_problems(summary(), lengths, CONFIG, tmp_path)
    assert problem == (
        "3 answers carry no output token count (the server sent no `usage`), so their "
        "length is unchecked: make the server report usage in its stream")
    assert _level_problems(summary(), {**lengths, "missing": 0}, CONFIG, tmp_path) == []


def test_every_reason_to_fail_a_level_is_given(tmp_path: Path) -> None:
    lengths = {"requests": 4, "other": 1, "missing": 1, "min": 5, "max": 8}
    assert len(_level_problems(summary(3, 1), lengths, CONFIG, tmp_path)) == 3


def test_a_level_is_kept_only_when_complete_with_its_summary_on_disk(tmp_path: Path) -> None:
    complete = {"levels": {"4": {"status": STATUS_COMPLETE,
                                 "chunks": [{"dir": "chunk-00", "videos": ["v0"]},
                                            {"dir": "chunk-01", "videos": ["v1"]}]}}}
    assert not level_complete(tmp_path, complete, 4)  # its export is gone
    for chunk in ("chunk-00", "chunk-01"):
        folder = tmp_path / "concurrency-4" / chunk
        folder.mkdir(parents=True)
        (folder / SUMMARY_EXPORT).write_text("{}")
    assert level_complete(tmp_path, complete, 4)
    (folder / SUMMARY_EXPORT).unlink()
    assert not level_complete(tmp_path, complete, 4)  # one chunk's export is gone
    # A level from before chunks (its export in the level's own folder) is not kept.
    assert not level_complete(tmp_path, {"levels": {"4": {"status": STATUS_COMPLETE}}}, 4)
    assert not level_complete(tmp_path, complete, 8)
    assert not level_complete(tmp_path, {"levels": {"4": {"status": "failed"}}}, 4)
    assert not level_complete(tmp_path, {"levels": {"4": None}}, 4)
    assert not level_complete(tmp_path, {}, 4)


def test_affinity_is_the_profiles_unless_said() -> None:
    assert resolve_affinity(replace(CONFIG, profile="session-affinity")) is True
    assert resolve_affinity(replace(CONFIG, profile="round-robin")) is False
    assert resolve_affinity(replace(CONFIG, profile="session-affinity", affinity=False)) is False
    assert resolve_affinity(replace(CONFIG, profile="mine", affinity=True)) is True
    with pytest.raises(InputError) as err:
        resolve_affinity(replace(CONFIG, profile="mine"))
    assert err.value.heading == "bad sweep settings"
    assert "profile 'mine' is not one of ['kv-routing', 'round-robin', 'session-affinity']" \
        in str(err.value)


def dataset(videos: int = 16, *tokens: int) -> Dataset:
    return Dataset("x", {f"video-{i:04d}": [b"{}\n"] * 2 for i in range(videos)},
                   frozenset(tokens))


def test_the_dataset_must_ask_for_the_sweeps_output_tokens() -> None:
    check_dataset(CONFIG, dataset(16, 8))
    check_dataset(CONFIG, dataset(16))  # a dataset that names no length
    for other in (dataset(16, 16), dataset(16, 8, 16)):
        with pytest.raises(InputError, match="rebuild the dataset with --output-tokens 8") \
                as err:
            check_dataset(CONFIG, other)
        assert err.value.heading == "bad sweep settings"


def test_every_level_needs_one_whole_chunk_of_videos() -> None:
    with pytest.raises(InputError) as err:
        check_dataset(CONFIG, dataset(5))
    assert err.value.problems == [
        "--concurrency 8 16: a level at concurrency N sends chunks of N videos but the "
        "dataset has 5: use more videos or lower levels"]
    check_dataset(replace(CONFIG, concurrencies=(1, 5)), dataset(5))


def test_chunks_are_disjoint_whole_videos_in_order_and_leftovers_stay_unsent() -> None:
    videos = [f"v{i}" for i in range(7)]
    assert level_chunks(videos, 2) == [["v0", "v1"], ["v2", "v3"], ["v4", "v5"]]
    assert level_chunks(videos, 1) == [[v] for v in videos]
    assert level_chunks(videos, 7) == [videos]
    assert level_chunks(videos, 4) == [videos[:4]]
    assert level_chunks(videos, 8) == []


TIGHT, WIDE = [10.0, 10.1, 9.9], [10.0, 12.0, 8.0]


def test_a_level_stops_at_three_tight_chunks_runs_on_while_wide_and_when_videos_run_out(
) -> None:
    assert SEED_SHAPE.min_replicates == 3
    assert stopped_by(TIGHT, 5, CONFIG) == "interval"  # +-2.5% <= 3%
    assert stopped_by(TIGHT[:2], 5, CONFIG) is None  # fewer than three chunks
    assert stopped_by([10.0, 10.0], 5, CONFIG) is None
    assert stopped_by(WIDE, 5, CONFIG) is None
    assert stopped_by(WIDE, 0, CONFIG) == "videos"
    assert stopped_by(TIGHT[:2], 0, CONFIG) == "videos"
    assert stopped_by(TIGHT, 0, CONFIG) == "interval"
    assert stopped_by(WIDE, 5, replace(CONFIG, stop_within_pct=60.0)) == "interval"
    assert stopped_by(TIGHT, 5, replace(CONFIG, stop_within_pct=2.0)) is None
    assert stopped_by(WIDE, 1, CONFIG) is None  # one chunk left: it runs
    # The interval's edge: a half width equal to the setting stops, one just above doesn't.
    edge = replicate_interval(TIGHT).relative_half_width * 100
    assert stopped_by(TIGHT, 5, replace(CONFIG, stop_within_pct=edge)) == "interval"
    assert stopped_by(TIGHT, 5, replace(CONFIG, stop_within_pct=edge * 0.999)) is None
    full = replace(CONFIG, full=True)
    assert stopped_by(TIGHT, 5, full) is None
    assert stopped_by(TIGHT, 0, full) == "full"


def chunk(rate: float, requests: int = 20, errors: int = 0, ttft: float | None = 1.0
          ) -> LevelSummary:
    return replace(summary(requests, errors), request_throughput=rate, ttft_p50_ms=ttft,
                   prompt_cache_read_pct=None)


def test_a_levels_figures_are_the_mean_of_its_chunks_and_its_counts_their_sums() -> None:
    level = level_summary([chunk(1.0, 20, ttft=10.0), chunk(2.0, 19, 1, ttft=None),
                           chunk(3.0, 20, ttft=20.0)])
    assert level == LevelSummary(
        concurrency=4, requests=59, errors=1, request_throughput=2.0, ttft_p50_ms=15.0,
        ttft_p90_ms=1.0, request_latency_p50_ms=1.0, output_token_throughput=1.0,
        prompt_cache_read_pct=None)
    assert level_summary([chunk(1.5)]) == chunk(1.5)  # a level of one chunk is that chunk


def test_a_resume_keeps_the_finished_chunks_in_order(tmp_path: Path) -> None:
    planned = [["v0"], ["v1"], ["v2"]]
    chunks = [{"dir": f"chunk-0{k}", "videos": planned[k]} for k in range(3)]
    for entry in chunks[:2]:
        (tmp_path / entry["dir"]).mkdir()
        (tmp_path / entry["dir"] / SUMMARY_EXPORT).write_text("{}")
    assert kept_chunks(tmp_path, {"chunks": chunks}, planned) == chunks[:2]  # no export
    assert kept_chunks(tmp_path, {"chunks": chunks[1:]}, planned) == []  # not in order
    assert kept_chunks(tmp_path, {"chunks": chunks}, [["v1"], ["v0"]]) == []  # other videos
    assert kept_chunks(tmp_path, {}, planned) == []
    assert kept_chunks(tmp_path, {"chunks": [{"videos": ["v0"]}]}, planned) == []  # no folder


def test_the_cli_options_are_the_run_objects_fields() -> None:
    args = build_parser("sweep").parse_args([
        "sweep", "--url", "http://127.0.0.1:9", "--concurrency", "2", "4", "--full",
        "--stop-within-pct", "5", "--seed", "7", "--out", "r", "--note", "a",
        "--deployment", "replicas=8", "--deployment", "image=x=y", "--request-timeout", "9"])
    config = config_from_args(args)
    assert config == replace(
        SweepConfig(url="http://127.0.0.1:9", dataset=Path(".")), concurrencies=(2, 4),
        full=True, stop_within_pct=5.0, random_seed=7, run_dir=Path("r"), notes=("a",),
        deployment={"replicas": "8", "image": "x=y"}, request_timeout_secs=9.0)
    defaults = config_from_args(build_parser("sweep").parse_args(
        ["sweep", "--url", "http://127.0.0.1:9"]))
    assert defaults == SweepConfig(url="http://127.0.0.1:9", dataset=Path("."))
    assert SweepConfig.stop_within_pct == SEED_SHAPE.stop_within_pct


def problems_of(tmp_path: Path, **changes: Any) -> list[str]:
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("{}\n")
    return config_problems(replace(CONFIG, dataset=dataset, **changes))


def test_good_settings_have_no_problem(tmp_path: Path) -> None:
    assert problems_of(tmp_path) == []
    assert problems_of(tmp_path, url="https://frontend.test:8000/v1", run_id="a" * 30,
                       profile="My_profile.2-b", output_tokens=1,
                       tokenizer="org/name", stop_within_pct=0.5) == []
    (tmp_path / "tok").mkdir()
    assert problems_of(tmp_path, tokenizer=str(tmp_path / "tok")) == []


BAD_SETTINGS = {
    "url": ({"url": "http://"}, "--url must look like http://HOST:PORT (got 'http://')"),
    "url spaces": ({"url": "http:// x"}, "--url must look like"),
    "model": ({"model": ""}, "--model must not be empty"),
    "levels": ({"concurrencies": ()}, "--concurrency needs at least one level"),
    "output tokens": ({"output_tokens": 0}, "--output-tokens must be >= 1 (got 0)"),
    "run id": ({"run_id": "Run"}, "--run-id 'Run': use lowercase letters, digits and '-' "
                                  f"(at most {RUN_ID_MAX_LEN}; it names folders"),
    "long run id": ({"run_id": "a" * (RUN_ID_MAX_LEN + 1)}, "--run-id 'aaaa"),
    "profile": ({"profile": "-x"}, "--profile '-x': use letters, digits, '.', '_' or '-'"),
    "profile end": ({"profile": "a/b"}, "--profile 'a/b'"),
    "tokenizer": ({"tokenizer": "./nowhere"}, "--tokenizer ./nowhere: no such directory"),
    "tokenizer path": ({"tokenizer": "/nowhere"}, "--tokenizer /nowhere: no such directory"),
    "stop within": ({"stop_within_pct": 0.0}, "--stop-within-pct must be above 0 (got 0); "
                                               "--full sends every video instead"),
}


@pytest.mark.parametrize("case", sorted(BAD_SETTINGS))
def test_each_bad_setting_is_named_alone(tmp_path: Path, case: str) -> None:
    change, expected = BAD_SETTINGS[case]
    [problem] = problems_of(tmp_path, **change)
    assert problem.startswith(expected)


def test_a_missing_dataset_says_how_to_build_it(tmp_path: Path) -> None:
    [problem] = config_problems(replace(CONFIG, dataset=tmp_path / "gone.jsonl"))
    assert problem == (f"dataset {tmp_path / 'gone.jsonl'} does not exist: build it with "
                       "benchmarks.dataset.build_dataset (the CLI builds it from --videos)")


def test_a_resume_names_each_setting_that_differs() -> None:
    old = {"model": "m", "output_tokens": 8, "notes": ["a"],
           "deployment": {"images": {"worker": "w:1"}, "replicas": 8},
           "dataset": {"sha256": "a" * 64, "path": "/x", "info": {"videos": 2, "path": "/x"}}}
    assert settings_changes(old, {**old, "notes": ["b"]}) == []
    moved = {**old["dataset"], "path": "/y", "info": {"videos": 2, "path": "/y"}}
    assert settings_changes(old, {**old, "dataset": moved}) == []
    new = {**old, "output_tokens": 16,
           "deployment": {"images": {"worker": "w:2"}, "replicas": 8},
           "dataset": {"sha256": "b" * 64, "info": {"videos": 3}}}
    assert settings_changes(old, new) == [
        "output_tokens: 8 -> 16", "deployment.images.worker: 'w:1' -> 'w:2'",
        "dataset.videos: 2 -> 3"]
    same_info = {**old, "dataset": {"sha256": "b" * 64, "info": {"videos": 2}}}
    assert settings_changes(old, same_info) == [
        f"dataset contents: sha256 {'a' * 12} -> {'b' * 12}"]
    assert settings_changes(old, {**old, "model": None, "replicas": 4}) == [
        "model: 'm' -> None"]


def test_changes_name_keys_on_either_side_and_values_that_stop_being_mappings() -> None:
    assert changes("d", {"a": 1}, {"a": 1, "b": 2}) == ["d.b: None -> 2"]
    assert changes("d", {"a": 1, "b": 2}, {"a": 1}) == ["d.b: 2 -> None"]
    assert changes("d", {"a": 1}, None) == ["d: {'a': 1} -> None"]
    assert changes("d", None, {"a": 1}) == ["d: None -> {'a': 1}"]
    # Keys of mixed types (a manifest's levels by number, facts by name) sort as text.
    assert changes("d", {2: "x", "b": 1, 10: "y"}, {}) == [
        "d.10: 'y' -> None", "d.2: 'x' -> None", "d.b: 1 -> None"]


def test_progress_counts_measured_requests_and_skips_a_line_being_written(
        tmp_path: Path) -> None:
    from benchmarks.aiperf_run import progress_counts

    folder = level_dir(tmp_path, record(8), record(None, error="500"), record(8, "warmup"),
                       record(8))
    with open(folder / RECORDS_EXPORT, "a") as records:
        records.write('{"metadata": {"benchmark_ph')
    assert progress_counts(folder / RECORDS_EXPORT) == (2, 1)
    assert progress_counts(tmp_path / "not-yet") == (0, 0)
