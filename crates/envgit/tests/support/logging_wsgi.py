"""A WSGI upstream on loopback for the differential suite, served by gunicorn (its own HTTP/1
parser, gthread workers with keep-alive): every request it reads is appended to the JSON-lines
file named by argv[1] (method, raw target, the PATH_INFO it routes on, Host, body as
gunicorn decoded it) and answered 200.
Prints its port, serves until killed. gunicorn comes from scripts/install-deps-diff
(PYTHONPATH)."""
import json
import sys

from gunicorn.app.base import BaseApplication

LOG = sys.argv[1]


def app(environ, start_response):
    body = environ["wsgi.input"].read()
    with open(LOG, "a") as f:
        f.write(json.dumps({
            "server": "gunicorn",
            "method": environ["REQUEST_METHOD"],
            "target": environ.get("RAW_URI", ""),
            "path": environ.get("PATH_INFO", ""),
            "host": environ.get("HTTP_HOST"),
            "body": body.decode("latin-1"),
        }) + "\n")
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "3")])
    return [b"ok\n"]


def ready(arbiter):
    print(arbiter.LISTENERS[0].sock.getsockname()[1], flush=True)


class Server(BaseApplication):
    def load_config(self):
        for k, v in {
            "bind": "127.0.0.1:0",
            "workers": 1,
            "worker_class": "gthread",
            "threads": 4,
            "keepalive": 5,
            "timeout": 120,
            "when_ready": ready,
            "loglevel": "critical",
        }.items():
            self.cfg.set(k, v)

    def load(self):
        return app


Server().run()
