"""The smoke test against a recording OpenAI-compatible server on 127.0.0.1: it passes on a
non-empty answer, and each failure gives its one reason and a non-zero exit."""

from __future__ import annotations

import threading

import pytest

from benchmarks.__main__ import main
from benchmarks.smoke import SmokeConfig, SmokeFailure, run_smoke
from tests.support_openai_server import RecordingOpenAIServer

MODEL = "nvidia/test-reasoner"
VIDEO = "http://127.0.0.1:9/videos/video_0000.mp4"


def _cli(*argv: str) -> int:
    return main(["smoke", *argv])


@pytest.fixture()
def server():
    with RecordingOpenAIServer(models=[MODEL]) as running:
        yield running


def test_passes_on_an_answer_and_sends_the_video_first(server, capsys) -> None:
    code = _cli("--url", server.url, "--video-url", VIDEO, "--model", MODEL, "--wait", "5")
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert out[-1].startswith("Smoke test passed: the red box moves")
    (chat,) = server.chat_requests()
    content = chat.body["messages"][0]["content"]
    assert [p["type"] for p in content] == ["video_url", "text"]
    assert content[0]["video_url"]["url"] == VIDEO
    assert chat.body["model"] == MODEL


def test_unreachable_endpoint(capsys) -> None:
    with RecordingOpenAIServer() as gone:
        url = gone.url  # free port, nothing listens once the server stops
    code = _cli("--url", url, "--video-url", VIDEO, "--wait", "1")
    assert code == 1
    first, *_, last = capsys.readouterr().out.strip().splitlines()
    assert last.startswith("Smoke test failed: endpoint unreachable")
    # Why it waits is said at once (a Job's log shows it), not after 30 s.
    assert first.startswith("smoke: waiting for ") and "endpoint unreachable" in first


def test_model_not_listed(server, capsys) -> None:
    server.models = ["some/other-model"]
    code = _cli("--url", server.url, "--video-url", VIDEO, "--model", MODEL, "--wait", "1")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 1
    assert last.startswith("Smoke test failed: model not listed")
    assert "some/other-model" in last
    assert server.chat_requests() == []


def test_http_error(server, capsys) -> None:
    server.fail_status = 500
    code = _cli("--url", server.url, "--video-url", VIDEO, "--model", MODEL, "--wait", "5")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 1
    assert last.startswith("Smoke test failed: HTTP error: 500")
    assert "test server fails with 500" in last


def test_empty_answer(server, capsys) -> None:
    server.empty_answer = True
    code = _cli("--url", server.url, "--video-url", VIDEO, "--model", MODEL, "--wait", "5")
    assert code == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith(
        "Smoke test failed: empty answer")


def test_waits_until_the_model_is_listed(server) -> None:
    server.models = []
    timer = threading.Timer(1.0, lambda: setattr(server, "models", [MODEL]))
    timer.start()
    try:
        answer = run_smoke(SmokeConfig(url=server.url, video_url=VIDEO, model=MODEL,
                                       wait_secs=20, poll_secs=0.2), say=lambda _: None)
    finally:
        timer.cancel()
    assert answer.startswith("the red box")
    assert len([r for r in server.requests() if r.path == "/v1/models"]) >= 2


def test_wait_is_bounded(server) -> None:
    server.models = []
    with pytest.raises(SmokeFailure, match="model not listed.*after 0 s"):
        run_smoke(SmokeConfig(url=server.url, video_url=VIDEO, model=MODEL, wait_secs=0.3,
                              poll_secs=0.1), say=lambda _: None)


def test_bad_input_exits_2(capsys) -> None:
    assert _cli("--url", "localhost:8000", "--video-url", VIDEO) == 2
    assert "--url" in capsys.readouterr().err


def test_a_missing_video_file_is_named_before_any_wait(server, capsys) -> None:
    server.models = []  # the model never appears: a wait would last all of --wait
    code = _cli("--url", server.url, "--video-url", "no/such/video.mp4", "--model", MODEL,
                "--wait", "600")
    assert code == 2
    assert "--video-url no/such/video.mp4: not a URL and no such file" in capsys.readouterr().err
    assert not server.requests(), "it asked the server before checking its own input"


@pytest.mark.parametrize(("counted", "expected"), [
    (None, "prefix-cache share will read n/a"),
    (1, "the frontend counts this prompt as the server does (1 tokens)"),
    (7, "WARNING the frontend counted 7 prompt tokens, the server's usage 1"),
])
def test_the_frontends_prompt_count_is_checked_once_against_usage(
        server, counted: int | None, expected: str) -> None:
    """The sweep's prefix-cache share divides by the frontend's prompt count: the smoke
    request compares it with the server's own `usage.prompt_tokens`."""
    server.frontend_prompt_tokens = counted
    said: list[str] = []
    run_smoke(SmokeConfig(url=server.url, video_url=VIDEO, model=MODEL, wait_secs=5),
              say=said.append)
    assert any(expected in line for line in said), said
