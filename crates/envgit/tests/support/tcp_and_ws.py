"""A loopback server for the gate's protocol tests. argv[1] = `echo` or `ws`.

echo: a raw TCP server that answers each line with `echo: <line>` (not HTTP at all).
ws:   an HTTP/1.1 server that upgrades `Upgrade: websocket` requests (RFC 6455 handshake)
      and then echoes raw bytes back, prefixed with `ws:`; plain requests get 200.
      With TCP_WS_LOG set, appends each request's first line to that file, after `upgrade `
      when it asks for a WebSocket: what reached the server, for a test to read.
Prints its port, serves until killed."""
import os
import base64
import hashlib
import socketserver
import sys

MODE = sys.argv[1]
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        if MODE == "echo":
            for line in self.rfile:
                self.wfile.write(b"echo: " + line)
                self.wfile.flush()
            return
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            c = self.rfile.read(1)
            if not c:
                return
            head += c
        headers = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        upgrade = headers.get("upgrade", "").lower() == "websocket"
        if os.environ.get("TCP_WS_LOG"):
            with open(os.environ["TCP_WS_LOG"], "a") as log:
                first = head.decode("latin-1").split("\r\n")[0]
                log.write(("upgrade " if upgrade else "") + first + "\n")
        if not upgrade:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
            return
        accept = base64.b64encode(
            hashlib.sha1((headers["sec-websocket-key"] + GUID).encode()).digest()).decode()
        self.wfile.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                          "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % accept).encode())
        self.wfile.flush()
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            self.wfile.write(b"ws:" + data)
            self.wfile.flush()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
