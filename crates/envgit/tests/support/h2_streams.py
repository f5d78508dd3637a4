"""Run inside the sandbox: CONNS HTTP/2 connections to https://HOST through the step's proxy
(`HTTPS_PROXY`), each opening STREAMS JSON POSTs to PATH whose bodies never come, each with a
PAD-byte header. The frames are written by hand (Python has no HTTP/2 client of its own): a
client that opens many streams and sends nothing more is the point.

argv: HOST PATH CONNS STREAMS PAD. Once every stream is sent and the answers that come at once
have come (none new on a connection for 2 s), writes `sent` and prints `answered N of M`;
then waits for a file `go` (60 s at most) and closes everything."""
import os
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.parse

host, path = sys.argv[1], sys.argv[2]
conns, streams, pad = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
ctx = ssl.create_default_context()
ctx.set_alpn_protocols(["h2"])
lock = threading.Lock()
answered = set()
errors = []
socks = []


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def integer(n):
    """HPACK's integer with a 7-bit prefix (the string length's, no Huffman)."""
    if n < 127:
        return bytes([n])
    out, n = [127], n - 127
    while n >= 128:
        out.append(n % 128 + 128)
        n //= 128
    out.append(n)
    return bytes(out)


def literal(name, value):
    """A header field without indexing, its name a literal too."""
    return b"\x00" + integer(len(name)) + name + integer(len(value)) + value


def read_exact(s, n):
    out = b""
    while len(out) < n:
        got = s.recv(n - len(out))
        if not got:
            raise EOFError
        out += got
    return out


def read_answers(s, conn):
    """Acknowledges the server's settings and pings, and counts the streams it answers, until
    none came for 2 s."""
    s.settimeout(2)
    try:
        while True:
            head = read_exact(s, 9)
            length = int.from_bytes(head[:3], "big")
            kind, flags = head[3], head[4]
            stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
            payload = read_exact(s, length)
            if kind == 0x4 and not flags & 0x1:
                s.sendall(frame(0x4, 0x1, 0))
            elif kind == 0x6 and not flags & 0x1:
                s.sendall(frame(0x6, 0x1, 0, payload))
            elif kind in (0x1, 0x3) and stream:
                with lock:
                    answered.add((conn, stream))
    except (EOFError, OSError):
        return


def one(conn):
    try:
        s = socket.create_connection((proxy.hostname, proxy.port), timeout=120)
        s.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += s.recv(1)
        assert b" 200" in reply.split(b"\r\n")[0], reply
        s = ctx.wrap_socket(s, server_hostname=host)
        assert s.selected_alpn_protocol() == "h2", s.selected_alpn_protocol()
        with lock:
            socks.append(s)
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(0x4, 0, 0))
        block_end = literal(b"content-type", b"application/json") + literal(b"x-pad", b"p" * pad)
        for i in range(streams):
            block = (
                literal(b":method", b"POST")
                + literal(b":scheme", b"https")
                + literal(b":path", path.encode())
                + literal(b":authority", host.encode())
                + block_end
            )
            # END_HEADERS, never END_STREAM: the body is still to come.
            s.sendall(frame(0x1, 0x4, 2 * i + 1, block))
        read_answers(s, conn)
    except Exception as e:  # noqa: BLE001 - said, not raised: the test reads the count
        with lock:
            errors.append(repr(e))


threads = [threading.Thread(target=one, args=(c,)) for c in range(conns)]
for t in threads:
    t.start()
for t in threads:
    t.join(90)
with lock:
    print(f"answered {len(answered)} of {conns * streams}", flush=True)
    for e in errors[:5]:
        print(f"error {e}", flush=True)
open("sent", "w").close()
deadline = time.monotonic() + 60
while not os.path.exists("go") and time.monotonic() < deadline:
    time.sleep(0.02)
for s in socks:
    s.close()
