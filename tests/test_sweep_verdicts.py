"""The sweep's verdicts on a chunk, a level and its settings, as pure functions over a written
level folder: a failed request, an answer of another length or without a count, a warm
chunk, a level kept from an earlier attempt, a resume of other settings, when a level stops.
A wrong verdict keeps a level that measured a broken server, or throws away hours of a good one."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import t as student_t

from benchmarks.__main__ import build_parser
from benchmarks.aiperf_run import RECORDS_EXPORT, SUMMARY_EXPORT, LevelSummary, length_check
from benchmarks.dataset import VideoSource
from benchmarks.sweep import (
    CEILING_MARGIN_PCT,
    STATUS_COMPLETE,
    UNATTRIBUTED_MAX,
    SweepConfig,
    Target,
    changes,
    chunk_problems,
    cold_ceiling_pct,
    config_from_args,
    config_from_run,
    config_problems,
    evidence_problems,
    kept_chunks,
    level_complete,
    level_summary,
    paired_gain,
    replicate_interval,
    resolve_affinity,
    settings_changes,
    stopped_by,
)
from infra.names import RUN_ID_MAX_LEN, InputError
from infra.run import MIN_BLOCKS, T_QUANTILE, Run, Workload
from tests.support_aiperf_exports import level_dir, record


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


CONFIG = SweepConfig(targets=(Target("round-robin", "http://127.0.0.1:9"),),
                     source=VideoSource(base_url="http://127.0.0.1:9/"),
                     workload=Workload(output_tokens=8))


def problems(tmp_path: Path, result: LevelSummary, lengths: dict | None = None,
             expected: int | None = None) -> list[str]:
    """The chunk's problems, its records file written (its lengths given apart)."""
    level_dir(tmp_path)
    sent = result.requests + result.errors
    return chunk_problems(result, lengths, sent if expected is None else expected, CONFIG,
                          tmp_path)


def test_one_failed_request_fails_a_level_and_none_passes(tmp_path: Path) -> None:
    assert problems(tmp_path, summary()) == []
    [problem] = problems(tmp_path, summary(119, 1))
    assert problem == (f"1 of 120 requests failed, and a level keeps none (details: "
                       f"{tmp_path / SUMMARY_EXPORT}, error_summary)")


def test_other_lengths_fail_a_level(tmp_path: Path) -> None:
    lengths = {"requests": 4, "other": 4, "min": 5, "max": 5}
    [problem] = problems(tmp_path, summary(), lengths)
    assert problem == (
        "4 requests got other than 8 output tokens (min 5, max 5): the server stops early "
        "or ignores the length fields; fix it")


def test_answers_without_a_count_fail_a_level(tmp_path: Path) -> None:
    lengths = {"requests": 4, "other": 0, "missing": 3, "min": 8, "max": 8}
    [problem] = problems(tmp_path, summary(), lengths)
    assert problem == (
        "3 answers carry no output token count (the server sent no `usage`), so their "
        "length is unchecked: make the server report usage in its stream")
    assert problems(tmp_path, summary(), {**lengths, "missing": 0}) == []


def test_a_chunk_of_other_than_its_videos_requests_fails(tmp_path: Path) -> None:
    """AIPerf measured 99 of 100 (or 101): the level is not the workload it claims."""
    for measured in (99, 101):
        [problem] = problems(tmp_path, summary(measured), expected=100)
        assert problem == (f"{measured} requests were measured of the 100 its videos ask "
                           "(AIPerf skipped or repeated some): rerun the level")


def test_a_chunk_without_its_per_request_records_fails(tmp_path: Path) -> None:
    [problem] = chunk_problems(summary(), None, 100, CONFIG, tmp_path / "gone")
    assert problem == (f"no per-request records ({tmp_path / 'gone' / RECORDS_EXPORT}), so the "
                       "answers' lengths and the level's percentiles are unknown: AIPerf must "
                       "export its records")


def test_every_reason_to_fail_a_level_is_given(tmp_path: Path) -> None:
    lengths = {"requests": 4, "other": 1, "missing": 1, "min": 5, "max": 8}
    assert len(problems(tmp_path, summary(3, 1), lengths, expected=5)) == 4


