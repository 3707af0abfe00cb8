# A minimal RFC 6455 client for the egress tests (the base template has
# python3, no WebSocket tool): python3 ws.py HOST N verify|insecure [B64].
# It upgrades https://HOST/ws (verifying against the system bundle, which
# holds the node's CA, unless "insecure"), prints the server's first frame,
# sends N text frames and prints each echo. With B64 it then writes those
# bytes into the tunnel and prints what comes back ("after ..."); without,
# it sends a close frame.
import base64, os, socket, ssl, struct, sys
host, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ctx = ssl.create_default_context() if mode == "verify" else ssl._create_unverified_context()
s = ctx.wrap_socket(socket.create_connection((host, 443), timeout=60), server_hostname=host)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall(("GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (host, key)).encode())
f = s.makefile("rb")
print("status", f.readline().decode().strip())
while f.readline() not in (b"\r\n", b""):
    pass
def frame():
    b0, b1 = f.read(2)
    m = b1 & 0x7f
    if m == 126: m = struct.unpack(">H", f.read(2))[0]
    elif m == 127: m = struct.unpack(">Q", f.read(8))[0]
    return f.read(m).decode()
print("recv", frame())
for i in range(n):
    d = ("frame-%d" % i).encode()
    mask = os.urandom(4)
    s.sendall(bytes([0x81, 0x80 | len(d)]) + mask + bytes(b ^ mask[j % 4] for j, b in enumerate(d)))
    print("recv", frame())
if len(sys.argv) > 4:
    s.sendall(base64.b64decode(sys.argv[4]))
    s.settimeout(5)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b: break
            out += b
    except Exception as e:
        pass
    print("after", out.decode("latin-1"))
else:
    s.sendall(bytes([0x88, 0x80]) + os.urandom(4))
