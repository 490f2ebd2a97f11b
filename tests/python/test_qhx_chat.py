"""qhx_chat driven through a pseudo-terminal (the standard library's pty: the tool gets a
real controlling terminal, and Ctrl-C is the terminal's interrupt character, so the
line discipline sends SIGINT as it would to a user's session). On the tiny reference
checkpoint tiny_a, greedy:

- two turns, the first with an image attached by /image: the streamed first answer is
  qhx_generate's text for the same image and prompt, and /stats then shows the second
  turn's prompt mostly cached;
- /reset empties the session; /quit exits 0;
- Ctrl-C in the middle of a long answer stops it ("[cancelled]", stop reason cancelled in
  /stats) and returns to the prompt; the tool keeps answering; a Ctrl-C at the prompt
  says how to exit and a second one exits 0;
- end of input (Ctrl-D) exits 0.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import cache_dir, tool_path

CHECKPOINT = cache_dir() / "reference" / "tiny_a" / "checkpoint"
IMAGE = cache_dir() / "reference" / "images" / "img256x320.png"
TIMEOUT_S = 120


class Terminal:
    """A program on a pseudo-terminal, with expect-style reading."""

    def __init__(self, argv: list[str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its controlling terminal and stdin/stdout/stderr
            try:
                os.execv(argv[0], argv)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.out = b""  # everything read, \r\n turned into \n
        self.pos = 0    # where the next expect starts looking
        self.status: int | None = None

    def _read(self, timeout: float) -> bool:
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            data = b""
        if not data:
            raise EOFError
        self.out += data.replace(b"\r\n", b"\n")
        return True

    def expect(self, pattern: str, timeout: float = TIMEOUT_S) -> re.Match[bytes]:
        rx = re.compile(pattern.encode())
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.out, self.pos)
            if m:
                self.pos = m.end()
                return m
            left = deadline - time.monotonic()
            try:
                if left <= 0 or not self._read(min(left, 1.0)) and time.monotonic() >= deadline:
                    raise AssertionError(f"timed out waiting for {pattern!r}; output so far:\n"
                                         f"{self.out.decode(errors='replace')}")
            except EOFError:
                raise AssertionError(f"the program ended before {pattern!r}; output:\n"
                                     f"{self.out.decode(errors='replace')}") from None

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait(self, timeout: float = TIMEOUT_S) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self._read(0.2)
            except EOFError:
                pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
        raise AssertionError("the program did not exit; output:\n" + self.out.decode(errors="replace"))

    def close(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
        os.close(self.fd)


@pytest.fixture()
def chat():
    tool = tool_path("qhx_chat")
    if not os.access(tool, os.X_OK):
        pytest.fail(f"{tool} not built (scripts/build.sh, or set QHX_BIN)")
    if not (CHECKPOINT / "config.json").is_file() or not IMAGE.is_file():
        pytest.fail(f"{CHECKPOINT} or {IMAGE} missing: run tests/reference/build_all.py")
    opened: list[Terminal] = []

    def start(*args: str) -> Terminal:
        t = Terminal([str(tool), "-m", str(CHECKPOINT), "--temp", "0", *args])
        opened.append(t)
        t.expect(r"/help for commands\.\n> ")
        return t

    yield start
    for t in opened:
        t.close()


def answer_of(t: Terminal, typed: str) -> str:
    """Types a line and returns the streamed answer (between the echoed line and the next prompt)."""
    t.send(typed.encode() + b"\n")
    t.expect(re.escape(typed) + r"\n")  # the terminal's echo
    m = t.expect(r"(?s)(.*?)\n> ")
    return m.group(1).decode()


def test_two_turns_with_an_image_stats_reset_quit(chat):
    n = 16
    proc = subprocess.run([str(tool_path("qhx_generate")), "-m", str(CHECKPOINT), "--temp", "0", "-n", str(n),
                           "-p", "Describe this image.", "-i", str(IMAGE), "--json"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
    ref = json.loads(proc.stdout.strip().splitlines()[-1])

    t = chat("-n", str(n))
    t.send(f"/image {IMAGE}\n".encode())
    t.expect(r"\[image .*img256x320\.png attached to the next message\]\n> ")
    first = answer_of(t, "Describe this image.")
    assert first == ref["text"].replace("\r\n", "\n"), (first, ref["text"])
    answer_of(t, "What colour is it?")
    t.send(b"/stats\n")
    m = t.expect(r"session: 4 messages, (\d+) tokens in the KV cache\n"
                 r"last answer: (\d+) prompt tokens \((\d+) cached, (\d+) prefilled\), (\d+) generated, stop: (\w+)\n"
                 r"timings: .*\n"
                 r"image cache: (\d+) hits, (\d+) misses")
    kv, prompt, cached, prefilled = (int(m.group(i)) for i in range(1, 5))
    assert cached > len(ref["prompt_tokens"]) and prefilled < 30 and prompt == cached + prefilled, m.group(0)
    assert kv >= prompt and int(m.group(8)) == 1, m.group(0)  # the image went through the encoder once
    t.send(b"/reset\n")
    t.expect(r"\[conversation reset\]\n> ")
    t.send(b"/stats\n")
    t.expect(r"session: 0 messages.*\nlast answer: none yet\n")
    again = answer_of(t, "Hello")  # a fresh conversation still answers
    assert again is not None
    t.send(b"/quit\n")
    assert t.wait() == 0


def test_ctrl_c_cancels_an_answer_and_twice_at_the_prompt_exits(chat):
    t = chat("-n", "4000")
    t.send(b"Tell me a very long story.\n")
    t.expect(r"Tell me a very long story\.\n")
    t.expect(r"(?s).{40}")  # the answer is streaming
    t.send(b"\x03")  # the terminal's interrupt character: SIGINT
    t.expect(r"\n\[cancelled\]\n> ")
    t.send(b"/stats\n")
    m = t.expect(r"last answer: \d+ prompt tokens .*, (\d+) generated, stop: (\w+)\n")
    assert m.group(2) == b"cancelled" and 0 < int(m.group(1)) < 4000, m.group(0)
    t.expect(r"> ")
    t.send(b"\x03")
    t.expect(r"\(Ctrl-C again, or /quit, to exit\)\n> ")
    t.send(b"\x03")
    assert t.wait() == 0


def test_end_of_input_exits(chat):
    t = chat("-n", "4")
    t.send(b"\x04")  # Ctrl-D on an empty line: end of input
    assert t.wait() == 0


def test_speculation_answers_as_plain_decoding(chat):
    prompt, n = "one two three four one two three four one two three four one two three four", 24
    proc = subprocess.run([str(tool_path("qhx_generate")), "-m", str(CHECKPOINT), "--temp", "0", "-n", str(n),
                           "-p", prompt, "--json"], capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
    ref = json.loads(proc.stdout.strip().splitlines()[-1])
    t = chat("-n", str(n), "--speculate", "ngram:4")
    assert answer_of(t, prompt) == ref["text"].replace("\r\n", "\n")
    t.send(b"/stats\n")
    m = t.expect(r"over (\d+) steps \| (\d+) drafted, (\d+) accepted\n")
    steps, accepted = int(m.group(1)), int(m.group(3))
    assert accepted > 0 and steps < ref["timings"]["decode_steps"], m.group(0)
    t.send(b"/quit\n")
    assert t.wait() == 0


def test_bad_speculate_value_is_refused_naming_it():
    proc = subprocess.run([str(tool_path("qhx_chat")), "-m", str(CHECKPOINT), "--speculate", "ngram:99"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0 and "--speculate ngram:99" in proc.stderr, (proc.returncode, proc.stderr)
