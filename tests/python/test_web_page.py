"""The web chat page of qhx_serve (tools/serve/web/index.html) in a real headless Chromium.

Debian's chromium and chromium-driver (scripts/setup.sh) driven by selenium (requirements-ref.txt);
no driver download, no network: the page and its server are on the loopback.

The main test runs twice: against the built `qhx_serve -m MODEL --host 127.0.0.1 --port PORT`
(MODEL from QHX_SERVE_BUNDLE, else the tiny_a reference checkpoint; the binary from QHX_SERVE_BIN,
else build/bin), the page being the one the binary embeds; and against tests/python/serve_stub.py,
a standard-library stand-in that checks what the page sends and streams a canned answer. The tests
of the page's own behaviour (drop, Stop, API key and errors) use the stub, whose answers they
control.

A missing chromium, chromedriver or selenium fails (it never skips: a test that cannot run has
checked nothing). The screenshots of the conversation go to $QHX_CACHE/screenshots/web_chat{,_stub}.png.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO_ROOT, cache_dir, tool_path
from serve_stub import StubServer

PAGE = REPO_ROOT / "tools" / "serve" / "web" / "index.html"
IMAGE = REPO_ROOT / "assets" / "sample.png"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT_S = 30            # one streamed answer from the stub takes well under a second
REAL_WAIT_S = 300      # a real model on a loaded 2-core machine


# --- the browser ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    for p, what in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not p.is_file():
            pytest.fail(f"{p} not found: the Debian package {what} is needed (scripts/setup.sh installs it)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        pytest.fail(f"selenium not importable ({e}): scripts/setup.sh installs scripts/requirements-ref.txt")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)   # with the driver's path too: selenium-manager never runs
    for arg in ("--headless=new", "--no-sandbox",   # root, in a container: no user namespace sandbox
                "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1100,820",
                # Nothing but the loopback: no component updates, sync, metrics or first-run fetches.
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--no-first-run", "--disable-domain-reliability",
                "--disable-client-side-phishing-detection", "--no-default-browser-check"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})   # console messages, for SEVERE
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver, allowed: tuple[str, ...] = ()) -> list[str]:
    """SEVERE browser log lines since the last call (reading the log empties it), less those
    containing one of `allowed`."""
    return [e["message"] for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and not any(a in e["message"] for a in allowed)]


def wait_for(driver, what: str, cond, timeout: float = WAIT_S, poll: float = 0.02):
    """Polls cond(driver) until it returns something truthy; fails naming `what` and the page's
    conversation as it stands."""
    end = time.monotonic() + timeout
    while True:
        got = cond(driver)
        if got:
            return got
        if time.monotonic() > end:
            chat = driver.find_element("id", "chat").text
            pytest.fail(f"timed out after {timeout} s waiting for {what}; the chat reads:\n{chat}")
        time.sleep(poll)


def js(driver, script: str, *args):
    return driver.execute_script(script, *args)


def assistant_parts(driver) -> list[dict]:
    """Each assistant message's answer text and timings line, read from the DOM."""
    return js(driver, """return [...document.querySelectorAll('#chat .msg.assistant')].map(m => ({
        text: m.querySelector('.text').textContent, timings: m.querySelector('.timings').textContent}));""")


def error_messages(driver) -> list[str]:
    return js(driver, "return [...document.querySelectorAll('#chat .msg.error')].map(m => m.textContent);")


def open_page(driver, url: str, allowed: tuple[str, ...] = ()) -> None:
    """Loads the page with an empty localStorage; fails on console errors while it loads."""
    console_errors(driver)   # drop what the last test's page logged as it went away
    driver.get(url)
    js(driver, "localStorage.clear();")
    driver.refresh()
    wait_for(driver, "the page's script", lambda d: js(d, "return document.readyState") == "complete")
    time.sleep(0.2)   # the page's own GET /v1/models
    errors = console_errors(driver, allowed)
    assert not errors, f"console errors while the page loads: {errors}"


