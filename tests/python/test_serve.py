"""qhx_serve, the OpenAI-compatible server, driven by the official `openai` client and by raw HTTP.

On the tiny_a checkpoint (tests/reference; served straight from its folder, the default f32 plan):
  - a non-streaming and a streaming completion with an image data: URL give, greedily, the text
    `qhx_generate --messages FILE.json --temp 0 --json` gives for the same conversation;
  - a follow-up that resends the history reports cached_tokens >= the previous prompt's length;
  - a wrong or missing key is refused (openai.AuthenticationError, 401);
  - every malformed request gets its status and OpenAI's error JSON, and the server keeps serving;
  - a full queue answers 503 with Retry-After; a client that goes away mid-stream cancels its
    generation; a stalled client is timed out without holding the model; SIGTERM drains and the
    process exits 0;
  - bench/serve_load.py --quick (8 clients, streaming and not, some disconnecting) passes.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai
import pytest

from conftest import REPO_ROOT, split_lines, tool_path
from serve_util import ServeProcess

sys.path.insert(0, str(REPO_ROOT / "tests" / "reference"))
import build_all  # noqa: E402

KEY = "test-key-0123456789"
MAX_NEW = 8
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    build_all.ensure_reference("tiny_a", log=lambda *a: None)
    ckpt = build_all.reference_dir("tiny_a") / "checkpoint"
    assert (ckpt / "config.json").is_file(), f"{ckpt}: no checkpoint (run tests/reference/build_all.py)"
    return ckpt


@pytest.fixture(scope="module")
def image_path(checkpoint) -> Path:
    p = build_all.reference_dir("tiny_a").parent / "images" / "img256x320.png"
    assert p.is_file(), f"{p} missing: run tests/reference/build_all.py"
    return p


def serve_exe() -> Path:
    exe = tool_path("qhx_serve")
    assert exe.is_file(), f"{exe} not built: cmake --build build --target qhx_serve (or set QHX_BIN)"
    return exe


@pytest.fixture(scope="module")
def server(checkpoint, image_path, tmp_path_factory):
    s = ServeProcess(serve_exe(), checkpoint,
                     ["--api-key", KEY, "--max-queue", "8", "--max-body-mb", "2", "--sessions", "2",
                      "--allow-file-dir", str(image_path.parent), "--max-images", "4"],
                     tmp_path_factory.mktemp("serve_logs"))
    yield s
    rc = s.stop()
    assert rc == 0, f"qhx_serve exited with {rc} on SIGTERM: {s.log()}"


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=TIMEOUT_S)


def data_url(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def qhx_generate(checkpoint: Path, messages: list[dict], tmp: Path, max_new: int = MAX_NEW) -> dict:
    f = tmp / "messages.json"
    f.write_text(json.dumps(messages))
    exe = tool_path("qhx_generate")
    assert exe.is_file(), f"{exe} not built"
    p = subprocess.run([str(exe), "-m", str(checkpoint), "--messages", str(f), "--temp", "0",
                        "-n", str(max_new), "--json"], capture_output=True, timeout=TIMEOUT_S, check=False)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return json.loads(split_lines(p.stdout)[-1])


def image_conversation(image: Path, as_openai: bool) -> list[dict]:
    part = ({"type": "image_url", "image_url": {"url": data_url(image)}} if as_openai
            else {"type": "image", "path": str(image)})
    return [{"role": "system", "content": "You describe pictures."},
            {"role": "user", "content": [part, {"type": "text", "text": "What is in this picture?"}]}]


def request(server, method: str, path: str, body: bytes | str | dict | list | None = None,
            key: str | None = KEY, headers: dict | None = None) -> tuple[int, dict, dict | str]:
    """(status, headers, the body: parsed JSON when it is JSON) of one raw HTTP request."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT_S)
    h = dict(headers or {})
    if key is not None:
        h["Authorization"] = "Bearer " + key
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    if body is not None:
        h.setdefault("Content-Type", "application/json")
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    data = r.read()
    out_headers = {k.lower(): v for k, v in r.getheaders()}
    conn.close()
    if "json" in out_headers.get("content-type", ""):
        return r.status, out_headers, json.loads(data)
    return r.status, out_headers, data.decode(errors="replace")


def check_error(status: int, body, want_status: int, want_code: str | None = None, want_param: str | None = None):
    assert status == want_status, body
    assert isinstance(body, dict) and set(body) == {"error"}, body
    e = body["error"]
    assert set(e) == {"message", "type", "param", "code"}, e
    assert isinstance(e["message"], str) and e["message"], e
    assert isinstance(e["type"], str) and e["type"], e
    if want_code is not None:
        assert e["code"] == want_code, e
    if want_param is not None:
        assert e["param"] == want_param, e


