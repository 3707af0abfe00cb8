"""Issue 29: E2B's Python SDK (2.34.0) network behaviours against Airlock,
through the SDK's public API only: allow_internet_access, network
allow_out/deny_out (IPs, a domain, the ALL_TRAFFIC selector callable),
Sandbox.update_network replacing the policy live, allow_public_traffic and
the traffic access token, network.rules header
transforms (a static value and a ${e2b.secrets.NAME} placeholder filled in by
the node's egress proxy) and the 400s for bad rules as the SDK raises them.

The SDK 2.34.0 has no Secrets API (no e2b.Secret) and no network.egress_proxy
field, so the secret is made by REST in a fixture (POST /secrets) and
egressProxy is not tested here (test/gohttp/egress_proxy_test.go and the JS
suites cover it).

The stand-in internet is a network namespace on <ext>.8/29 (the test daemon
resolves names through <ext>.12 and opens <ext>.0/27 with --deny-out-except,
scripts/test.sh), the same /29 the Go and JS egress tests use one after the
other: A (.10), B (.11) and C (.13) answer their letter over HTTP on 8080; A
also serves HTTPS on 443 with the upstream CA's leaf for secrets-a.test
(AIRLOCK_E2E_UPSTREAM_CA_DIR, which the daemon trusts with
--egress-proxy-upstream-ca) and records each request's headers in a file on
the host; the DNS server on .12 answers allowed.test -> B, denied.test -> C,
secrets-a.test -> A. Only sandboxes with domain rules resolve through the
daemon (and so through .12); the others use the host's nameservers, so names
of the stand-in are used only with domain rules here.
"""

import json
import os
import secrets as pysecrets
import subprocess
import time

import httpx
import pytest

import e2b
from conftest import sandbox_get
from e2b.sandbox.commands.command_handle import CommandExitException

EXT = os.environ.get("AIRLOCK_E2E_EXT_NET", "10.78.255")
HOST_IP, IP_A, IP_B, IP_DNS, IP_C = (f"{EXT}.{n}" for n in (9, 10, 11, 12, 13))
RULED = "secrets-a.test"

