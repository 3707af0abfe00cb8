# A raw TLS client for the egress tests: python3 rawtls.py HOST B64 ALPN [IDLE].
# It opens TLS to HOST:443 (verified against the system bundle), offering
# the ALPN protocols of ALPN (comma separated, or "-"), writes the base64
# payload B64, and prints the protocol chosen and everything read until the
# server closes or is idle for IDLE seconds (default 5: a kept-alive
# connection). A failed handshake prints why and exits 3.
import base64, socket, ssl, sys
host, payload, alpn = sys.argv[1], base64.b64decode(sys.argv[2]), sys.argv[3]
idle = float(sys.argv[4]) if len(sys.argv) > 4 else 5
ctx = ssl.create_default_context()
if alpn != "-": ctx.set_alpn_protocols(alpn.split(","))
try:
    s = ctx.wrap_socket(socket.create_connection((host, 443), timeout=60), server_hostname=host)
except Exception as e:
    print("handshake failed:", e); sys.exit(3)
print("alpn", s.selected_alpn_protocol())
s.settimeout(idle)
s.sendall(payload)
out = b""
try:
    while True:
        b = s.recv(65536)
        if not b: break
        out += b
except Exception as e:
    out += ("\n[read ended: %s]" % e).encode()
sys.stdout.write(out.decode("latin-1"))
