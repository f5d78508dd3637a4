"""Run inside the sandbox: COUNT JSON POSTs to https://HOST/PATH at once, through the step's
proxy (`HTTPS_PROXY`), each sending all but the last 2 bytes of its body and then waiting.

argv: HOST PATH COUNT BYTES. Once the proxy has taken every connection's BYTES (nothing left in
any socket's send queue), or after 10 s when some stay unread, writes `sent`;
then waits for a file `go` (60 s at most), sends each body's end, and prints each answer's
status line (`status 200`)."""
import array
import fcntl
import http.client
import os
import ssl
import sys
import termios
import threading
import time
import urllib.parse

host, path, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
ctx = ssl.create_default_context()
head = b'{"pad":"'
body = head + b"A" * (size - len(head))
go = threading.Event()
sent = []
socks = []
lock = threading.Lock()
statuses = []


def one():
    conn = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=ctx, timeout=120)
    conn.set_tunnel(host, 443)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body) + 2))
        conn.endheaders()
        conn.send(body)
        with lock:
            sent.append(1)
            socks.append(conn.sock)
        go.wait(90)
        conn.send(b'"}')
        status = conn.getresponse().status
    except Exception as e:  # noqa: BLE001 - said, not raised: the test reads the count
        status = f"error {e!r}"
    with lock:
        statuses.append(status)


threads = [threading.Thread(target=one) for _ in range(count)]
for t in threads:
    t.start()


def unsent(sock):
    """What the socket's peer (the proxy) has not taken yet."""
    out = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, out)
    return out[0]


deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    with lock:
        if len(sent) == count and all(unsent(s) == 0 for s in socks):
            break
    time.sleep(0.02)
open("sent", "w").close()
deadline = time.monotonic() + 60
while not os.path.exists("go") and time.monotonic() < deadline:
    time.sleep(0.02)
go.set()
for t in threads:
    t.join(150)
for s in statuses:
    print(f"status {s}")