def type_and_send(driver, text: str) -> None:
    from selenium.webdriver.common.keys import Keys
    box = driver.find_element("id", "prompt")
    lines = text.split("\n")
    box.send_keys(lines[0])
    for line in lines[1:]:
        box.send_keys(Keys.SHIFT, Keys.ENTER)   # Shift+Enter: a new line, not a send
        box.send_keys(line)
    assert box.get_attribute("value") == text, "Shift+Enter did not make a new line"
    box.send_keys(Keys.ENTER)


def screenshot(driver, name: str) -> Path:
    out = cache_dir() / "screenshots" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(out)), f"no screenshot written to {out}"
    assert out.stat().st_size > 1000, f"{out}: {out.stat().st_size} bytes"
    return out


# --- the servers ------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def real_model() -> Path:
    """QHX_SERVE_BUNDLE, else the tiny_a reference checkpoint itself (qhx_serve opens a Hugging
    Face checkpoint folder as it opens a bundle)."""
    env = os.environ.get("QHX_SERVE_BUNDLE")
    if env:
        return Path(env)
    sys.path.insert(0, str(REPO_ROOT / "tests" / "reference"))
    import build_all
    assert build_all.ensure_reference("tiny_a", log=lambda *a: None)
    ckpt = build_all.reference_dir("tiny_a") / "checkpoint"
    assert (ckpt / "config.json").is_file(), f"{ckpt}: no checkpoint"
    return ckpt


