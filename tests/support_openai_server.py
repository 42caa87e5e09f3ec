"""A small OpenAI-compatible server on 127.0.0.1 that records every request it gets.

Tests drive real clients (AIPerf, the `openai` SDK) against it and then assert on what
arrived on the wire: headers, body, order of content parts. It answers instantly by
default, so it also measures how fast a client can go (tests/perf_client_capacity.py).

Usage:
    with RecordingOpenAIServer(models=["m"]) as server:
        ...  # point a client at server.url
        server.chat_requests()  # what arrived at /v1/chat/completions

Behaviour knobs are plain attributes and may change while the server runs:
`models`, `answer`, `fail_status` (answer chat requests with this HTTP status),
`empty_answer`, `delay_secs` (before answering a chat request), `record` (keep requests),
`usage` (False: no token counts, as a server that sends no usage), `sticky` (a worker per
session header, as Dynamo's session affinity), `workers` (how many worker ids answer),
`frontend_prompt_tokens` (serve a Dynamo frontend's `/metrics` counting this many prompt
tokens per answered request; its `usage` always says 1) and `frontend_cached_share` (the
share of them its counters say came from prefix caches; None: no cached count).
A chat request whose body asks `"nvext": {"extra_fields": ["worker_id"]}` gets a
Dynamo-like `nvext.worker_id` in its first streamed chunk (or the non-streamed body), so
code that reads worker ids from AIPerf's raw export can be tested without Dynamo.
"""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received_at: float

    def header(self, name: str) -> str | None:
        """Case-insensitive header lookup (HTTP header names are case-insensitive)."""
        lowered = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == lowered), None)


def requested_output_tokens(body: dict[str, Any]) -> int | None:
    """The output length a chat body asks for (`max_completion_tokens` or `max_tokens`)."""
    return body.get("max_completion_tokens", body.get("max_tokens"))


class RecordingOpenAIServer:
    """Serves `/v1/models` and `/v1/chat/completions` on 127.0.0.1 (a free port)."""

    def __init__(
        self,
        models: list[str] | tuple[str, ...] = ("test-model",),
        answer: str = "the red box moves left and the blue ball moves right",
        *,
        workers: int = 8,
        record: bool = True,
    ) -> None:
        self.models = list(models)
        self.answer = answer
        self.fail_status: int | None = None
        # With fail_status: how many chat requests fail before the rest succeed (None: all).
        self.fail_count: int | None = None
        self._failed = 0
        self.empty_answer = False
        # A server that stops early: at most this many output tokens (None: as asked).
        self.max_tokens: int | None = None
        self.delay_secs = 0.0
        self.usage = True
        self.sticky = False
        self.frontend_prompt_tokens: int | None = None
        self.frontend_cached_share: float | None = None
        self.record = record
        self.workers = workers
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._served = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RecordingOpenAIServer:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start_app())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="recording-openai-server", daemon=True)
        self._thread.start()
        if not ready.wait(timeout=15):
            raise RuntimeError("recording OpenAI server did not start within 15 s")
        if failure:
            raise RuntimeError(f"recording OpenAI server failed to start: {failure[0]!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=15)
        self._loop = None

    def __enter__(self) -> RecordingOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def _start_app(self) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))  # port 0: a free port, other tests run beside us
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    # -- recorded data -----------------------------------------------------------------
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests() if r.path == "/v1/chat/completions"]

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()

    @property
    def served(self) -> int:
        """Chat requests answered so far (counted even when `record` is off)."""
        return self._served

    def _keep(self, request: web.Request, body: Any) -> None:
        if not self.record:
            return
        entry = RecordedRequest(
            method=request.method,
            path=request.path,
            headers=dict(request.headers),
            body=body,
            received_at=time.time(),
        )
        with self._lock:
            self._requests.append(entry)

    # -- handlers ----------------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.frontend_prompt_tokens is None:
            return web.Response(status=404)
        counted, share = self._served * self.frontend_prompt_tokens, self.frontend_cached_share
        cached = "" if share is None else (
            f'dynamo_frontend_cached_tokens_sum{{model="m"}} {counted * share}\n'
            f'dynamo_frontend_cached_tokens_count{{model="m"}} {self._served}\n')
        return web.Response(text=f'dynamo_frontend_input_sequence_tokens_sum{{model="m"}} '
                                 f"{counted}\n{cached}")

    async def _models(self, request: web.Request) -> web.Response:
        self._keep(request, None)
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
        self._keep(request, body)
        if self.delay_secs:
            await asyncio.sleep(self.delay_secs)
        if self.fail_status is not None and (self.fail_count is None
                                             or self._failed < self.fail_count):
            self._failed += 1
            return web.json_response(
                {"error": {"message": f"test server fails with {self.fail_status}"}},
                status=self.fail_status,
            )
        with self._lock:
            self._served += 1
            worker = self._served % self.workers
        session = request.headers.get("X-Dynamo-Session-ID")
        if self.sticky and session:
            worker = sum(session.encode()) % self.workers
        tokens = min(requested_output_tokens(body) or 16, self.max_tokens or 10**9)
        pieces = [] if self.empty_answer else self._answer_pieces(tokens)
        nvext = self._nvext(body, worker)
        if body.get("stream"):
            return await self._stream(request, body, pieces, nvext)
        message = {"role": "assistant", "content": "".join(pieces)}
        payload: dict[str, Any] = {
            "id": f"chatcmpl-{self._served}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
        }
        if self.usage:
            payload["usage"] = {"prompt_tokens": 1, "completion_tokens": len(pieces),
                                "total_tokens": 1 + len(pieces)}
        if nvext:
            payload["nvext"] = nvext
        return web.json_response(payload)

    def _answer_pieces(self, tokens: int) -> list[str]:
        """`tokens` one-word pieces: the answer's words, cycled (one token each)."""
        words = self.answer.split() or ["ok"]
        return [(" " if i else "") + words[i % len(words)] for i in range(tokens)]

    @staticmethod
    def _nvext(body: dict[str, Any], worker: int) -> dict[str, Any] | None:
        fields = (body.get("nvext") or {}).get("extra_fields") or []
        if "worker_id" not in fields:
            return None
        return {"worker_id": {"prefill_worker_id": worker, "decode_worker_id": worker}}

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        pieces: list[str],
        nvext: dict[str, Any] | None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        include_usage = self.usage and bool((body.get("stream_options") or {}).get(
            "include_usage"))
        # One write for the whole answer, rendered once per shape: the server costs next
        # to nothing per request, so a client's own speed shows.
        await response.write(sse_body(
            str(body.get("model")), tuple(pieces), json.dumps(nvext) if nvext else "",
            include_usage,
        ))
        await response.write_eof()
        return response


@functools.lru_cache(maxsize=64)
def sse_body(model: str, pieces: tuple[str, ...], nvext_json: str, include_usage: bool) -> bytes:
    """A whole streamed chat answer: one chunk per piece, the final chunk, usage, [DONE]."""
    base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0,
            "model": model}
    nvext = json.loads(nvext_json) if nvext_json else None
    events = []
    for i, piece in enumerate(pieces):
        chunk = {**base, "choices": [{"index": 0, "delta": {"content": piece},
                                      "finish_reason": None}]}
        if i == 0 and nvext:
            chunk["nvext"] = nvext
        events.append(chunk)
    final = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    if not pieces and nvext:
        final["nvext"] = nvext
    events.append(final)
    if include_usage:
        usage = {"prompt_tokens": 1, "completion_tokens": len(pieces),
                 "total_tokens": 1 + len(pieces)}
        events.append({**base, "choices": [], "usage": usage})
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()
