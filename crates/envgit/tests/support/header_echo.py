"""A plain HTTP server on loopback for envgit's tests that reflects what it received: every
request header comes back as a response header `X-Echo-NAME`, and in the body (all but the
credential headers: no proxy can take a credential back out of a body the host itself
writes); TRACE and TRACK answer with the whole request head, as TRACE does. Logs the heads it
received to argv[1]. Prints its port, serves until killed."""
import http.server, sys
log = open(sys.argv[1], "a")
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        log.write(self.requestline + "\n" + str(self.headers) + "\n")
        log.flush()
        if self.command in ("TRACE", "TRACK"):
            body = (self.requestline + "\r\n" + str(self.headers)).encode()
        else:
            body = "".join("%s: %s\n" % (k, v) for k, v in self.headers.items()
                           if k.lower() not in ("authorization", "proxy-authorization")).encode()
        self.send_response(200)
        for k, v in self.headers.items():
            self.send_header("X-Echo-" + k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_TRACE = do_TRACK = answer
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