STANDIN = r"""
import http.server, json, socket, socketserver, ssl, sys, threading
a, b, c, dns_ip, ca_dir, log_path = sys.argv[1:7]
names = {"allowed.test": b, "denied.test": c, "secrets-a.test": a}

class Server(http.server.ThreadingHTTPServer):
    # HTTPServer.server_bind looks its address up in DNS (getfqdn), which
    # in this namespace waits for a resolver that is not there.
    def server_bind(self):
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "standin", self.server_address[1]

def letter(name):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = name.encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args): pass
    return H

class Echo(http.server.BaseHTTPRequestHandler):
    # Records every request (host, path, all headers) in the log file on the
    # host and answers with its X- headers only, so a secret in another
    # header never travels back into the sandbox.
    def do_GET(self):
        hdrs = {k: v for k, v in self.headers.items()}
        with open(log_path, "a") as f:
            f.write(json.dumps({"host": self.headers.get("Host"), "path": self.path, "headers": hdrs}) + "\n")
        body = json.dumps({"headers": {k: v for k, v in hdrs.items() if k.lower().startswith("x-")}}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args): pass

def serve(srv):
    threading.Thread(target=srv.serve_forever, daemon=True).start()

for ip, name in ((a, "A"), (b, "B"), (c, "C")):
    serve(Server((ip, 8080), letter(name)))
tls = Server((a, 443), Echo)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(ca_dir + "/leaf.pem", ca_dir + "/leaf.key")
tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
serve(tls)

# A minimal authoritative DNS server: A records for names, NXDOMAIN otherwise.
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind((dns_ip, 53))
while True:
    q, peer = udp.recvfrom(512)
    if len(q) < 12:
        continue
    off, labels = 12, []
    while off < len(q) and q[off] != 0:
        labels.append(q[off + 1:off + 1 + q[off]].decode(errors="replace"))
        off += q[off] + 1
    end = off + 5
    if end > len(q):
        continue
    qtype = int.from_bytes(q[off + 1:off + 3], "big")
    ip = names.get(".".join(labels).lower())
    answer = ip is not None and qtype == 1
    head = q[:2] + (0x8180 | (0 if ip else 3)).to_bytes(2, "big") + b"\x00\x01" + (b"\x00\x01" if answer else b"\x00\x00") + b"\x00\x00\x00\x00"
    rr = b""
    if answer:
        rr = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + bytes(int(x) for x in ip.split("."))
    udp.sendto(head + q[12:end] + rr, peer)
"""


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    ca_dir = os.environ.get("AIRLOCK_E2E_UPSTREAM_CA_DIR")
    if not ca_dir:
        raise pytest.UsageError("AIRLOCK_E2E_UPSTREAM_CA_DIR not set: run through scripts/test.sh (stage python)")
    tag = pysecrets.token_hex(3)
    ns, host_if, ns_if = f"e2e-py-{tag}", f"e2pa{tag}", f"e2pb{tag}"
    log_path = tmp_path_factory.mktemp("standin") / "requests.jsonl"
    log_path.write_text("")
    proc = None
    try:
        ip("netns", "add", ns)
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", ns)
        ip("addr", "add", f"{HOST_IP}/29", "dev", host_if)
        ip("link", "set", host_if, "up")
        for a in (IP_A, IP_B, IP_DNS, IP_C):
            ip("-n", ns, "addr", "add", f"{a}/29", "dev", ns_if)
        ip("-n", ns, "link", "set", ns_if, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", ns, "route", "add", "default", "via", HOST_IP)
        errors = open(log_path.with_name("standin.err"), "w+")
        proc = subprocess.Popen(["ip", "netns", "exec", ns, "/usr/bin/python3", "-c", STANDIN, IP_A, IP_B, IP_C, IP_DNS, ca_dir, str(log_path)],
                                stdin=subprocess.DEVNULL, stdout=errors, stderr=errors)
        deadline = time.monotonic() + 30
        while True:
            try:
                if all(httpx.get(f"http://{a}:8080/", timeout=2, trust_env=False).text == n for a, n in ((IP_A, "A"), (IP_B, "B"), (IP_C, "C"))):
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                errors.seek(0)
                raise AssertionError(f"the stand-in servers did not start (exit {proc.poll()}): {errors.read()}")
            time.sleep(0.3)
        yield log_path
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def requests_seen(log_path):
    return [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]


def curl(sbx, url, secs=5, user=None):
    """The body curl gets from inside the sandbox, or None when it fails."""
    try:
        r = sbx.commands.run(f"curl -sS --connect-timeout {secs} -m {secs} {url}", timeout=secs + 120, user=user)
    except CommandExitException as e:
        assert e.exit_code != 0
        return None
    return r.stdout


def create(**kw):
    return e2b.Sandbox.create(timeout=600, **kw)


@pytest.fixture
def made():
    """Sandboxes a test creates, killed at its end."""
    out = []
    yield out
    for s in out:
        try:
            s.kill()
        except Exception:  # noqa: BLE001 - cleanup is best effort
            pass


@pytest.fixture
def secret(api):
    """A secret made by REST (the SDK 2.34.0 has no Secrets API): (name, value)."""
    name = f"py-net-{pysecrets.token_hex(4)}"
    value = f"airlock-py-{pysecrets.token_hex(8)}-SECRETVALUE"
    r = api.post("/secrets", json={"name": name, "value": value})
    assert r.status_code == 201, r.text
    assert value not in r.text
    try:
        yield name, value
    finally:
        api.delete(f"/secrets/{name}")


# -------------------------------------------------------------- allow/deny


def test_allow_internet_access_false_and_true(standin, made):
    closed = create(allow_internet_access=False)
    made.append(closed)
    assert curl(closed, f"http://{IP_A}:8080/") is None
    opened = create(allow_internet_access=True)
    made.append(opened)
    assert curl(opened, f"http://{IP_A}:8080/") == "A"


def test_deny_all_allow_an_ip_and_a_domain(standin, made):
    sbx = create(network={"deny_out": lambda ctx: [ctx.all_traffic], "allow_out": [IP_A, "allowed.test"]})
    made.append(sbx)
    assert curl(sbx, f"http://{IP_A}:8080/") == "A"
    assert curl(sbx, "http://allowed.test:8080/") == "B"
    assert curl(sbx, "http://denied.test:8080/") is None
    assert curl(sbx, f"http://{IP_C}:8080/") is None
    info = sbx.get_info().network
    assert info is not None
    assert info["allow_out"] == [IP_A, "allowed.test"]
    assert info["deny_out"] == ["0.0.0.0/0"]


def test_deny_an_ip_and_allow_beats_deny(standin, made):
    deny_b = create(network={"deny_out": [IP_B]})
    made.append(deny_b)
    assert curl(deny_b, f"http://{IP_B}:8080/") is None
    assert curl(deny_b, f"http://{IP_A}:8080/") == "A"
    both = create(network={"deny_out": lambda ctx: [ctx.all_traffic], "allow_out": [IP_A, IP_B]})
    made.append(both)
    assert curl(both, f"http://{IP_A}:8080/") == "A"
    assert curl(both, f"http://{IP_B}:8080/") == "B"
    assert curl(both, f"http://{IP_C}:8080/") is None


def test_update_network_replaces_the_policy_live(standin, made):
    sbx = create()
    made.append(sbx)
    assert curl(sbx, f"http://{IP_B}:8080/") == "B"
    sbx.update_network({"deny_out": [IP_B]})
    assert curl(sbx, f"http://{IP_B}:8080/") is None
    assert curl(sbx, f"http://{IP_A}:8080/") == "A"
    # A whole new policy: the earlier deny of B is gone with it.
    sbx.update_network({"deny_out": lambda ctx: [ctx.all_traffic], "allow_out": [IP_B, "allowed.test"]})
    assert curl(sbx, f"http://{IP_B}:8080/") == "B"
    assert curl(sbx, f"http://{IP_A}:8080/") is None
    info = sbx.get_info().network
    assert info["allow_out"] == [IP_B, "allowed.test"] and info["deny_out"] == ["0.0.0.0/0"]
    # An empty update clears every field: all open again.
    sbx.update_network({})
    assert curl(sbx, f"http://{IP_A}:8080/") == "A"
    assert curl(sbx, f"http://{IP_C}:8080/") == "C"
    # allow_internet_access=False through the update, then back.
    sbx.update_network({"allow_internet_access": False})
    assert curl(sbx, f"http://{IP_A}:8080/") is None
    e2b.Sandbox.update_network(sbx.sandbox_id, {"allow_internet_access": True})
    assert curl(sbx, f"http://{IP_A}:8080/") == "A"


def test_allow_public_traffic_false_needs_the_traffic_token(made):
    port = 8124
    closed = create(secure=True, network={"allow_public_traffic": False})
    made.append(closed)
    assert closed.traffic_access_token
    opened = create(network={"allow_public_traffic": True})
    made.append(opened)
    assert opened.traffic_access_token is None
    for sbx in (closed, opened):
        sbx.commands.run(f"python3 -m http.server {port}", background=True)
    deadline = time.monotonic() + 60
    while sandbox_get(opened, port).status_code != 200:
        assert time.monotonic() < deadline, "the server in the open sandbox did not answer"
        time.sleep(0.5)
    assert sandbox_get(closed, port).status_code == 403
    assert sandbox_get(closed, port, headers={"e2b-traffic-access-token": "wrong"}).status_code == 403
    deadline = time.monotonic() + 60
    while (r := sandbox_get(closed, port, headers={"e2b-traffic-access-token": closed.traffic_access_token})).status_code != 200:
        assert time.monotonic() < deadline, f"with the token: {r.status_code} {r.text}"
        time.sleep(0.5)
    assert closed.get_info().network["allow_public_traffic"] is False
    assert opened.get_info().network["allow_public_traffic"] is True


# -------------------------------------------------------------- rules


def test_rules_inject_a_static_header(standin, made):
    rules = {RULED: [{"transform": {"headers": {"X-Test-Token": "airlock-transform-value-123"}}}]}
    sbx = create(network={"rules": rules})
    made.append(sbx)
    out = curl(sbx, f"https://{RULED}/headers", secs=20)
    assert out is not None, "the ruled HTTPS request failed"
    assert json.loads(out)["headers"].get("X-Test-Token") == "airlock-transform-value-123", out
    assert sbx.get_info().network["rules"] == rules


def test_rules_fill_a_secret_the_sandbox_never_holds(standin, made, secret):
    name, value = secret
    rule = {RULED: [{"transform": {"headers": {"Authorization": "Bearer ${e2b.secrets." + name + "}", "X-Ruled": "yes"}}}]}
    sbx = create(network={"rules": rule})
    made.append(sbx)
    n = len(requests_seen(standin))
    out = curl(sbx, f"https://{RULED}/headers", secs=20, user="user")
    assert out is not None and json.loads(out)["headers"].get("X-Ruled") == "yes", out
    got = requests_seen(standin)[n:]
    assert len(got) == 1 and got[0]["headers"].get("Authorization") == f"Bearer {value}", got
    # The info shows the placeholder, never the value.
    info = sbx.get_info().network
    assert info["rules"] == rule and value not in json.dumps(info)

    # Not in any process's environment or command line, nor in a file.
    dump = sbx.commands.run("env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' <$f; done 2>/dev/null; true", user="root", timeout=120)
    assert "PATH=" in dump.stdout and value not in dump.stdout
    half = len(value) // 2
    grep = sbx.commands.run(
        f"p1='{value[:half]}'; p2='{value[half:]}'; grep -rlaF -- \"$p1$p2\" /home /tmp /etc /root /usr/local/share 2>/dev/null; true",
        user="root", timeout=300)
    assert grep.stdout.strip() == ""

    # update_network replaces the rules live: without them nothing is injected
    # (nor intercepted, so the upstream's own certificate: -k; and no domain
    # rules, so the name is not resolved through the stand-in: --resolve).
    sbx.update_network({})
    n = len(requests_seen(standin))
    out = curl(sbx, f"-k --resolve {RULED}:443:{IP_A} https://{RULED}/headers", secs=20)
    assert out is not None and "X-Ruled" not in json.loads(out)["headers"], out
    got = requests_seen(standin)[n:]
    assert len(got) == 1 and "Authorization" not in got[0]["headers"], got
    # ... and back on through the update.
    sbx.update_network({"rules": rule})
    n = len(requests_seen(standin))
    assert curl(sbx, f"https://{RULED}/headers", secs=20) is not None
    got = requests_seen(standin)[n:]
    assert len(got) == 1 and got[0]["headers"].get("Authorization") == f"Bearer {value}", got


BAD_RULES = [
    pytest.param({RULED: [{"transform": {"headers": {"Authorization": "Bearer ${e2b.secrets.py-no-such-secret}"}}}]},
                 "Network transform rules reference unknown secrets: py-no-such-secret", id="unknown-secret"),
    pytest.param({"*.example.com": [{"transform": {"headers": {"X-A": "b"}}}]},
                 'Network transform rule domain "*.example.com" is not a valid domain name', id="wildcard-domain"),
    pytest.param({RULED: [{"transform": {"headers": {f"X-H{i}": "v" for i in range(21)}}}]},
                 f'Network transform rule for "{RULED}" sets 21 headers; at most 20.', id="too-many-headers"),
    pytest.param({RULED: [{"transform": {"headers": {"Authorization": "Bearer ${e2b.secrets.}"}}}]},
                 "Network transform header contains a malformed E2B placeholder.", id="malformed-placeholder"),
]


@pytest.mark.parametrize("rules,message", BAD_RULES)
def test_bad_rules_refused_at_create(rules, message):
    with pytest.raises(e2b.SandboxException) as exc:
        e2b.Sandbox.create(timeout=60, network={"rules": rules})
    # A plain SandboxException (not a subclass such as NotFound), "400: <message>".
    assert type(exc.value) is e2b.SandboxException
    assert str(exc.value).startswith("400: ") and message in str(exc.value), str(exc.value)


def test_bad_rules_refused_by_update_network(sandbox):
    for p in BAD_RULES:
        rules, message = p.values
        with pytest.raises(e2b.SandboxException) as exc:
            sandbox.update_network({"rules": rules})
        assert type(exc.value) is e2b.SandboxException
        assert str(exc.value).startswith("400: ") and message in str(exc.value), (p.id, str(exc.value))


# -------------------------------------------------------------- async client


async def test_async_client_policy_update_and_rules(standin):
    """The same calls through e2b.AsyncSandbox: create with a whitelist and a
    rule, update_network live (instance and class method), get_info."""
    rules = {RULED: [{"transform": {"headers": {"X-Test-Token": "async-value"}}}]}
    sbx = await e2b.AsyncSandbox.create(timeout=600, network={"deny_out": lambda ctx: [ctx.all_traffic], "allow_out": [IP_A], "rules": rules})
    try:
        async def acurl(url, secs=5):
            try:
                r = await sbx.commands.run(f"curl -sS --connect-timeout {secs} -m {secs} {url}", timeout=secs + 120)
            except CommandExitException:
                return None
            return r.stdout

        assert await acurl(f"http://{IP_A}:8080/") == "A"
        assert await acurl(f"http://{IP_B}:8080/") is None
        out = await acurl(f"https://{RULED}/headers", secs=20)
        assert out is not None and json.loads(out)["headers"].get("X-Test-Token") == "async-value", out
        info = (await sbx.get_info()).network
        assert info["rules"] == rules and info["allow_out"] == [IP_A]
        await sbx.update_network({"deny_out": [IP_A]})
        assert await acurl(f"http://{IP_A}:8080/") is None
        assert await acurl(f"http://{IP_B}:8080/") == "B"
        await e2b.AsyncSandbox.update_network(sbx.sandbox_id, {})
        assert await acurl(f"http://{IP_A}:8080/") == "A"
        assert "rules" not in ((await sbx.get_info()).network or {})
    finally:
        await sbx.kill()