@pytest.fixture(scope="module", params=["stub", "qhx_serve"])
def server(request, tmp_path_factory):
    """(base URL, the stub) or (base URL, None) for the built qhx_serve (QHX_SERVE_BIN overrides
    which binary) serving a real model: the main test runs against both."""
    if request.param == "stub":
        stub = StubServer(PAGE, chunk_delay_s=0.15).start()   # slow enough to see the stream grow
        yield stub.url, stub
        stub.stop()
        return
    exe = os.environ.get("QHX_SERVE_BIN") or str(tool_path("qhx_serve"))
    assert Path(exe).is_file(), f"{exe}: no such file (build qhx_serve, or set QHX_SERVE_BIN)"
    port = free_port()
    log = tmp_path_factory.mktemp("serve_log") / "qhx_serve.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([exe, "-m", str(real_model()), "--host", "127.0.0.1",
                                 "--port", str(port)], stdout=f, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        end = time.monotonic() + REAL_WAIT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"qhx_serve exited with status {proc.returncode}:\n{log.read_text(errors='replace')}")
            try:
                with urllib.request.urlopen(url + "v1/models", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > end:
                pytest.fail(f"qhx_serve not answering {url}v1/models after {REAL_WAIT_S} s")
            time.sleep(0.2)
        yield url, None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- the tests --------------------------------------------------------------------------------

def test_chat_with_an_image_streams_timings_and_new_chat(browser, server):
    url, stub = server
    timeout = WAIT_S if stub else REAL_WAIT_S
    open_page(browser, url)
    if stub:
        wait_for(browser, "the model name from /v1/models",
                 lambda d: d.find_element("id", "model").text == "qhexrt-stub")
    else:
        with urllib.request.urlopen(url + "v1/models", timeout=10) as r:
            model_id = json.loads(r.read())["data"][0]["id"]
        wait_for(browser, "the model name from /v1/models",
                 lambda d: d.find_element("id", "model").text == model_id)

    # The file button: the thumbnail shows before sending.
    browser.find_element("id", "file").send_keys(str(IMAGE))
    wait_for(browser, "the attachment's thumbnail",
             lambda d: js(d, "const i = document.querySelector('#attachments img');"
                             "return i && i.complete && i.naturalWidth > 0;"))

    # The answer streams: the text grows while the timings line (written at [DONE]) is still
    # empty. A MutationObserver in the page times both, free of WebDriver's polling latency.
    js(browser, """
        window.__stream = {firstText: null, timings: null};
        new MutationObserver(() => {
          const all = document.querySelectorAll('#chat .msg.assistant'), m = all[all.length - 1];
          if (!m) return;
          const t = performance.now(), s = window.__stream;
          if (s.firstText === null && m.querySelector('.text').textContent) s.firstText = t;
          if (s.timings === null && m.querySelector('.timings').textContent) s.timings = t;
        }).observe(document.getElementById('chat'), {subtree: true, childList: true, characterData: true});""")
    type_and_send(browser, "What is in this picture?")
    parts = wait_for(browser, "the first answer and its timings",
                     lambda d: assistant_parts(d) and assistant_parts(d)[-1]["timings"] and assistant_parts(d), timeout)
    assert len(parts) == 1 and parts[0]["text"].strip(), parts
    stream = js(browser, "return window.__stream;")
    assert stream["firstText"] is not None and stream["firstText"] < stream["timings"], stream
    if stub:   # the stub's last four chunks come 0.15 s apart after the first: 0.6 s of growing text
        assert stream["timings"] - stream["firstText"] >= 400, f"the answer was not streamed: {stream}"
    assert "ms" in parts[0]["timings"] and "tokens/s" in parts[0]["timings"], parts[0]["timings"]
    assert "cached tokens" in parts[0]["timings"] and "vision" in parts[0]["timings"], parts[0]["timings"]
    assert js(browser, "return document.querySelectorAll('#chat .msg.user img').length") == 1
    assert js(browser, "return document.querySelectorAll('#attachments img').length") == 0
    assert not error_messages(browser), error_messages(browser)

    # A second turn (two lines, by Shift+Enter): the whole conversation is sent again.
    type_and_send(browser, "And the colours?\nBriefly.")
    parts = wait_for(browser, "the second answer", lambda d: len(assistant_parts(d)) == 2
                     and assistant_parts(d)[1]["timings"] and assistant_parts(d), timeout)
    assert parts[1]["text"].strip(), parts
    if stub:
        first, second = stub.requests[-2:]
        assert first["stream"] is True and first["stream_options"] == {"include_usage": True}
        assert first["model"] == "qhexrt-stub"
        [msg] = first["messages"]
        assert msg["role"] == "user"
        image_part, text_part = msg["content"]
        assert text_part == {"type": "text", "text": "What is in this picture?"}
        prefix = "data:image/png;base64,"
        assert image_part["type"] == "image_url" and image_part["image_url"]["url"].startswith(prefix)
        assert base64.b64decode(image_part["image_url"]["url"][len(prefix):]) == IMAGE.read_bytes()
        assert parts[0]["text"] == "Stub answer to turn 1: 1 image(s), you said \u201cWhat is in this picture?\u201d."
        assert second["messages"][:2] == [msg, {"role": "assistant", "content": parts[0]["text"]}]
        assert second["messages"][2] == {"role": "user", "content": "And the colours?\nBriefly."}
        assert "12 cached tokens" in parts[1]["timings"], parts[1]["timings"]
    else:   # the resent history came from the session's cache: at least the first prompt
        m1, m2 = (re.search(r"(\d+) prompt tokens?.*?(\d+) cached tokens", p["timings"]) for p in parts)
        assert m1 and m2, [p["timings"] for p in parts]
        assert int(m2.group(2)) >= int(m1.group(1)), [p["timings"] for p in parts]

    shot = screenshot(browser, "web_chat_stub.png" if stub else "web_chat.png")
    errors = console_errors(browser)
    assert not errors, f"console errors: {errors}"

    browser.find_element("id", "new-chat").click()
    assert js(browser, "return document.getElementById('chat').children.length") == 0
    assert browser.find_element("id", "chat").text == ""
    if stub:   # and the next message starts a new conversation
        type_and_send(browser, "Hello again")
        wait_for(browser, "the answer after New chat", lambda d: assistant_parts(d) and assistant_parts(d)[0]["timings"])
        assert stub.requests[-1]["messages"] == [{"role": "user", "content": "Hello again"}]
    assert not console_errors(browser)
    print(f"screenshot: {shot}")


@pytest.fixture
def stub():
    s = StubServer(PAGE, chunk_delay_s=0.02).start()
    yield s
    s.stop()


def test_an_image_dropped_on_the_page_is_sent(browser, stub):
    open_page(browser, stub.url)
    # A drop as the browser makes one: a DragEvent whose DataTransfer holds the file.
    b64 = base64.b64encode(IMAGE.read_bytes()).decode()
    js(browser, """
        const bytes = Uint8Array.from(atob(arguments[0]), c => c.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File([bytes], 'dropped.png', {type: 'image/png'}));
        document.getElementById('chat').dispatchEvent(new DragEvent('dragover', {dataTransfer: dt, bubbles: true, cancelable: true}));
        document.getElementById('chat').dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
    """, b64)
    wait_for(browser, "the dropped image's thumbnail",
             lambda d: js(d, "const i = document.querySelector('#attachments img');"
                             "return i && i.alt === 'Attached: dropped.png' && i.naturalWidth > 0;"))
    type_and_send(browser, "Dropped")
    wait_for(browser, "the answer", lambda d: assistant_parts(d) and assistant_parts(d)[0]["timings"])
    url = stub.requests[-1]["messages"][0]["content"][0]["image_url"]["url"]
    assert url == "data:image/png;base64," + b64
    assert not console_errors(browser)


def test_stop_aborts_the_stream_and_keeps_what_arrived(browser, stub):
    open_page(browser, stub.url)
    type_and_send(browser, "slow answer please")
    wait_for(browser, "the start of the answer", lambda d: assistant_parts(d) and assistant_parts(d)[0]["text"])
    assert browser.find_element("id", "send").get_attribute("disabled") is not None
    browser.find_element("id", "stop").click()
    wait_for(browser, "the stopped mark", lambda d: assistant_parts(d)[0]["timings"] == "stopped")
    kept = assistant_parts(browser)[0]["text"]
    time.sleep(0.3)   # the stub would have sent more by now had the fetch not been aborted
    assert assistant_parts(browser)[0]["text"] == kept and "and so on" * 100 not in kept
    assert browser.find_element("id", "stop").get_attribute("disabled") is not None
    assert not error_messages(browser)
    # The stopped answer stays in the conversation: the next request carries it.
    type_and_send(browser, "Next")
    wait_for(browser, "the next answer", lambda d: len(assistant_parts(d)) == 2 and assistant_parts(d)[1]["timings"])
    assert stub.requests[-1]["messages"][1] == {"role": "assistant", "content": kept}
    assert not console_errors(browser)


def test_api_key_and_http_errors(browser):
    stub = StubServer(PAGE, api_key="sekrit", chunk_delay_s=0.02).start()
    try:
        open_page(browser, stub.url, allowed=("status of 401",))   # with no key, /v1/models is refused
        wait_for(browser, "the 401 of /v1/models", lambda d: "HTTP 401" in d.find_element("id", "model").text)
        type_and_send(browser, "no key yet")
        errs = wait_for(browser, "the error message", error_messages)
        assert "HTTP 401" in errs[0] and "Invalid API key" in errs[0], errs
        assert not assistant_parts(browser)
        # The failed turn comes back to the input to retry, and left the history.
        assert browser.find_element("id", "prompt").get_attribute("value") == "no key yet"
        assert stub.requests == []

        browser.find_element("id", "api-key").send_keys("sekrit")
        browser.find_element("id", "prompt").clear()
        type_and_send(browser, "with the key")
        wait_for(browser, "the answer", lambda d: assistant_parts(d) and assistant_parts(d)[0]["timings"])
        assert stub.requests[-1]["messages"] == [{"role": "user", "content": "with the key"}]

        # The key is kept in localStorage across a reload.
        browser.refresh()
        wait_for(browser, "the model name", lambda d: d.find_element("id", "model").text == "qhexrt-stub")
        assert browser.find_element("id", "api-key").get_attribute("value") == "sekrit"
        # The browser itself logs a failed resource load as SEVERE: the 401s here are expected.
        errors = console_errors(browser, allowed=("status of 401",))
        assert not errors, f"console errors: {errors}"
    finally:
        stub.stop()


def test_page_is_self_contained():
    """Nothing is fetched from elsewhere: the page must work with no network."""
    html = PAGE.read_text()
    for needle in ("http://", "https://", "//cdn", "@import", "<script src", "<link rel=\"stylesheet\""):
        assert needle not in html, f"{PAGE} refers to {needle!r}"
    # The parts the server depends on.
    for needle in ("v1/chat/completions", "stream_options", "AbortController", "readAsDataURL", "getReader"):
        assert needle in html, needle