def test_the_cold_ceiling_is_every_request_but_each_videos_first_on_each_worker() -> None:
    """The seed's shape on eight workers: round robin (8 workers a video) 60%, affinity 95%;
    without attribution each video's first request anywhere; an empty chunk reaches none."""
    spread = {"videos": 16, "mean_workers_per_video": 8.0}
    assert cold_ceiling_pct(320, 16, spread) == pytest.approx(60.0)
    assert cold_ceiling_pct(320, 16, {**spread, "mean_workers_per_video": 1.0}) == 95.0
    assert cold_ceiling_pct(320, 16, None) == cold_ceiling_pct(320, 16, {"videos": 0}) == 95.0
    assert cold_ceiling_pct(0, 0, None) == 0.0


def test_a_chunk_above_its_cold_ceiling_or_mostly_unattributed_fails() -> None:
    edge = 60.0 + CEILING_MARGIN_PCT
    assert evidence_problems({"prefix_cache_hit_pct": edge}, 60.0, 100) == []
    assert evidence_problems({"prefix_cache_hit_pct": None}, 60.0, 100) == []
    [warm] = evidence_problems({"prefix_cache_hit_pct": 99.7}, 60.0, 100)
    assert warm == ("99.7% of prompt tokens came from prefix caches, above the 60.0% a chunk "
                    "of fresh videos can reach: the workers had seen these videos (a run on "
                    "this graph with the same seed?); rerun with a new run id")
    allowed = int(UNATTRIBUTED_MAX * 200)
    assert evidence_problems({"routing": {"unattributed": allowed}}, 60.0, 200) == []
    [unknown] = evidence_problems({"routing": {"unattributed": allowed + 1}}, 60.0, 200)
    assert unknown == (f"{allowed + 1} of 200 responses named no worker: the frontend does not "
                       "report worker ids (nvext extra_fields), so routing is unchecked; use "
                       "Dynamo's frontend or drop --attribute-workers")
    # A chunk whose routing counted no unattributed response, of one request, passes.
    assert evidence_problems({"routing": {"videos": 1}}, 60.0, 1) == []


def test_a_level_is_kept_only_when_complete_with_its_summary_on_disk(tmp_path: Path) -> None:
    complete = {"levels": {"4": {"status": STATUS_COMPLETE,
                                 "chunks": [{"dir": "chunk-00", "block": 0},
                                            {"dir": "chunk-01", "block": 1}]}}}
    assert not level_complete(tmp_path, complete, 4)  # its export is gone
    for chunk in ("chunk-00", "chunk-01"):
        folder = tmp_path / "concurrency-4" / chunk
        folder.mkdir(parents=True)
        (folder / SUMMARY_EXPORT).write_text("{}")
    assert level_complete(tmp_path, complete, 4)
    (folder / SUMMARY_EXPORT).unlink()
    assert not level_complete(tmp_path, complete, 4)  # one chunk's export is gone
    # A level from before blocks (its export in the level's own folder) is not kept.
    assert not level_complete(tmp_path, {"levels": {"4": {"status": STATUS_COMPLETE}}}, 4)
    assert not level_complete(tmp_path, complete, 8)
    assert not level_complete(tmp_path, {"levels": {"4": {"status": "failed"}}}, 4)
    assert not level_complete(tmp_path, {"levels": {"4": None}}, 4)
    assert not level_complete(tmp_path, {}, 4)


def test_affinity_is_the_profiles_unless_said() -> None:
    assert resolve_affinity(Target("session-affinity", "u")) is True
    assert resolve_affinity(Target("round-robin", "u")) is False
    assert resolve_affinity(Target("session-affinity", "u", False)) is False
    assert resolve_affinity(Target("mine", "u", True)) is True
    with pytest.raises(InputError) as err:
        resolve_affinity(Target("mine", "u"))
    assert err.value.heading == "bad sweep settings"
    assert "profile 'mine' is not one of ['kv-routing', 'round-robin', 'session-affinity']" \
        in str(err.value)


def test_the_workload_is_judged_as_the_stack_judges_it() -> None:
    """The pods' checks are Workload.problems, named by the sweep's options."""
    flags = "\n".join(config_problems(replace(CONFIG, workload=Workload(
        videos=8, questions_per_video=21, stop_within_pct=0))))
    assert "--videos-per-level: 8 videos fill no chunk at concurrency 16" in flags
    assert "--questions-per-video: 21 is out of range; use 1..20" in flags
    assert "--stop-within-pct: 0 is out of range; use above 0 and at most 50" in flags
    assert config_problems(replace(CONFIG, workload=Workload(videos=16))) == []