def still_serving(client) -> None:
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "ping"}],
                                       max_tokens=2, temperature=0)
    assert r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens >= 1


def test_non_streaming_image_equals_qhx_generate(client, checkpoint, image_path, tmp_path):
    want = qhx_generate(checkpoint, image_conversation(image_path, as_openai=False), tmp_path)
    assert want["text"] and want["tokens"], want  # something to compare
    r = client.chat.completions.create(model="tiny", messages=image_conversation(image_path, True),
                                       max_tokens=MAX_NEW, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.content == want["text"]
    assert r.choices[0].finish_reason == ("length" if want["stop_reason"] == "max_new_tokens" else "stop")
    assert r.usage.prompt_tokens == len(want["prompt_tokens"])
    assert r.usage.completion_tokens == len(want["tokens"])
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens >= 0
    timings = r.usage.model_extra["timings"]
    for k in ("prompt_ms", "vision_ms", "decode_per_second", "ttft_ms"):
        assert isinstance(timings[k], (int, float)) and timings[k] >= 0, timings


def test_streaming_image_equals_qhx_generate(client, checkpoint, image_path, tmp_path):
    want = qhx_generate(checkpoint, image_conversation(image_path, as_openai=False), tmp_path)
    stream = client.chat.completions.create(model="tiny", messages=image_conversation(image_path, True),
                                            max_tokens=MAX_NEW, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    text, finish, usage, chunks = "", None, None, 0
    for chunk in stream:
        chunks += 1
        assert chunk.object == "chat.completion.chunk"
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage
    assert text == want["text"]
    assert chunks >= 3 and finish in ("stop", "length")
    assert usage is not None and usage.prompt_tokens == len(want["prompt_tokens"])
    # the image was seen by the test before: its features come from the image cache
    assert usage.model_extra["timings"]["images_encoded"] == 0


def test_follow_up_reuses_the_cached_prefix(client, image_path):
    history = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(image_path)}},
                                            {"type": "text", "text": "Describe it in a word."}]}]
    first = client.chat.completions.create(model="tiny", messages=history, max_tokens=MAX_NEW, temperature=0)
    history += [{"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "And its colour?"}]
    second = client.chat.completions.create(model="tiny", messages=history, max_tokens=MAX_NEW, temperature=0)
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
    assert second.usage.model_extra["timings"]["images_encoded"] == 0
    # the same request again: everything but the last position comes from the cache
    third = client.chat.completions.create(model="tiny", messages=history, max_tokens=MAX_NEW, temperature=0)
    assert third.usage.prompt_tokens_details.cached_tokens >= second.usage.prompt_tokens - 1
    assert third.choices[0].message.content == second.choices[0].message.content


def test_file_url_under_the_allowed_dir(client, image_path):
    r = client.chat.completions.create(
        model="tiny", max_tokens=2, temperature=0,
        messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file://" + str(image_path)}},
                                                {"type": "text", "text": "Hi"}]}])
    assert r.usage.completion_tokens >= 1


def test_wrong_key_is_refused(server, client):
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    status, _, body = request(server, "POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "hi"}]}, key=None)
    check_error(status, body, 401, "invalid_api_key")
    still_serving(client)


def tiny_png() -> str:
    from io import BytesIO

    from PIL import Image
    buf = BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


TINY_PNG = tiny_png()


def user(content) -> dict:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 2}


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


