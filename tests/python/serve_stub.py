"""A tiny OpenAI-style stand-in for qhx_serve, in the standard library only, to test the web page
(tools/serve/web/index.html) in a browser before the real server is in the tree.

It serves the page at /, GET /v1/models, and answers POST /v1/chat/completions with a canned SSE
stream (chat.completion.chunk events, a final usage + timings chunk, `data: [DONE]`) after checking
the request the page sent: stream on, usage asked for, the messages well formed, every image_url
a base64 `data:image/...` URL whose bytes decode. A bad request gets HTTP 400 with an OpenAI error
JSON, a missing or wrong API key (when the stub has one) HTTP 401. Every request body is kept in
`requests` for the test to look at. It is a test fixture, not a model: nothing here is qhx_serve.

    stub = StubServer(page=Path("tools/serve/web/index.html")); stub.start(); ... stub.stop()
    python3 tests/python/serve_stub.py [PORT]      # by hand: serves the page on 127.0.0.1:PORT
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MODEL_ID = "qhexrt-stub"
DATA_URL = re.compile(r"^data:(image/[A-Za-z0-9.+-]+);base64,([A-Za-z0-9+/]*={0,2})$")
IMAGE_MAGIC = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}


class BadRequest(Exception):
    pass


def check_chat_request(body: object) -> list[dict]:
    """The checks a real server's parser would make; returns the images' decoded facts."""
    if not isinstance(body, dict):
        raise BadRequest("the body is not a JSON object")
    if body.get("stream") is not True:
        raise BadRequest("stream must be true (the page always streams)")
    if body.get("stream_options") != {"include_usage": True}:
        raise BadRequest("stream_options must be {include_usage: true} (the page shows the usage)")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest("messages must be a non-empty array")
    images = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise BadRequest(f"messages[{i}]: role must be system, user or assistant")
        content = m.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list) or not content:
            raise BadRequest(f"messages[{i}].content must be a string or a non-empty array of parts")
        for j, part in enumerate(content):
            where = f"messages[{i}].content[{j}]"
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                if not isinstance(part.get("text"), str):
                    raise BadRequest(f"{where}.text must be a string")
            elif kind == "image_url":
                url = (part.get("image_url") or {}).get("url", "")
                match = DATA_URL.match(url) if isinstance(url, str) else None
                if not match:
                    raise BadRequest(f"{where}.image_url.url is not a base64 data:image URL")
                try:
                    raw = base64.b64decode(match.group(2), validate=True)
                except binascii.Error as e:
                    raise BadRequest(f"{where}: bad base64: {e}") from None
                magic = IMAGE_MAGIC.get(match.group(1))
                if magic and not raw.startswith(magic):
                    raise BadRequest(f"{where}: the bytes are not a {match.group(1)} file")
                images.append({"message": i, "mime": match.group(1), "bytes": len(raw)})
            else:
                raise BadRequest(f"{where}.type must be text or image_url")
    if msgs[-1].get("role") != "user":
        raise BadRequest("the last message must be the user's")
    return images


def last_user_text(msgs: list[dict]) -> str:
    content = msgs[-1]["content"]
    if isinstance(content, str):
        return content
    return " ".join(p["text"] for p in content if p.get("type") == "text")


class StubServer:
    def __init__(self, page: Path, api_key: str | None = None, chunk_delay_s: float = 0.05,
                 host: str = "127.0.0.1", port: int = 0):
        self.page = page
        self.api_key = api_key
        self.chunk_delay_s = chunk_delay_s
        self.requests: list[dict] = []      # every /v1/chat/completions body, in order
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):   # quiet: pytest shows failures, not access logs
                pass

            def _json(self, status: int, obj: object) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str, kind: str) -> None:
                self._json(status, {"error": {"message": message, "type": kind, "param": None, "code": None}})

            def _authorized(self) -> bool:
                if stub.api_key is None or self.headers.get("Authorization") == f"Bearer {stub.api_key}":
                    return True
                self._error(401, "Invalid API key", "invalid_request_error")
                return False

            def do_GET(self):
                if self.path == "/":
                    data = stub.page.read_bytes()   # read each time: an edit shows on reload
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif self.path == "/v1/models":
                    if self._authorized():
                        self._json(200, {"object": "list", "data": [
                            {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "qhexrt"}]})
                else:
                    self._error(404, f"no route {self.path}", "not_found_error")

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path != "/v1/chat/completions":
                    self._error(404, f"no route {self.path}", "not_found_error")
                    return
                if not self._authorized():
                    return
                try:
                    body = json.loads(raw)
                    images = check_chat_request(body)
                except (ValueError, BadRequest) as e:
                    self._error(400, str(e), "invalid_request_error")
                    return
                with stub._lock:
                    stub.requests.append(body)
                self._stream(body, images)

            def _stream(self, body: dict, images: list[dict]) -> None:
                text = last_user_text(body["messages"])
                # The answer tells what the stub saw, so the page's test can read it back.
                n_img = sum(1 for im in images if im["message"] == len(body["messages"]) - 1)
                words = ["Stub", " answer", f" to turn {sum(m['role'] == 'user' for m in body['messages'])}:",
                         f" {n_img} image(s),", f" you said \u201c{text}\u201d."]
                if text.startswith("slow"):   # for the Stop button: a long, slow answer
                    words += [" and so on"] * 200
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")   # the stream ends with the connection
                self.end_headers()
                self.close_connection = True
                base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": int(time.time()),
                        "model": body.get("model", MODEL_ID)}

                def event(obj: object) -> None:
                    self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                    self.wfile.flush()

                try:
                    event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                "finish_reason": None}]})
                    for w in words:
                        time.sleep(stub.chunk_delay_s)
                        event({**base, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]})
                    event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                    prompt_tokens = 40 + 256 * len(images)
                    event({**base, "choices": [],
                           "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(words),
                                     "total_tokens": prompt_tokens + len(words),
                                     "prompt_tokens_details": {"cached_tokens": 12 if len(body["messages"]) > 1 else 0},
                                     # As qhx_serve: its timings inside usage. Vision time only for a
                                     # new image (a real server caches the features).
                                     "timings": {"prompt_ms": 123.4, "decode_per_second": 27.5,
                                                 "vision_ms": 456.7 if n_img else 0.0}}})
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass   # the page stopped reading (Stop, New chat): nothing to answer

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="serve_stub", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> "StubServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8080
    stub = StubServer(root / "tools" / "serve" / "web" / "index.html", port=port).start()
    print(f"serve_stub: {stub.url} (Ctrl+C stops)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        stub.stop()
