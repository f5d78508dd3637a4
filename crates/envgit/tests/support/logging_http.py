"""An HTTP/1.1 upstream on loopback for the smuggling tests, with Python's own parser
(http.server): every request it reads is appended to the JSON-lines file named by argv[1]
(method, target, Host, body) and answered 200. Prints its port, serves until killed."""
import http.server
import json
import sys

LOG = sys.argv[1]


def read_chunked(rfile):
    body = b""
    while True:
        line = rfile.readline(65537)
        size = int(line.split(b";")[0].strip(), 16)
        if size == 0:
            while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                pass
            return body
        body += rfile.read(size)
        rfile.readline(65537)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            body = read_chunked(self.rfile)
        else:
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
        with open(LOG, "a") as f:
            f.write(json.dumps({
                "server": "python",
                "method": self.command,
                "target": self.path,
                "host": self.headers.get("Host"),
                "body": body.decode("latin-1"),
            }) + "\n")
        out = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def __getattr__(self, name):
        if name.startswith("do_"):
            return self.answer
        raise AttributeError(name)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
