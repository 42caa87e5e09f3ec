"""The run contract: what a benchmark run sends (`Workload`: the stack's `benchmark*` keys, the
sweep's and the rehearsal's options), and where a cluster run happens (`Run`: what the program
hands the pods and `collect`); standard library only, as the pods import it."""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from infra.names import (
    FRONTEND_PORT,
    MAX_CONCURRENCY,
    SERVED_MODEL_NAME,
    VIDEO_SERVICE_PORT,
    benchmark_name,
    camel,
    levels_problems,
)

MAX_QUESTIONS = 20  # the dataset's questions (benchmarks/dataset.py QUESTIONS)
# Bits of a video's index drawn into its frames (benchmarks/videos.py): the most videos a run
# can make distinct.
VIDEO_INDEX_BITS = 16
# A retried chunk takes fresh videos too: room for this many retries of the largest chunk.
RETRY_CHUNKS = 3
# The stop rule: a level stops once its interval is tight, which favours spreads small by
# chance. Its intervals (and the report's) are Student t at 98.5% two-sided, with at least
# MIN_BLOCKS blocks: so they still cover the truth 95% of the time (tests/test_stop_rule.py
# simulates it; docs/benchmark-toolkit.md, "Blocks, cold chunks and the stop rule").
MIN_BLOCKS = 4
T_QUANTILE = 0.9925


def option(flag: str, default: Any = MISSING, **argparse_kwargs: Any) -> Any:
    """A dataclass field that is also a command's option `flag` (`add_options` adds it with the
    field's name and default): the options and the object they make are one contract."""
    mutable = isinstance(default, dict | list)
    return field(default=MISSING if mutable else default,
                 default_factory=(lambda: type(default)(default)) if mutable else MISSING,
                 metadata={"flag": flag, **argparse_kwargs})


def add_options(parser: argparse.ArgumentParser, cls: type, defaults: Any = None) -> None:
    """Every `option` field of `cls` as an option, defaulting to `defaults`' value (an instance
    of `cls`) or the field's."""
    for f in fields(cls):
        if "flag" in f.metadata:
            kwargs = dict(f.metadata)
            default = getattr(defaults, f.name) if defaults is not None else (
                f.default if f.default is not MISSING else f.default_factory())
            # argparse appends to a list of its own
            kwargs["default"] = [] if kwargs.get("action") == "append" else default
            parser.add_argument(kwargs.pop("flag"), dest=f.name, **kwargs)


@dataclass(frozen=True)
class Workload:
    """The seed's benchmark by default. A level sends blocks, each one chunk per profile of
    `concurrency` fresh videos (`full`: one chunk of every video), until the stop rule holds."""

    concurrencies: tuple[int, ...] = option(
        "--concurrency", (1, 2, 4, 8, 16), type=int, nargs="+", metavar="N",
        help="levels (the seed's by default)")
    videos: int = option("--videos-per-level", 200, type=int,
                         help="at most this many videos per level and profile (the seed's)")
    questions_per_video: int = option("--questions-per-video", 20, type=int,
                                      help="questions per video, each its own request")
    output_tokens: int = option("--output-tokens", 128, type=int,
                                help="exact output tokens per request")
    # Another seed, other videos: no cache holds them.
    seed: int = option("--seed", 0, type=int,
                       help="the videos' content (stand-ins' too) and AIPerf's seed")
    stop_within_pct: float = option(
        "--stop-within-pct", 3.0, type=float,
        help="a level stops once its req/s 95%% interval is within +- this %% of the mean, or "
        "with several profiles every gain's within +- this many points")
    full: bool = option("--full", False, action="store_true",
                        help="each level one chunk of every video per profile (no stop rule)")

    def chunk_videos(self, concurrency: int) -> int:
        return self.videos if self.full else concurrency

    def max_blocks(self, concurrency: int) -> int:
        return self.videos // max(1, self.chunk_videos(concurrency))

    def videos_needed(self, profiles: int) -> int:
        """Fresh videos a run may take: every block of every level, and the retries."""
        largest = max(map(self.chunk_videos, self.concurrencies), default=0)
        return profiles * (RETRY_CHUNKS * largest + sum(
            self.max_blocks(c) * self.chunk_videos(c) for c in self.concurrencies))

    def problems(self, profiles: int = 1) -> list[tuple[str, str]]:
        """(field, problem and fix) for each setting no pod or sweep could run."""
        top, need = max(self.concurrencies, default=0), self.videos_needed(profiles)
        checks = (
            (not 1 <= self.questions_per_video <= MAX_QUESTIONS, "questions_per_video",
             f"{self.questions_per_video} is out of range; use 1..{MAX_QUESTIONS} (the "
             "benchmark's questions about a video)"),
            (self.videos < top, "videos", f"{self.videos} videos fill no chunk at concurrency "
             f"{top} (a chunk is as many videos as its level's concurrency): use at least {top} "
             "videos or lower levels"),
            (self.output_tokens < 1, "output_tokens", f"{self.output_tokens} is out of range; "
             "use at least 1"),
            (not 0 < self.stop_within_pct <= 50, "stop_within_pct", f"{self.stop_within_pct:g} "
             "is out of range; use above 0 and at most 50 (full sends every video instead)"),
            (top <= MAX_CONCURRENCY and need > 2**VIDEO_INDEX_BITS, "videos",
             f"{self.videos} videos per level x {len(self.concurrencies)} levels x {profiles} "
             f"profile(s) need {need} fresh videos, more than the {2**VIDEO_INDEX_BITS} a run "
             "can make distinct: use fewer videos or levels"),
        )
        return [(key, text) for bad, key, text in checks if bad] + [
            ("concurrencies", problem) for problem in levels_problems(self.concurrencies)]

    def refusals(self, name: Callable[[str], str], profiles: int = 1) -> list[str]:
        """`problems`, each after the name its setting has where it was given."""
        return [f"{name(key)}: {text}" for key, text in self.problems(profiles)]