BAD_REQUESTS = {
    "malformed JSON": ('{"messages": [', 400, "invalid_json", None),
    "body not an object": ([1, 2], 400, "invalid_type", None),
    "no messages": ({"model": "m"}, 400, "missing_required_parameter", "messages"),
    "messages not an array": ({"messages": "hi"}, 400, "invalid_type", "messages"),
    "empty messages": ({"messages": []}, 400, "empty_array", "messages"),
    "role not a string": ({"messages": [{"role": 1, "content": "x"}]}, 400, "invalid_type", "messages[0].role"),
    "unknown role": ({"messages": [{"role": "tool", "content": "x"}]}, 400, "invalid_value", "messages[0].role"),
    "last not user": ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]},
                      400, "invalid_value", "messages[1].role"),
    "content a number": (user(5), 400, "invalid_type", "messages[0].content"),
    "unsupported part": (user([{"type": "input_audio", "input_audio": {}}]), 400, "unsupported_content_type",
                         "messages[0].content[0].type"),
    "text part without text": (user([{"type": "text"}]), 400, "invalid_type", "messages[0].content[0].text"),
    "bad base64": (user([image_part("data:image/png;base64,@@@@")]), 400, "invalid_base64", None),
    "not an image": (user([image_part("data:image/png;base64," + base64.b64encode(b"hello world").decode())]),
                     400, "invalid_image", None),
    "corrupt image": (user([image_part("data:image/png;base64," + base64.b64encode(
        base64.b64decode(TINY_PNG)[:40]).decode())]), 400, None, None),
    "data URL not base64": (user([image_part("data:image/png,abc")]), 400, "invalid_image_url", None),
    "http image": (user([image_part("https://example.com/cat.png")]), 400, "remote_image_refused", None),
    "file outside the allowed dir": (user([image_part("file:///etc/hostname")]), 400, "file_url_refused", None),
    "too many images": (user([image_part("data:image/png;base64," + TINY_PNG)] * 5), 400, "too_many_images", None),
    "prompt over the context": (user("hello " * 5000), 400, "context_length_exceeded", "messages"),
    "prompt + max_tokens over the context": ({**user("hello " * 4080), "max_tokens": 100}, 400,
                                             "context_length_exceeded", "messages"),
    "n = 2": ({**user("x"), "n": 2}, 400, "unsupported_value", "n"),
    "temperature a string": ({**user("x"), "temperature": "hot"}, 400, "invalid_type", "temperature"),
    "temperature out of range": ({**user("x"), "temperature": 7}, 400, "invalid_value", "temperature"),
    "max_tokens 0": ({**user("x"), "max_tokens": 0}, 400, "invalid_value", "max_tokens"),
    "max_tokens a float": ({**user("x"), "max_tokens": 1.5}, 400, "invalid_type", "max_tokens"),
    "stream not a boolean": ({**user("x"), "stream": "yes"}, 400, "invalid_type", "stream"),
    "stop a number": ({**user("x"), "stop": 3}, 400, "invalid_type", "stop"),
    "frequency_penalty": ({**user("x"), "frequency_penalty": 2.5}, 400, "invalid_value", "frequency_penalty"),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_request_gets_its_status_and_the_server_goes_on(server, client, case):
    body, want_status, want_code, want_param = BAD_REQUESTS[case]
    status, _, got = request(server, "POST", "/v1/chat/completions", body)
    check_error(status, got, want_status, want_code, want_param)
    still_serving(client)


def test_routes_methods_and_body_limit(server, client):
    status, _, body = request(server, "GET", "/v1/nothing")
    check_error(status, body, 404)
    status, headers, body = request(server, "GET", "/v1/chat/completions")
    check_error(status, body, 405, "method_not_allowed")
    assert headers["allow"] == "POST"
    status, headers, body = request(server, "POST", "/v1/models", {"x": 1})
    check_error(status, body, 405, "method_not_allowed")
    status, _, body = request(server, "POST", "/v1/chat/completions", "x" * (3 * 1024 * 1024))
    check_error(status, body, 413, "request_too_large")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[], max_tokens=2)
    assert e.value.status_code == 400
    still_serving(client)


