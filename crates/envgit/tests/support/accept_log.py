"""Listens on every ADDR:PORT given (PORT 0: any free one) and logs each connection accepted
to LOG (`accept ADDR:PORT`, one line each, flushed), then appends whatever the client sends
in its first 2 s to LOG.bytes, and closes it: a test's proof that something did, or did not,
connect, and of what reached the other end. Writes READY once every socket listens, one
`ADDR:PORT` line per socket as bound. Bounded: exits after 60 s.
Usage: accept_log.py LOG READY ADDR:PORT..."""
import os
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
    socks[s] = "%s:%d" % (addr, s.getsockname()[1])
tmp = ready_path + ".tmp"
with open(tmp, "w") as ready:
    ready.write("".join(spec + "\n" for spec in socks.values()))
os.rename(tmp, ready_path)
deadline = time.time() + 60
with open(log_path, "a") as log, open(log_path + ".bytes", "ab") as seen:
    while time.time() < deadline:
        ready, _, _ = select.select(list(socks), [], [], 1)
        for s in ready:
            conn, _ = s.accept()
            log.write("accept %s\n" % socks[s])
            log.flush()
            conn.settimeout(2)
            try:
                while True:
                    data = conn.recv(65536)
                    if not data:
                        break
                    seen.write(data)
                    seen.flush()
            except OSError:
                pass
            conn.close()
