"""Issue 26 item 6: network.maskRequestHost (spec §11.1) rewrites the Host
header of inbound requests, "${PORT}" standing for the port; it is kept
across pause, resume and fork, and validated as E2B does (it answered 501)."""

import time

import pytest

import e2b
from conftest import sandbox_get

PORT = 8123
ECHO_HOST = (
    "import http.server\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        b = (self.headers.get('Host') or '').encode()\n"
    "        self.send_response(200); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)\n"
    "    def log_message(self, *a): pass\n"
    f"http.server.ThreadingHTTPServer(('0.0.0.0', {PORT}), H).serve_forever()\n"
)


def serve(sbx):
    sbx.files.write("/tmp/echo_host.py", ECHO_HOST)
    sbx.commands.run("python3 /tmp/echo_host.py", background=True)
    for _ in range(100):
        r = sbx.commands.run(f"python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{PORT}/').status)\" 2>/dev/null || true")
        if r.stdout.strip() == "200":
            return
        time.sleep(0.3)
    raise AssertionError("the echo server did not start")


def seen_host(sbx):
    r = sandbox_get(sbx, PORT)
    assert r.status_code == 200, r.text
    return r.text


def test_mask_request_host_with_port():
    sbx = e2b.Sandbox.create(timeout=600, network={"mask_request_host": "custom-host.example.com:${PORT}"})
    try:
        serve(sbx)
        assert seen_host(sbx) == f"custom-host.example.com:{PORT}"
        # Kept across pause and resume (connect resumes a paused sandbox).
        sbx.pause()
        sbx = e2b.Sandbox.connect(sbx.sandbox_id, timeout=600)
        assert seen_host(sbx) == f"custom-host.example.com:{PORT}"
        # ... and by a fork's children (the server is forked with them).
        kids = sbx.fork(count=1)
        assert len(kids) == 1 and not isinstance(kids[0], Exception), kids
        try:
            assert seen_host(kids[0]) == f"custom-host.example.com:{PORT}"
        finally:
            kids[0].kill()
    finally:
        sbx.kill()


def test_mask_request_host_without_port_and_unmasked(sandbox):
    masked = e2b.Sandbox.create(timeout=600, network={"mask_request_host": "plain.example.com"})
    try:
        serve(masked)
        assert seen_host(masked) == "plain.example.com"
    finally:
        masked.kill()
    # Without the setting the sandbox does not see a masked host.
    serve(sandbox)
    assert "example.com" not in seen_host(sandbox)


@pytest.mark.parametrize("mask", ["${PORT}-sandbox.example.com", "bücher.example.com", "under_score.example.com"])
def test_mask_request_host_refused_as_e2b_does(mask):
    with pytest.raises(e2b.SandboxException) as exc:
        e2b.Sandbox.create(timeout=60, network={"mask_request_host": mask})
    assert "mask request host" in str(exc.value)
