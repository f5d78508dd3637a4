"""Listens on every ADDR:PORT given and logs each connection accepted to LOG (`accept
ADDR:PORT`, one line each, flushed), closing it at once: a test's proof that something did, or
did not, connect. Creates READY once every socket listens. Bounded: exits after 60 s.
Usage: accept_log.py LOG READY ADDR:PORT..."""
import select
import socket
import sys
import time

log_path, ready_path = sys.argv[1], sys.argv[2]
socks = {}
for spec in sys.argv[3:]:
    addr, port = spec.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(port)))
    s.listen(16)
    socks[s] = spec
open(ready_path, "w").close()
deadline = time.time() + 60
with open(log_path, "a") as log:
    while time.time() < deadline:
        ready, _, _ = select.select(list(socks), [], [], 1)
        for s in ready:
            conn, _ = s.accept()
            log.write("accept %s\n" % socks[s])
            log.flush()
            conn.close()