def test_a_video_folder_must_hold_what_the_run_may_take_made_with_its_seed(
        tmp_path: Path) -> None:
    def folder(videos: int) -> None:
        (tmp_path / "videos.json").write_text(json.dumps(
            {"settings": {"seed": 3}, "videos": [{"name": "video_0000.mp4"}] * videos}))

    config = replace(CONFIG, source=VideoSource(directory=tmp_path),
                     workload=Workload(concurrencies=(2,), videos=4, seed=3))  # 2x2 + 3x2
    folder(10)  # exactly what the run may take
    assert config_problems(config) == []
    folder(9)
    assert config_problems(config) == [
        f"--videos {tmp_path} holds 9 videos; this sweep may take 10 fresh ones: make them "
        "with `videos --count 10`"]
    folder(40)
    config = replace(config, workload=replace(config.workload, seed=0))
    [seed] = config_problems(config)
    assert seed.startswith(f"--seed 0 but the videos in {tmp_path} were made with seed 3")
    short = replace(config, workload=Workload(concurrencies=(8,), videos=40, seed=3))
    assert config_problems(short) == [
        f"--videos {tmp_path} holds 40 videos; this sweep may take 64 fresh ones: make them "
        "with `videos --count 64`"]


TIGHT, WIDE = [10.0, 10.1, 9.9, 10.05], [10.0, 12.0, 8.0, 11.0]


def test_a_level_stops_at_its_least_tight_blocks_runs_on_while_wide_and_when_videos_run_out(
) -> None:
    w = Workload()
    assert MIN_BLOCKS == 4
    assert stopped_by([TIGHT], 5, w) == "interval"
    assert stopped_by([TIGHT[:3]], 5, w) is None  # fewer than the least blocks
    assert stopped_by([[10.0] * 3], 5, w) is None
    assert stopped_by([WIDE], 5, w) is None
    assert stopped_by([WIDE], 0, w) == "videos"
    assert stopped_by([TIGHT[:2]], 0, w) == "videos"
    assert stopped_by([TIGHT], 0, w) == "interval"
    assert stopped_by([WIDE], 5, replace(w, stop_within_pct=50.0)) == "interval"
    assert stopped_by([TIGHT], 5, replace(w, stop_within_pct=1.0)) is None
    assert stopped_by([WIDE], 1, w) is None  # one block left: it runs
    # The interval's edge: a half width equal to the setting stops, one just above doesn't.
    edge = replicate_interval(TIGHT).relative_half_width * 100
    assert stopped_by([TIGHT], 5, replace(w, stop_within_pct=edge)) == "interval"
    assert stopped_by([TIGHT], 5, replace(w, stop_within_pct=edge * 0.999)) is None
    full = replace(w, full=True)
    assert stopped_by([TIGHT], 5, full) is None
    assert stopped_by([TIGHT], 0, full) == "full"


def test_two_replicates_have_an_interval_one_has_none() -> None:
    assert replicate_interval([1.0]) is None
    two = replicate_interval([1.0, 3.0])
    assert (two.mean, two.replicates) == (2.0, 2)
    assert two.high - two.mean == pytest.approx(
        student_t.ppf(T_QUANTILE, 1) * statistics.stdev([1.0, 3.0]) / 2 ** 0.5)


def test_several_profiles_stop_on_every_gains_interval_in_points() -> None:
    """Round robin wide on its own, but each block's affinity chunk moves with it: the gain
    is tight; a second profile with a wide gain keeps the level going."""
    base = [10.0, 12.0, 8.0, 11.0, 9.0]
    steady = [1.3 * r for r in base]
    w = replace(Workload(), stop_within_pct=5.0)
    assert stopped_by([base], 5, w) is None
    assert stopped_by([base, steady], 5, w) == "interval"
    assert stopped_by([base, steady, [13.0, 11.0, 14.0, 9.0, 13.0]], 5, w) is None
    edge = paired_gain(base, [1.3 * r * f for r, f in zip(base, (1, 1.02, 1, 0.98, 1),
                                                             strict=True)])
    half = (edge.high - edge.low) / 2
    shaky = [1.3 * r * f for r, f in zip(base, (1, 1.02, 1, 0.98, 1), strict=True)]
    assert stopped_by([base, shaky], 5, replace(w, stop_within_pct=half)) == "interval"
    assert stopped_by([base, shaky], 5, replace(w, stop_within_pct=half * 0.999)) is None


def chunk(rate: float, requests: int = 20, errors: int = 0, ttft: float | None = 1.0
          ) -> LevelSummary:
    return replace(summary(requests, errors), request_throughput=rate, ttft_p50_ms=ttft,
                   prompt_cache_read_pct=None)


