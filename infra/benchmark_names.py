"""Names of the benchmark's cluster objects and where a run's results live.

Why a module of its own: the manifests, the settings check (a run id must keep every Job
name a valid DNS label), the results hook and `collect` must agree on them. Every name
carries the profile, so both stacks can share one namespace (and one cache) without
touching each other's objects; the Job names also carry the run id, so a new run id
replaces the Jobs and nothing else.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from infra import names

# A Job's name is also a label value of its pods: at most 63 characters.
MAX_NAME_LEN = 63
# Folder of the cache claim that holds benchmark results, beside the model files.
RESULTS_FOLDER = "benchmarks"


def video_name(index: int) -> str:
    """A video's file name: the video maker, the dataset and the smoke Job agree on it."""
    return f"video_{index:04d}.mp4"


# A run's videos in index order: the measured ones, then one for the smoke test alone
# (nothing it caches is measured).
def smoke_video(videos: int) -> int:
    return videos


def code_config_map_name(profile: str) -> str:
    return f"{names.GRAPH_NAME_PREFIX}-bench-code-{profile}"


def video_server_name(profile: str) -> str:
    return f"{names.GRAPH_NAME_PREFIX}-videos-{profile}"


def smoke_job_name(profile: str, run_id: str) -> str:
    return f"{names.GRAPH_NAME_PREFIX}-smoke-{profile}-{run_id}"


def sweep_job_name(profile: str, run_id: str) -> str:
    return f"{names.GRAPH_NAME_PREFIX}-sweep-{profile}-{run_id}"


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
# Where the results hook puts the stack's `kubernetes:kubeconfig` (a path or the file's
# content) for `collect`: the environment, never argv or a log line.
KUBECONFIG_ENV = "COSMOS3_ROUTING_KUBECONFIG"


def collect_command(profile: str, run_id: str) -> str:
    """The command that brings a run home later. `./run.sh`: the project's own
    environment, from the repository root (plain `python` lacks the pinned packages)."""
    return f"./run.sh collect --stack {profile} --run-id {run_id}"


def _camel(name: str) -> str:
    return re.sub(r"_(\w)", lambda m: m[1].upper(), name)


@dataclass(frozen=True)
class Run:
    """One stack's run: where its Jobs run and its results live, and how to reach them.
    The program builds it once (`benchmark_manifests.run_of`), exports it as the stack's
    `benchmark` output (`output()`, its one serialised form), the results hook hands that
    to `collect`, and `collect` reads it back (`from_output`)."""

    stack: str
    run_id: str
    namespace: str
    cache_claim: str
    image: str
    image_pull_secrets: tuple[str, ...] = ()
    # The stack's `kubernetes:context` ("" for the current one), and the kubectl prefix
    # every printed command starts with.
    kube_context: str = ""
    kubectl: str = "kubectl"
    # Where every benchmark pod (the results reader too) may run: nodeSelector, tolerations.
    pod_placement: dict[str, Any] = field(default_factory=dict)
    smoke: bool = True
    sweep: bool = True

    @property
    def smoke_job(self) -> str:
        return smoke_job_name(self.stack, self.run_id)

    @property
    def sweep_job(self) -> str:
        return sweep_job_name(self.stack, self.run_id)

    @property
    def results_path(self) -> str:
        return results_subpath(self.stack, self.run_id)

    @property
    def follow_command(self) -> str:
        return follow_command(self.kubectl, self.stack, self.run_id)

    @property
    def collect_command(self) -> str:
        return collect_command(self.stack, self.run_id)

    def output(self) -> dict[str, Any]:
        """The stack output: every field, and the names and commands a user looks up."""
        out = {_camel(k): list(v) if isinstance(v, tuple) else v
               for k, v in asdict(self).items()}
        return {**out, "resultsPath": self.results_path,
                "smokeJob": self.smoke_job if self.smoke else "",
                "sweepJob": self.sweep_job if self.sweep else "",
                "followCommand": self.follow_command if self.sweep else "",
                "collectCommand": self.collect_command if self.sweep else ""}

    @classmethod
    def from_output(cls, output: dict[str, Any]) -> Run:
        """The run an `output()` describes (its derived keys are ignored)."""
        names = {_camel(f.name): f.name for f in fields(cls)}
        return cls(**{names[k]: tuple(v) if isinstance(v, list) else v
                      for k, v in output.items() if k in names})
