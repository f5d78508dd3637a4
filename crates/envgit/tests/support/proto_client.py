"""Run inside the sandbox. argv: MODE PORT. Prints `started`, then what it got.

echo: sends a line of raw bytes and prints the answer.
ws:   sends a WebSocket upgrade request, prints the status line, then (after a 101) sends
      bytes on the upgraded connection and prints the answer."""
import socket
import sys

mode, port = sys.argv[1], int(sys.argv[2])
print("started", flush=True)
s = socket.create_connection(("127.0.0.1", port), timeout=20)


def read_some():
    try:
        return s.recv(65536).decode("latin-1")
    except (socket.timeout, ConnectionError) as e:
        return "error: %s" % e


if mode == "echo":
    s.sendall(b"\x00hello raw\n")
    print("got: " + read_some())
else:
    s.sendall(("GET /chat HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n" % port).encode())
    reply = b""
    while b"\r\n\r\n" not in reply:
        got = s.recv(65536)
        if not got:
            break
        reply += got
    head, _, rest = reply.partition(b"\r\n\r\n")
    print("status: " + head.decode("latin-1").split("\r\n")[0])
    print("head: " + head.decode("latin-1"))
    print("body: " + rest.decode("latin-1"))
    if b" 101 " in head:
        s.sendall(b"frame-bytes")
        print("got: " + read_some())