def test_a_levels_rates_are_the_mean_of_its_chunks_and_its_percentiles_of_its_requests(
        tmp_path: Path) -> None:
    """TTFT p50 over the level's five requests (30 ms), not the mean of its chunks' (20)."""
    one = level_dir(tmp_path / "a", record(8, ttft=10.0))
    two = level_dir(tmp_path / "b", *(record(8, ttft=t) for t in (30.0, 40.0, 50.0)),
                    record(8, ttft=1.0, phase="warmup"), record(None, error="500", ttft=9.0))
    three = level_dir(tmp_path / "c", record(8, ttft=20.0))
    records = [d / RECORDS_EXPORT for d in (one, two, three)]
    level = level_summary([chunk(1.0, 20, ttft=10.0), chunk(2.0, 19, 1, ttft=None),
                           chunk(3.0, 20, ttft=40.0)], records)
    assert level == LevelSummary(
        concurrency=4, requests=59, errors=1, request_throughput=2.0, ttft_p50_ms=30.0,
        ttft_p90_ms=pytest.approx(46.0), request_latency_p50_ms=30.0,
        output_token_throughput=1.0, prompt_cache_read_pct=None)
    assert level_summary([chunk(1.5)], [tmp_path / "none"]) == replace(
        chunk(1.5), ttft_p50_ms=None, ttft_p90_ms=None, request_latency_p50_ms=None)


def test_a_resume_keeps_the_finished_blocks_in_order(tmp_path: Path) -> None:
    chunks = [{"dir": f"chunk-0{k}", "block": k} for k in range(3)]
    for entry in chunks[:2]:
        (tmp_path / entry["dir"]).mkdir()
        (tmp_path / entry["dir"] / SUMMARY_EXPORT).write_text("{}")
    assert kept_chunks(tmp_path, {"chunks": chunks}) == chunks[:2]  # no export
    assert kept_chunks(tmp_path, {"chunks": chunks[1:]}) == []  # not in order
    assert kept_chunks(tmp_path, {}) == []
    assert kept_chunks(tmp_path, {"chunks": [{"block": 0}]}) == []  # no folder


def test_the_cli_options_are_the_run_objects_fields() -> None:
    args = build_parser("sweep").parse_args([
        "sweep", "--url", "http://127.0.0.1:9", "--concurrency", "2", "4", "--full",
        "--stop-within-pct", "5", "--seed", "7", "--out", "r", "--note", "a",
        "--video-base-url", "http://v/", "--videos-per-level", "8",
        "--deployment", "replicas=8", "--deployment", "image=x=y", "--request-timeout", "9"])
    config = config_from_args(args)
    assert config == replace(
        CONFIG, targets=(Target("round-robin", "http://127.0.0.1:9"),),
        source=VideoSource(base_url="http://v/"),
        workload=Workload(concurrencies=(2, 4), full=True, stop_within_pct=5.0, seed=7,
                          videos=8),
        run_dir=Path("r"), notes=("a",), deployment={"replicas": "8", "image": "x=y"},
        request_timeout_secs=9.0)
    defaults = config_from_args(build_parser("sweep").parse_args(
        ["sweep", "--url", "http://127.0.0.1:9", "--video-base-url", "http://127.0.0.1:9/"]))
    assert defaults == replace(CONFIG, workload=Workload())
    two = config_from_args(build_parser("sweep").parse_args(
        ["sweep", "--url", "http://a", "--profile", "round-robin", "--url", "http://b",
         "--profile", "session-affinity"]))
    assert two.targets == (Target("round-robin", "http://a"),
                           Target("session-affinity", "http://b"))
    with pytest.raises(InputError) as unpaired:
        config_from_args(build_parser("sweep").parse_args(
            ["sweep", "--url", "http://a", "--url", "http://b"]))
    assert (unpaired.value.heading, unpaired.value.problems) == ("bad sweep settings", [
        "--url and --profile pair up: give one --profile per --url (got 2 and 1)"])


def test_the_cli_s_videos_affinity_and_cluster_run_reach_the_run_object(tmp_path: Path) -> None:
    def parsed(*argv: str) -> SweepConfig:
        return config_from_args(build_parser("sweep").parse_args(["sweep", *argv]))

    standin = parsed("--url", "http://a", "--text-standin-tokens", "64", "--session-affinity")
    assert standin.source == VideoSource(standin_tokens=64)
    assert standin.targets == (Target("round-robin", "http://a", True),)
    assert parsed("--url", "http://a", "--videos", str(tmp_path)).source == VideoSource(
        directory=tmp_path)
    run = Run(stack="compare", run_id="run-1", namespace="ns", cache_claim="claim", image="i",
              frontends=(("round-robin", "svc-rr", False), ("session-affinity", "svc-sa", True)))
    assert parsed("--run", json.dumps(run.output())) == config_from_run(run)


