"""Issue 26 item 1: files.read of a file of unknown length (/proc, /sys, a
pipe) streams. httpx asks for gzip by default, and Airlock's gzip path used to
seek: 500 "seeker can't seek"."""

import gzip
import time

import httpx
import pytest


@pytest.mark.parametrize("path", ["/proc/self/status", "/proc/cpuinfo", "/proc/meminfo", "/proc/sys/kernel/ostype"])
def test_read_proc_file(sandbox, path):
    text = sandbox.files.read(path)
    assert text, f"{path} read empty"
    # The same content as a process in the sandbox sees (modulo what changes
    # between reads: the first line is stable for these).
    first = sandbox.commands.run(f"head -n 1 {path}").stdout.strip()
    if path != "/proc/self/status":
        assert text.splitlines()[0].strip() == first
    else:
        assert text.startswith("Name:")


def test_read_proc_file_as_bytes_and_stream(sandbox):
    data = sandbox.files.read("/proc/version", format="bytes")
    assert bytes(data).startswith(b"Linux version")
    chunks = b"".join(sandbox.files.read("/proc/version", format="stream"))
    assert chunks.startswith(b"Linux version")


def test_read_pipe(sandbox):
    sandbox.commands.run("mkfifo /tmp/pipe")
    sandbox.commands.run("echo through-the-pipe > /tmp/pipe", background=True)
    # The writer blocks in open() until a reader comes.
    time.sleep(1)
    assert sandbox.files.read("/tmp/pipe") == "through-the-pipe\n"


@pytest.mark.parametrize("encoding", ["gzip", "identity"])
@pytest.mark.parametrize("rng", [None, "bytes=0-3"])
def test_read_unknown_length_with_range_and_encoding(sandbox, encoding, rng):
    """Any Accept-Encoding, with or without Range: 200 with the whole file
    (a Range on a file of unknown length is ignored, as RFC 9110 allows);
    a Range is answered in identity encoding, as E2B's agent does."""
    url = sandbox.download_url("/proc/sys/kernel/ostype")
    headers = {"Accept-Encoding": encoding}
    if rng:
        headers["Range"] = rng
    with httpx.Client(timeout=30) as c:
        r = c.get(url, headers=headers)
    assert r.status_code == 200, r.text
    body = r.content  # httpx decodes a gzip body
    assert body.strip() == b"Linux"
    if rng:
        assert r.headers.get("content-encoding") is None
    elif encoding == "gzip":
        assert r.headers.get("content-encoding") == "gzip"


def test_regular_file_range_still_partial(sandbox):
    sandbox.files.write("/tmp/digits.txt", "0123456789")
    url = sandbox.download_url("/tmp/digits.txt")
    for enc in ("gzip", "identity"):
        r = httpx.get(url, headers={"Range": "bytes=2-4", "Accept-Encoding": enc}, timeout=30)
        assert r.status_code == 206 and r.content == b"234", (enc, r.status_code, r.content)
    r = httpx.get(url, headers={"Accept-Encoding": "gzip"}, timeout=30)
    assert r.status_code == 200 and r.headers.get("content-encoding") == "gzip" and r.content == b"0123456789"
    assert gzip  # (httpx decoded it)
