"""`smoke`: one multimodal request through the `openai` SDK, video before question.

Waits (bounded) until the model is listed at `/v1/models`, sends [video, question], and
passes only on a non-empty answer: the last line is `Smoke test passed: <answer>`. Each
failure ends with one line naming the reason and a non-zero exit:
endpoint unreachable, model not listed, HTTP error, empty answer.

Needs nothing local but what it is given: the video is a URL (a local file is sent
inline as a data URL), so it runs as is inside a cluster Job.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields

import openai

from benchmarks.dataset import QUESTIONS, video_url
from benchmarks.evidence import FrontendCounts, scrape_frontend
from infra.names import SERVED_MODEL_NAME

Say = Callable[[str], None]
EXIT_FAILED, EXIT_BAD_INPUT = 1, 2


class SmokeFailure(RuntimeError):
    """The smoke test failed; the message is the one line that says why."""


@dataclass(frozen=True)
class SmokeConfig:
    """The command's options (the CLI builds it from argparse by field name)."""

    url: str
    video_url: str
    model: str = SERVED_MODEL_NAME
    question: str = QUESTIONS[0]
    wait_secs: float = 600.0
    poll_secs: float = 5.0
    request_timeout_secs: float = 300.0
    max_tokens: int = 256

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"--url must start with http:// or https:// ({self.url})")
        if self.wait_secs < 0 or self.request_timeout_secs <= 0 or self.max_tokens < 1:
            raise ValueError("--wait >= 0, --request-timeout > 0 and --max-tokens >= 1")


def _client(config: SmokeConfig, timeout: float) -> openai.OpenAI:
    # Dynamo needs no key; a real one, if set, is passed on and never printed.
    api_key = os.environ.get("OPENAI_API_KEY") or "not-needed"
    return openai.OpenAI(base_url=config.url.rstrip("/") + "/v1", api_key=api_key,
                         timeout=timeout, max_retries=0)


def wait_for_model(config: SmokeConfig, say: Say) -> None:
    """Poll `/v1/models` until the model is listed; raises SmokeFailure at the deadline."""
    client = _client(config, timeout=min(30.0, config.request_timeout_secs))
    started = last_said = time.monotonic()
    deadline = started + config.wait_secs
    while True:
        try:
            listed = [m.id for m in client.models.list()]
            if config.model in listed:
                say(f"smoke: {config.model} is listed at {config.url}/v1/models")
                return
            reason = f"listed: {listed or 'none'}"
            failure = (f"model not listed: {config.model} is not at {config.url}/v1/models "
                       f"after {config.wait_secs:.0f} s ({reason}); check --model, or wait "
                       "for the workers to register")
        except openai.APIStatusError as exc:
            reason = f"HTTP {exc.status_code}"
            failure = (f"HTTP error: {config.url}/v1/models answered {exc.status_code} "
                       f"for {config.wait_secs:.0f} s")
        except openai.APIConnectionError as exc:
            reason = f"unreachable ({type(exc.__cause__ or exc).__name__})"
            failure = (f"endpoint unreachable: {config.url} did not answer for "
                       f"{config.wait_secs:.0f} s; check the URL, the port-forward or the "
                       "frontend Service")
        now = time.monotonic()
        if now >= deadline:
            raise SmokeFailure(failure)
        if now - last_said >= 30:
            say(f"smoke: waiting for {config.model} at {config.url} "
                f"({now - started:.0f} s, {reason})")
            last_said = now
        time.sleep(min(config.poll_secs, deadline - now))


def ask(config: SmokeConfig, video: str) -> tuple[str, int | None]:
    """One chat completion, `video` (a URL or data: URL) first; returns the answer and the
    prompt tokens the server's `usage` counted."""
    content = [{"type": "video_url", "video_url": {"url": video}},
               {"type": "text", "text": config.question}]
    try:
        response = _client(config, timeout=config.request_timeout_secs).chat.completions.create(
            model=config.model, messages=[{"role": "user", "content": content}],
            max_tokens=config.max_tokens)
    except openai.APIStatusError as exc:
        # The SDK's message carries the server's own error message.
        raise SmokeFailure(f"HTTP error: {exc.status_code} from {config.url}/v1/chat/"
                           f"completions: {exc.message[:300]}") from exc
    except openai.APIConnectionError as exc:
        raise SmokeFailure(
            f"endpoint unreachable: the chat request to {config.url} failed "
            f"({type(exc.__cause__ or exc).__name__}); check the frontend") from exc
    answer = ""
    if response.choices:
        message = response.choices[0].message
        # A reasoning model may put its whole output in `reasoning_content`; still an answer.
        answer = ((message.content or "").strip()
                  or (getattr(message, "reasoning_content", None) or "").strip())
    if not answer:
        raise SmokeFailure(f"empty answer: {config.model} returned no text for the video at "
                           f"{config.video_url[:100]}")
    return " ".join(answer.split()), response.usage and response.usage.prompt_tokens


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
    try:
        video = video_url(config.video_url)
    except ValueError:
        raise ValueError(f"--video-url {config.video_url}: not a URL and no such file") from None
    wait_for_model(config, say)
    say(f"smoke: asking {config.model} about {config.video_url[:100]}")
    before = scrape_frontend(config.url)
    answer, prompt_tokens = ask(config, video)
    say(prompt_count_line(before, scrape_frontend(config.url), prompt_tokens))
    return answer


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "smoke",
        help="one video question through the openai SDK; non-empty answer passes",
        description="Wait until the model is listed at /v1/models, send one chat completion "
        "with a video before a question, pass on a non-empty answer.",
    )
    d = SmokeConfig  # the defaults live on the config
    p.add_argument("--url", required=True, help="endpoint base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--video-url", required=True, help="video URL (or a local file)")
    p.add_argument("--model", default=d.model, help=f"default {d.model}")
    p.add_argument("--question", default=d.question)
    p.add_argument("--wait", dest="wait_secs", type=float, default=d.wait_secs,
                   help=f"seconds to wait for the model to be listed (default {d.wait_secs:g})")
    p.add_argument("--request-timeout", dest="request_timeout_secs", type=float,
                   default=d.request_timeout_secs,
                   help=f"seconds for the chat request (default {d.request_timeout_secs:g})")
    p.add_argument("--max-tokens", type=int, default=d.max_tokens)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        config = SmokeConfig(**{f.name: getattr(args, f.name)
                                for f in fields(SmokeConfig) if hasattr(args, f.name)})
        answer = run_smoke(config, say=lambda line: print(line, flush=True))
    except ValueError as exc:
        print(f"smoke: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SmokeFailure as exc:
        print(f"Smoke test failed: {exc}", flush=True)
        return EXIT_FAILED
    print(f"Smoke test passed: {answer}", flush=True)
    return 0