def problems_of(**changes: Any) -> list[str]:
    return config_problems(replace(CONFIG, **changes))


def test_good_settings_have_no_problem(tmp_path: Path) -> None:
    assert problems_of() == []
    assert problems_of(targets=(Target("My_profile.2-b", "https://frontend.test:8000/v1"),),
                       run_id="a" * 30, tokenizer="org/name",
                       workload=Workload(output_tokens=1, stop_within_pct=0.5)) == []
    (tmp_path / "tok").mkdir()
    assert problems_of(tokenizer=str(tmp_path / "tok")) == []


BAD_SETTINGS = {
    "url": ({"targets": (Target("round-robin", "http://"),)},
            "--url must look like http://HOST:PORT (got 'http://')"),
    "url spaces": ({"targets": (Target("round-robin", "http:// x"),)}, "--url must look like"),
    "no profile": ({"targets": ()}, "give each profile's frontend: --url URL and --profile NAME"),
    "twice": ({"targets": (Target("a", "http://x"), Target("a", "http://y"))},
              "--profile repeats a profile"),
    "model": ({"model": ""}, "--model must not be empty"),
    "levels": ({"workload": Workload(concurrencies=())},
               "--concurrency: needs at least one level"),
    "output tokens": ({"workload": Workload(output_tokens=0)},
                      "--output-tokens: 0 is out of range; use at least 1"),
    "run id": ({"run_id": "Run"}, "--run-id 'Run': use lowercase letters, digits and '-' "
                                  f"(at most {RUN_ID_MAX_LEN}; it names folders"),
    "long run id": ({"run_id": "a" * (RUN_ID_MAX_LEN + 1)}, "--run-id 'aaaa"),
    "profile": ({"targets": (Target("-x", "http://x"),)},
                "--profile '-x': use letters, digits, '.', '_' or '-'"),
    "profile end": ({"targets": (Target("a/b", "http://x"),)}, "--profile 'a/b'"),
    "tokenizer": ({"tokenizer": "./nowhere"}, "--tokenizer ./nowhere: no such directory"),
    "tokenizer path": ({"tokenizer": "/nowhere"}, "--tokenizer /nowhere: no such directory"),
    "stop within": ({"workload": Workload(stop_within_pct=0.0)}, "--stop-within-pct: 0 is out "
                    "of range; use above 0 and at most 50 (full sends every video instead)"),
    "no videos": ({"source": VideoSource()}, "give one of --video-base-url, --videos or "
                  "--text-standin-tokens"),
    "video url": ({"source": VideoSource(base_url="videos:8080")},
                  "--video-base-url must start with http:// or https:// (videos:8080)"),
    # 7,000 x 5 levels fit one profile's 65,536 fresh videos, not two profiles'.
    "fresh videos": ({"targets": (Target("a", "http://x"), Target("b", "http://y")),
                      "workload": Workload(videos=7000)}, "--videos-per-level: 7000 videos per "
                     "level x 5 levels x 2 profile(s) need"),
}


@pytest.mark.parametrize("case", sorted(BAD_SETTINGS))
def test_each_bad_setting_is_named_alone(case: str) -> None:
    change, expected = BAD_SETTINGS[case]
    [problem] = problems_of(**change)
    assert problem.startswith(expected)


def test_a_resume_names_each_setting_that_differs() -> None:
    old = {"model": "m", "notes": ["a"], "endpoint": "http://127.0.0.1:1",
           "workload": {"output_tokens": 8, "concurrencies": [1]},
           "deployment": {"images": {"worker": "w:1"}, "replicas": 8}}
    assert settings_changes(old, {**old, "notes": ["b"]}) == []
    assert settings_changes(old, {**old, "endpoint": "http://127.0.0.1:2"}) == []
    assert settings_changes(old, {**old, "workload": {"output_tokens": 8,
                                                      "concurrencies": [1, 2]}}) == []
    new = {**old, "workload": {"output_tokens": 16},
           "deployment": {"images": {"worker": "w:2"}, "replicas": 8}}
    assert settings_changes(old, new) == [
        "workload.output_tokens: 8 -> 16", "deployment.images.worker: 'w:1' -> 'w:2'"]
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
