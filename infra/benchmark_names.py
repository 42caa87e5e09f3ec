"""Names of the benchmark's cluster objects and where a run's results live.

Why a module of its own: the manifests, the settings check (a run id must keep every Job
name a valid DNS label), the results hook and `collect` must agree on them. Every name
carries the profile, so both stacks can share one namespace (and one cache) without
touching each other's objects; the Job names also carry the run id, so a new run id
replaces the Jobs and nothing else.
"""

from __future__ import annotations

from infra import recipe

# A Job's name is also a label value of its pods: at most 63 characters.
MAX_NAME_LEN = 63
# Folder of the cache claim that holds benchmark results, beside the model files.
RESULTS_FOLDER = "benchmarks"


def video_name(index: int) -> str:
    """A video's file name: the video maker, the dataset and the smoke Job agree on it."""
    return f"video_{index:04d}.mp4"


# A run's videos in index order: the measured ones, one for the smoke test alone (nothing
# it caches is measured), then the warm-up's.
def smoke_video(videos: int) -> int:
    return videos


def first_warmup_video(videos: int) -> int:
    return smoke_video(videos) + 1


def videos_to_make(videos: int, warmup_videos: int) -> int:
    return first_warmup_video(videos) + warmup_videos


def code_config_map_name(profile: str) -> str:
    return f"{recipe.GRAPH_NAME_PREFIX}-bench-code-{profile}"


def video_server_name(profile: str) -> str:
    return f"{recipe.GRAPH_NAME_PREFIX}-videos-{profile}"


def smoke_job_name(profile: str, run_id: str) -> str:
    return f"{recipe.GRAPH_NAME_PREFIX}-smoke-{profile}-{run_id}"


def sweep_job_name(profile: str, run_id: str) -> str:
    return f"{recipe.GRAPH_NAME_PREFIX}-sweep-{profile}-{run_id}"


def max_run_id_len(profile: str) -> int:
    """The longest run id that keeps both Job names within 63 characters."""
    return MAX_NAME_LEN - max(len(smoke_job_name(profile, "")), len(sweep_job_name(profile, "")))


def results_subpath(profile: str, run_id: str) -> str:
    """Where a run's results live inside the cache claim."""
    return f"{RESULTS_FOLDER}/{profile}/{run_id}"


def follow_command(kubectl: str, profile: str, run_id: str) -> str:
    """The command that follows a sweep's log."""
    return f"{kubectl} logs -f job/{sweep_job_name(profile, run_id)}"


# `collect`'s exit code when the sweep is still running: it said how to collect later,
# and the results hook (with `benchmarkWaitForSweep: false`) must not call that a failure.
SWEEP_RUNNING_EXIT_CODE = 3


def collect_command(profile: str, run_id: str) -> str:
    """The command that brings a run home later. `./run.sh`: the project's own
    environment, from the repository root (plain `python` lacks the pinned packages)."""
    return f"./run.sh collect --stack {profile} --run-id {run_id}"
