"""`smoke`: one video question through the `openai` SDK, video first, once the model is listed;
one line says it passed, or why not (docs/benchmark-toolkit.md, `smoke`)."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import openai

from benchmarks.dataset import dataset_lines, video_url
from benchmarks.evidence import FrontendCounts, scrape_frontend
from infra.names import SERVED_MODEL_NAME, video_name
from infra.run import Run, Workload

Say = Callable[[str], None]


class SmokeFailure(RuntimeError):
    """The smoke test failed; the message is the one line that says why."""


@dataclass(frozen=True)
class SmokeConfig:
    url: str
    video_url: str
    model: str = SERVED_MODEL_NAME
    wait_secs: float = 600.0
    poll_secs: float = 5.0

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"--url must start with http:// or https:// ({self.url})")
        if self.wait_secs < 0:
            raise ValueError(f"--wait must be at least 0 (got {self.wait_secs:g})")


def _problem(exc: openai.APIStatusError | openai.APIConnectionError, where: str) -> str:
    if isinstance(exc, openai.APIStatusError):  # its message carries the server's own
        return f"HTTP error: {exc.status_code} from {where}: {exc.message[:300]}"
    return (f"endpoint unreachable: {where} failed ({type(exc.__cause__ or exc).__name__}); "
            "check the URL, the port-forward or the frontend Service")


def wait_for_model(config: SmokeConfig, client: openai.OpenAI, say: Say) -> None:
    """Poll `/v1/models` until the model is listed, saying why not at once and every 30 s;
    raises SmokeFailure at the deadline."""
    started = time.monotonic()
    last_said = started - 30
    while True:
        try:
            listed = [m.id for m in client.models.list(timeout=30.0)]
        except (openai.APIStatusError, openai.APIConnectionError) as exc:
            problem = _problem(exc, f"{config.url}/v1/models")
        else:
            if config.model in listed:
                return say(f"smoke: {config.model} is listed at {config.url}/v1/models")
            problem = (f"model not listed: {config.model} is not at {config.url}/v1/models "
                       f"(listed: {listed or 'none'}); check --model, or wait for the workers "
                       "to register")
        now = time.monotonic()
        if now - started >= config.wait_secs:
            raise SmokeFailure(f"{problem} (after {config.wait_secs:.0f} s)")
        if now - last_said >= 30:
            say(f"smoke: waiting for {config.model} ({now - started:.0f} s): {problem}")
            last_said = now
        time.sleep(min(config.poll_secs, started + config.wait_secs - now))


def prompt_count_line(before: FrontendCounts | None, after: FrontendCounts | None,
                      prompt_tokens: int | None) -> str:
    """Checks once what the sweep's prefix-cache share divides by: the frontend's count of
    this request's prompt against the server's own `usage.prompt_tokens`."""
    if before is None or after is None or prompt_tokens is None:
        return ("smoke: no frontend prompt count or no usage to check: the sweep's "
                "prefix-cache share will read n/a")
    counted = after.input_tokens - before.input_tokens
    if counted == prompt_tokens:
        return (f"smoke: the frontend counts this prompt as the server does ({prompt_tokens} "
                "tokens): the sweep's prefix-cache share is over the prompts the workers saw")
    return (f"smoke: WARNING the frontend counted {counted:.0f} prompt tokens, the server's "
            f"usage {prompt_tokens}: the sweep's prefix-cache share divides by the "
            "frontend's count, so it is not a share of what the workers processed")


def run_smoke(config: SmokeConfig, say: Say = print) -> str:
    """Wait for the model, ask once; returns the answer or raises SmokeFailure. A bad
    --video-url (ValueError) is found before the wait, not after it."""
    try:  # the benchmark's first request: the video, then the first question
        (line,) = dataset_lines({0: video_url(config.video_url)},
                                Workload(questions_per_video=1))
    except ValueError:
        raise ValueError(f"--video-url {config.video_url}: not a URL and no such file") from None
    # Dynamo needs no key; a real one, if set, is passed on and never printed.
    client = openai.OpenAI(base_url=config.url.rstrip("/") + "/v1", max_retries=0,
                           api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",
                           timeout=300.0)
    wait_for_model(config, client, say)
    say(f"smoke: asking {config.model} about {config.video_url[:100]}")
    before = scrape_frontend(config.url)
    try:
        response = client.chat.completions.create(
            model=config.model, messages=line["messages"], max_tokens=256)
    except (openai.APIStatusError, openai.APIConnectionError) as exc:
        raise SmokeFailure(_problem(exc, f"{config.url}/v1/chat/completions")) from exc
    message = response.choices[0].message if response.choices else None
    # A reasoning model may put its whole output in `reasoning_content`; still an answer.
    answer = message and ((message.content or "").strip()
                          or (getattr(message, "reasoning_content", None) or "").strip())
    if not answer:
        raise SmokeFailure(f"empty answer: {config.model} returned no text for the video at "
                           f"{config.video_url[:100]}")
    say(prompt_count_line(before, scrape_frontend(config.url),
                          response.usage and response.usage.prompt_tokens))
    return " ".join(answer.split())


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("smoke", description=__doc__, help="one video question through "
                              "the openai SDK; non-empty answer passes")
    p.add_argument("--run", type=lambda text: Run.from_output(json.loads(text)),
                   help="a cluster run (JSON): its first frontend, and the video after those "
                   "its sweep sends")
    p.add_argument("--url", help="endpoint base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--video-url", help="video URL (or a local file)")
    p.add_argument("--model", default=SmokeConfig.model, help=f"default {SmokeConfig.model}")
    p.add_argument("--wait", dest="wait_secs", type=float, default=SmokeConfig.wait_secs,
                   help=f"seconds to wait for the model (default {SmokeConfig.wait_secs:g})")
    p.set_defaults(func=_run, errors=ValueError)


def _run(args: argparse.Namespace) -> int:
    run = args.run
    if run is not None:  # its own video, after the measured ones: it leaves none cached
        video = video_name(run.workload.videos_needed(len(run.frontends)))
        args.url, args.video_url, args.model = run.targets[0][1], run.video_base_url + video, \
            run.model
    if not (args.url and args.video_url):
        raise ValueError("give --url and --video-url, or --run")
    try:
        config = SmokeConfig(args.url, args.video_url, args.model, args.wait_secs)
        answer = run_smoke(config, say=lambda line: print(line, flush=True))
    except SmokeFailure as exc:
        print(f"Smoke test failed: {exc}", flush=True)
        return 1
    print(f"Smoke test passed: {answer}", flush=True)
    return 0
