"""How fast the sweep's client (AIPerf) can go: it must never be what limits a measurement.

Runs one sweep level exactly as `benchmarks.sweep` does (same AIPerf command, video-first
dataset, 128 streamed output tokens per request) at concurrency 16 against an instant
local server on 127.0.0.1 (tests/support_openai_server.py, answering at once), and prints
the request rate AIPerf drove and the peak resident memory of AIPerf's process tree.
Goal: at least 10x the fastest rate the seed measured on eight H200s (17.78 req/s).

    .venv/bin/python -m tests.perf_client_capacity [--videos 150] [--concurrency 16]

Exit code 0 when the goal is met, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.aiperf_run import (
    SUMMARY_EXPORT,
    LevelSpec,
    aiperf_command,
    aiperf_env,
    summarize_file,
)
from benchmarks.dataset import VideoSource, dataset_lines
from benchmarks.tiny_model import build_tiny_model_dir
from infra.run import SEED_WORKLOAD, Workload
from infra.seed import SEED_TABLE
from rehearsal.local_dynamo import peak_memory
from tests.support_openai_server import RecordingOpenAIServer

# The seed's "Measured performance" table: session affinity at concurrency 16.
SEED_FASTEST_REQ_PER_S = max(row.sa_req_s for row in SEED_TABLE)
GOAL_FACTOR = 10
MODEL = "capacity-test"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=150, help="sessions (default 150)")
    parser.add_argument("--questions-per-video", type=int,
                        default=SEED_WORKLOAD.questions_per_video)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--output-tokens", type=int, default=SEED_WORKLOAD.output_tokens)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the run")
    args = parser.parse_args()

    goal = GOAL_FACTOR * SEED_FASTEST_REQ_PER_S
    with tempfile.TemporaryDirectory(prefix="client-capacity-") as tmp:
        work = Path(tmp)
        dataset = work / "dataset.jsonl"
        heads = VideoSource(base_url="http://127.0.0.1:9/videos").heads(range(args.videos), 0)
        lines = dataset_lines(heads, Workload(questions_per_video=args.questions_per_video,
                                              output_tokens=args.output_tokens))
        dataset.write_text("".join(json.dumps(line) + "\n" for line in lines))
        tokenizer = build_tiny_model_dir(work / "tokenizer")
        requests = args.videos * args.questions_per_video
        with RecordingOpenAIServer(models=[MODEL], record=False) as server:
            spec = LevelSpec(
                url=server.url, model=MODEL, dataset=dataset, concurrency=args.concurrency,
                sessions=args.videos, output_tokens=args.output_tokens,
                artifact_dir=work / "level", tokenizer=str(tokenizer), affinity=True,
                random_seed=0,
            )
            load_before = os.getloadavg()[0]
            print(f"client capacity: AIPerf, {requests} requests x {args.output_tokens} "
                  f"streamed tokens at concurrency {args.concurrency} against {server.url}",
                  flush=True)
            started = time.monotonic()
            with open(work / "aiperf.log", "w") as log:
                process = subprocess.Popen(aiperf_command(spec), stdout=log,
                                           stderr=subprocess.STDOUT, env=aiperf_env())
                with peak_memory(root=process.pid, interval=0.2) as memory:
                    code = process.wait(timeout=args.timeout)
            wall = time.monotonic() - started
            served = server.served
        if code != 0 or not (spec.artifact_dir / SUMMARY_EXPORT).is_file():
            print((work / "aiperf.log").read_text()[-3000:])
            print(f"client capacity: AIPerf failed (exit code {code})")
            return 1
        summary = summarize_file(spec.artifact_dir / SUMMARY_EXPORT)
    verdict = "meets" if summary.request_throughput >= goal else "MISSES"
    print(f"client capacity: {summary.request_throughput:.1f} req/s at concurrency "
          f"{args.concurrency} ({summary.requests} measured requests, {summary.errors} "
          f"errors, {served} served in total, {wall:.1f} s wall clock with AIPerf start-up)")
    print(f"client capacity: {verdict} the goal of {goal:.1f} req/s ({GOAL_FACTOR}x the "
          f"seed's {SEED_FASTEST_REQ_PER_S} req/s): "
          f"{summary.request_throughput / SEED_FASTEST_REQ_PER_S:.1f}x")
    print(f"client capacity: peak client memory {memory.peak / 2**20:.0f} MiB "
          f"(resident, AIPerf's whole process tree)")
    # The instant server shares the machine's cores with AIPerf: other load lowers the
    # figure without the client being the limit.
    cores = os.cpu_count() or 1
    print(f"client capacity: load average {load_before:.1f} before the run on {cores} cores"
          + ("; other work was running, so this figure is a lower bound: rerun on an idle "
             "machine before reading a miss as a client limit" if load_before > 0.5 else ""))
    return 0 if summary.request_throughput >= goal else 1


if __name__ == "__main__":
    sys.exit(main())