def test_models_health_metrics_and_page(server, client):
    models = client.models.list()
    assert len(models.data) == 1 and models.data[0].object == "model"
    status, _, body = request(server, "GET", "/health", key=None)
    assert status == 200 and body["status"] == "ok"
    status, headers, page = request(server, "GET", "/", key=None)
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "<html" in page.lower()
    status, headers, text = request(server, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    for name in ("qhx_http_requests_total{", "qhx_completion_tokens_total ", "qhx_prompt_cached_tokens_total ",
                 "qhx_queue_depth ", "qhx_image_cache_hits_total ", "qhx_http_errors_total{"):
        assert name in text, text
    status, _, body = request(server, "GET", "/metrics", key=None)
    check_error(status, body, 401)


def stream_lines(port: int, body: dict, key: str | None = None):
    """A raw streaming request: (the socket's file, the response status)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=h)
    return conn, conn.getresponse()


def metrics(server, *names: str) -> list[float]:
    """The named unlabelled metrics, from one snapshot of /metrics."""
    status, _, text = request(server, "GET", "/metrics", key=None)
    assert status == 200
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line and not line.startswith("#") and " " in line}
    missing = [n for n in names if n not in values]
    assert not missing, f"{missing} not in /metrics"
    return [values[n] for n in names]


def metric(server, name: str) -> float:
    return metrics(server, name)[0]


LONG = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 3000,
        "temperature": 0.8, "seed": 1, "stream": True}


def test_queue_full_is_503_and_a_disconnect_cancels(checkpoint, tmp_path):
    s = ServeProcess(serve_exe(), checkpoint, ["--max-queue", "1"], tmp_path)
    try:
        conn, r = stream_lines(s.port, LONG)  # runs
        assert r.status == 200
        r.readline()  # the first event: generation has started
        waiting = threading.Thread(target=lambda: request(s, "POST", "/v1/chat/completions",
                                                          {**LONG, "stream": False, "max_tokens": 4}, key=None))
        waiting.start()  # waits in the queue
        deadline = time.monotonic() + 60
        while s.health()["queue_depth"] < 1:
            assert time.monotonic() < deadline, "the second request never queued"
            time.sleep(0.05)
        status, headers, body = request(s, "POST", "/v1/chat/completions", {**LONG, "stream": False}, key=None)
        check_error(status, body, 503, "queue_full")
        assert int(headers["retry-after"]) > 0
        conn.close()  # the client goes away mid-stream: its generation is cancelled
        waiting.join(timeout=120)
        assert not waiting.is_alive()
        deadline = time.monotonic() + 60
        while metric(s, "qhx_completions_cancelled_total") < 1:
            assert time.monotonic() < deadline, "the abandoned stream was not cancelled"
            time.sleep(0.1)
        assert metric(s, "qhx_queue_full_total") == 1
        status, _, body = request(s, "POST", "/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, key=None)
        assert status == 200, body
    finally:
        assert s.stop() == 0, s.log()


def test_a_non_streaming_client_that_disconnects_cancels(checkpoint, tmp_path):
    """Nothing is written to a non-streaming client until its answer is whole: the server
    watches the connection instead, and a client gone mid-generation stops it."""
    s = ServeProcess(serve_exe(), checkpoint, [], tmp_path)
    try:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=TIMEOUT_S)
        body = json.dumps({**LONG, "stream": False}).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        deadline = time.monotonic() + 60
        while not s.health()["generating"]:
            assert time.monotonic() < deadline, "the request never started"
            time.sleep(0.02)
        assert metric(s, "qhx_completions_cancelled_total") == 0
        started = time.monotonic()
        sock.close()   # gone before any answer: 3000 tokens would take minutes here
        while metric(s, "qhx_completions_cancelled_total") < 1:
            assert time.monotonic() < started + 30, "the abandoned request ran on"
            time.sleep(0.05)
        assert not s.health()["generating"]
        # Bytes of a next request waiting on the connection (a pipelining client; httplib
        # reads them only after the answer) are not taken for a hang-up.
        def raw(body: dict) -> bytes:
            b = json.dumps(body).encode()
            return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(b)}\r\n\r\n".encode() + b)
        with socket.create_connection(("127.0.0.1", s.port), timeout=TIMEOUT_S) as pipe:
            pipe.sendall(raw({**LONG, "stream": False, "max_tokens": 300}))
            while not s.health()["generating"]:
                time.sleep(0.01)
            pipe.sendall(raw({**LONG, "stream": False, "max_tokens": 2}))
            f = pipe.makefile("rb")
            status = f.readline()
            assert status.startswith(b"HTTP/1.1 200"), status
            length = None
            while (line := f.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            answer = json.loads(f.read(length))
            assert answer["usage"]["completion_tokens"] == 300, answer["usage"]
        assert metric(s, "qhx_completions_cancelled_total") == 1
    finally:
        assert s.stop() == 0, s.log()


def test_stalled_client_times_out_without_holding_the_model(checkpoint, tmp_path):
    s = ServeProcess(serve_exe(), checkpoint, ["--read-timeout", "1"], tmp_path)
    try:
        stalled = socket.create_connection(("127.0.0.1", s.port))
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
        stalled.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:10])
        t0 = time.monotonic()
        status, _, got = request(s, "POST", "/v1/chat/completions", json.loads(body), key=None)
        assert status == 200, got
        stalled.settimeout(30)
        rest = stalled.recv(65536)  # the server gives up on the stalled body and closes
        assert time.monotonic() - t0 < 30
        assert b"200 OK" not in rest
        stalled.close()
    finally:
        assert s.stop() == 0, s.log()


def test_sigterm_drains_and_exits_0(checkpoint, tmp_path):
    s = ServeProcess(serve_exe(), checkpoint, ["--drain-seconds", "1"], tmp_path)
    conn, r = stream_lines(s.port, LONG)
    assert r.status == 200
    r.readline()
    s.proc.terminate()
    events = []
    for raw in r:  # the stream ends: finished or cancelled, then [DONE]
        line = raw.decode().strip()
        if line.startswith("data: "):
            events.append(line[6:])
    conn.close()
    assert events and events[-1] == "[DONE]"
    assert s.proc.wait(timeout=60) == 0, s.log()
    assert s.stop() == 0


def test_serve_load_quick(checkpoint, tmp_path):
    p = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "serve_load.py"), "--quick",
                        "--bin", str(serve_exe().parent), "-m", str(checkpoint), "--log-dir", str(tmp_path)],
                       capture_output=True, timeout=TIMEOUT_S, check=False, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "p50" in p.stdout and "p95" in p.stdout, p.stdout


def test_two_conversations_keep_their_caches_in_two_slots(client):
    """--sessions 2: conversation B between A's turns does not evict A's cache."""
    def turn(history):
        r = client.chat.completions.create(model="tiny", messages=history, max_tokens=4, temperature=0)
        return r, history + [{"role": "assistant", "content": r.choices[0].message.content}]
    a1, a = turn([{"role": "user", "content": "Conversation A: tell me about the sea. " * 3}])
    b1, b = turn([{"role": "user", "content": "Conversation B: tell me about mountains. " * 3}])
    a2, _ = turn(a + [{"role": "user", "content": "A again: and the tides?"}])
    b2, _ = turn(b + [{"role": "user", "content": "B again: and the snow?"}])
    assert a2.usage.prompt_tokens_details.cached_tokens >= a1.usage.prompt_tokens
    assert b2.usage.prompt_tokens_details.cached_tokens >= b1.usage.prompt_tokens


def test_a_stream_reader_that_stalls_is_cancelled_by_the_write_timeout(checkpoint, tmp_path):
    s = ServeProcess(serve_exe(), checkpoint, ["--write-timeout", "1"], tmp_path)
    try:
        stalled = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, never read
        stalled.connect(("127.0.0.1", s.port))
        body = json.dumps({**LONG, "max_tokens": 4000 - 64}).encode()
        stalled.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        deadline = time.monotonic() + 120
        while True:  # the socket stays open, unread
            cancelled, finished, tokens = metrics(s, "qhx_completions_cancelled_total", "qhx_completions_total",
                                                  "qhx_completion_tokens_total")
            if cancelled >= 1:
                break
            assert time.monotonic() < deadline, "the stalled reader still holds the model"
            assert finished == 0, "the generation ran to its end: nothing stalled"
            time.sleep(0.2)
        # The generation waited for the reader: at most the server's send buffer (64 KiB,
        # doubled by the kernel, at ~240 bytes a chunk), the reader's 8 KiB and the 64
        # pieces the model thread may run ahead: under 700 of the 3,936 tokens asked for.
        assert finished == 1 and tokens < 700, (finished, tokens)
        status, _, got = request(s, "POST", "/v1/chat/completions",
                                 {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, key=None)
        assert status == 200, got
        stalled.close()
    finally:
        assert s.stop() == 0, s.log()


def test_a_second_server_cannot_take_the_same_port(server, checkpoint):
    p = subprocess.run([str(serve_exe()), "-m", str(checkpoint), "--port", str(server.port)],
                       capture_output=True, timeout=TIMEOUT_S, check=False)
    assert p.returncode == 1 and b"cannot bind" in p.stderr, p.stderr


def test_speculate_flag_keeps_greedy_answers(checkpoint, tmp_path):
    """qhx_serve --speculate: every answer decoded with n-gram drafts, the same greedy text and
    tokens as plain decoding, in fewer graph runs; a bad value is refused before loading."""
    prompt = "one two three four one two three four one two three four one two three four"
    messages = [{"role": "user", "content": prompt}]
    want = qhx_generate(checkpoint, messages, tmp_path, max_new=24)
    s = ServeProcess(serve_exe(), checkpoint, ["--speculate", "ngram:4"], tmp_path / "logs")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT_S)
        r = client.chat.completions.create(model="m", messages=messages, max_tokens=24, temperature=0)
        assert r.choices[0].message.content == want["text"]
        assert r.usage.completion_tokens == len(want["tokens"])
        t = r.usage.model_extra["timings"]
        assert t["accepted_tokens"] > 0 and t["decode_steps"] < want["timings"]["decode_steps"], t
    finally:
        assert s.stop() == 0, s.log()
    bad = subprocess.run([str(serve_exe()), "-m", str(checkpoint), "--speculate", "ngram:0"],
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    assert bad.returncode != 0 and "--speculate ngram:0" in bad.stderr, (bad.returncode, bad.stderr)
