"""Runs llama-mtmd-cli and measures its time to first token, which it does not print.

    mtmd_ttft.py LLAMA_MTMD_CLI [its arguments...]

Copies the CLI's output (stdout and stderr) through, and appends two lines:
    mtmd_load: <ms> ms
the time from starting the CLI to the log line that ends model loading ("main:
loading model:" is the last line before the prompt is processed): llama.cpp's load
of the text model and the mmproj as a user meets it (its default warm-up run
included), beside qhx_bench's load_ms;
    mtmd_ttft: <ms> ms
the time from that line to the first generated character: llama.cpp's TTFT for
the prompt and image, load excluded (as qhx_bench's ttft_ms).
"""
import subprocess
import sys
import time


def main() -> int:
    cmd = sys.argv[1:]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0)
    out = bytearray()
    loaded = first = None
    line_start = 0
    assert proc.stdout is not None
    while True:
        ch = proc.stdout.read(1)
        if not ch:
            break
        now = time.monotonic()
        out += ch
        sys.stdout.buffer.write(ch)
        if ch == b"\n":
            line = bytes(out[line_start:])
            line_start = len(out)
            if loaded is None and b"loading model:" in line:
                loaded = now
        elif loaded is not None and first is None and ch.isalpha():
            # After loading, log lines start with a timestamp (digits); a letter on a line
            # that does not is generated text.
            if not bytes(out[line_start:]).lstrip()[:1].isdigit():
                first = now
    code = proc.wait()
    if loaded is not None:
        print(f"\nmtmd_load: {1000.0 * (loaded - started):.1f} ms")
    if loaded is not None and first is not None:
        print(f"\nmtmd_ttft: {1000.0 * (first - loaded):.1f} ms")
    return code


if __name__ == "__main__":
    sys.exit(main())
