"""A plain HTTP server on loopback for envgit's tests: answers every request with 200 and a
body naming method, path, Host and X-Forwarded-Proto. Prints its port, serves until killed."""
import http.server


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        text = "seen %s %s host=%s proto=%s body=%d\n" % (
            self.command, self.path, self.headers.get("Host"),
            self.headers.get("X-Forwarded-Proto"), len(body))
        out = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json" if "graphql" in self.path else "text/plain")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = answer
    # WebDAV, as a dumb-HTTP git remote (Apache mod_dav) serves it
    do_LOCK = do_UNLOCK = do_MKCOL = do_MOVE = do_COPY = do_PROPFIND = answer

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