def run_seed(run_id: str) -> int:
    """A cluster run's seed from its id: each run id sends videos no earlier run cached."""
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16)


SEED_WORKLOAD = Workload()


@dataclass(frozen=True)
class VideoShape:
    """Synthetic videos made with FFmpeg before the measured sweep (`count` from the run's
    `videos_needed` on the cluster)."""

    count: int = 200
    duration_secs: int = 30
    fps: int = 2
    width: int = 640
    height: int = 360
    seed: int = 0


# Where the sweep's pod and the results reader mount the cache claim.
CACHE_DIR = "/cache"


def _tuples(value: Any) -> Any:
    """JSON's lists as the tuples a frozen `Run` holds (maps too)."""
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return tuple(map(_tuples, value)) if isinstance(value, list) else value


@dataclass(frozen=True)
class Run:
    """One stack's run, built once by the program and exported as `output()`, which `collect`
    reads back; the sweep refuses to resume under another `deployment`."""

    stack: str
    run_id: str
    namespace: str
    cache_claim: str
    image: str
    workload: Workload = Workload()
    # Each frontend: its profile, its Service and whether the sweep sends it the session header.
    frontends: tuple[tuple[str, str, bool], ...] = ()
    model: str = SERVED_MODEL_NAME
    notes: tuple[str, ...] = ()
    deployment: tuple[tuple[str, str], ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    # The stack's `kubernetes:context` ("": the current one); every printed command's prefix.
    kube_context: str = ""
    kubectl: str = "kubectl"
    # nodeSelector and tolerations of every benchmark pod (the results reader too).
    pod_placement: dict[str, Any] = field(default_factory=dict)
    smoke: bool = True
    sweep: bool = True

    @property
    def smoke_job(self) -> str:
        return benchmark_name("smoke", self.stack, self.run_id)

    @property
    def sweep_job(self) -> str:
        return benchmark_name("sweep", self.stack, self.run_id)

    def frontend_url(self, service: str) -> str:
        return f"http://{service}.{self.namespace}.svc:{FRONTEND_PORT}"

    @property
    def video_base_url(self) -> str:
        # `<service>.<namespace>.svc` resolves in any cluster domain (the DNS search path).
        service = benchmark_name("videos", self.stack)
        return f"http://{service}.{self.namespace}.svc:{VIDEO_SERVICE_PORT}/"

    @property
    def results_path(self) -> str:
        """Where the run's results live inside the cache claim, beside the model files."""
        return f"benchmarks/{self.stack}/{self.run_id}"

    @property
    def targets(self) -> list[tuple[str, str, bool]]:
        """Each frontend's (profile, URL, whether it gets the session header)."""
        return [(p, self.frontend_url(svc), affinity) for p, svc, affinity in self.frontends]

    @property
    def follow_command(self) -> str:
        return f"{self.kubectl} logs -f job/{self.sweep_job}"

    @property
    def collect_command(self) -> str:
        """`./run.sh`: plain `python` lacks the pinned packages."""
        return f"./run.sh collect --stack {self.stack} --run-id {self.run_id}"

    def output(self) -> dict[str, Any]:
        """The stack output: every field, and the names and commands a user looks up."""
        out = {camel(k): v for k, v in json.loads(json.dumps(asdict(self))).items()}
        return {**out, "resultsPath": self.results_path,
                "smokeJob": self.smoke_job if self.smoke else "",
                "sweepJob": self.sweep_job if self.sweep else "",
                "followCommand": self.follow_command if self.sweep else "",
                "collectCommand": self.collect_command if self.sweep else ""}

    @classmethod
    def from_output(cls, output: dict[str, Any]) -> Run:
        """The run an `output()` describes (its derived keys are ignored)."""
        known = {camel(f.name): f.name for f in fields(cls)}
        given = {known[k]: _tuples(v) for k, v in output.items() if k in known}
        return cls(**{**given, "workload": Workload(**dict(given.get("workload") or {}))})
