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
from dataclasses import dataclass

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
    url: str
    video_url: str
    model: str = SERVED_MODEL_NAME
    question: str = QUESTIONS[0]
    wait_secs: float = 600.0
    poll_secs: float = 5.0
    request_timeout_secs: float = 300.0
    max_tokens: int = 256


def _client(config: SmokeConfig, timeout: float) -> openai.OpenAI:
    # Dynamo needs no key; a real one, if set, is passed on and never printed.
    api_key = os.environ.get("OPENAI_API_KEY") or "not-needed"
    return openai.OpenAI(base_url=config.url.rstrip("/") + "/v1", api_key=api_key,
                         timeout=timeout, max_retries=0)


def _video(ref: str) -> str:
    try:
        return video_url(ref)
    except ValueError:
        raise ValueError(f"--video-url {ref}: not a URL and no such file") from None


def wait_for_model(config: SmokeConfig, say: Say) -> None:
    """Poll `/v1/models` until the model is listed; raises SmokeFailure at the deadline."""
    client = _client(config, timeout=min(30.0, config.request_timeout_secs))
    started = time.monotonic()
    deadline = started + config.wait_secs
    last_said = started
    while True:
        try:
            listed = [m.id for m in client.models.list()]
            if config.model in listed:
                say(f"smoke: {config.model} is listed at {config.url}/v1/models")
                return
            reason = f"listed: {listed or 'none'}"
            failure = (
                f"model not listed: {config.model} is not at {config.url}/v1/models after "
                f"{config.wait_secs:.0f} s ({reason}); check --model, or wait for the "
                f"workers to register"
            )
        except openai.APIStatusError as exc:
            reason = f"HTTP {exc.status_code}"
            failure = (f"HTTP error: {config.url}/v1/models answered {exc.status_code} "
                       f"for {config.wait_secs:.0f} s")
        except openai.APIConnectionError as exc:
            reason = f"unreachable ({type(exc.__cause__ or exc).__name__})"
            failure = (
                f"endpoint unreachable: {config.url} did not answer for "
                f"{config.wait_secs:.0f} s; check the URL, the port-forward or the "
                f"frontend Service"
            )
        now = time.monotonic()
        if now >= deadline:
            raise SmokeFailure(failure)
        if now - last_said >= 30:
            say(f"smoke: waiting for {config.model} at {config.url} "
                f"({now - started:.0f} s, {reason})")
            last_said = now
        time.sleep(min(config.poll_secs, max(0.0, deadline - now)))


def ask(config: SmokeConfig, video: str) -> tuple[str, int | None]:
    """One chat completion, `video` (a URL or data: URL) first; returns the answer and the
    prompt tokens the server's `usage` counted."""
    client = _client(config, timeout=config.request_timeout_secs)
    content = [
        {"type": "video_url", "video_url": {"url": video}},
        {"type": "text", "text": config.question},
    ]
    try:
        response = client.chat.completions.create(
            model=config.model, messages=[{"role": "user", "content": content}],
            max_tokens=config.max_tokens,
        )
    except openai.APIStatusError as exc:
        detail = _error_message(exc)
        raise SmokeFailure(
            f"HTTP error: {exc.status_code} from {config.url}/v1/chat/completions: {detail}"
        ) from exc
    except openai.APIConnectionError as exc:
        raise SmokeFailure(
            f"endpoint unreachable: the chat request to {config.url} failed "
            f"({type(exc.__cause__ or exc).__name__}); check the frontend"
        ) from exc
    answer = ""
    if response.choices:
        message = response.choices[0].message
        answer = (message.content or "").strip()
        if not answer:
            # A reasoning model may put its whole output there; still a model answer.
            answer = (getattr(message, "reasoning_content", None) or "").strip()
    if not answer:
        raise SmokeFailure(
            f"empty answer: {config.model} returned no text for the video at "
            f"{config.video_url[:100]}"
        )
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


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        return str(error)[:300]
    return str(exc.message)[:300]


def run_smoke(config: SmokeConfig, say: Say = print) -> str:
    """Wait for the model, ask once; returns the answer or raises SmokeFailure. A bad
    --video-url (ValueError) is found before the wait, not after it."""
    video = _video(config.video_url)
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
    p.add_argument("--url", required=True, help="endpoint base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--video-url", required=True, help="video URL (or a local file)")
    p.add_argument("--model", default=SERVED_MODEL_NAME, help=f"default {SERVED_MODEL_NAME}")
    p.add_argument("--question", default=QUESTIONS[0])
    p.add_argument("--wait", type=float, default=600.0,
                   help="seconds to wait for the model to be listed (default 600)")
    p.add_argument("--request-timeout", type=float, default=300.0,
                   help="seconds for the chat request (default 300)")
    p.add_argument("--max-tokens", type=int, default=256)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if not args.url.startswith(("http://", "https://")):
        print(f"smoke: error: --url must start with http:// or https:// ({args.url})",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.wait < 0 or args.request_timeout <= 0 or args.max_tokens < 1:
        print("smoke: error: --wait >= 0, --request-timeout > 0 and --max-tokens >= 1",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    config = SmokeConfig(
        url=args.url, video_url=args.video_url, model=args.model, question=args.question,
        wait_secs=args.wait, request_timeout_secs=args.request_timeout,
        max_tokens=args.max_tokens)
    try:
        answer = run_smoke(config, say=lambda line: print(line, flush=True))
    except ValueError as exc:
        print(f"smoke: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SmokeFailure as exc:
        print(f"Smoke test failed: {exc}", flush=True)
        return EXIT_FAILED
    print(f"Smoke test passed: {answer}", flush=True)
    return 0
