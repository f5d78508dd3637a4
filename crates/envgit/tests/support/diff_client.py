"""Sends a batch of raw HTTP/1 cases to servers on 127.0.0.1 and prints what came back, as
JSON. Used by the differential suite both from inside `envgit run` (through the gate) and
directly from the test process.

argv: CASES_JSON. The file holds a list of {"port", "segments": [[HEX, WAIT], ...]}: each
segment's bytes are sent, then, when WAIT > 0, the client waits (at most 10 s) until the reply
holds WAIT status lines before sending the next one. After the last segment the client
half-closes and reads until the peer closes (at most 20 s). Cases to different ports run in
parallel, cases to one port one after the other. Prints a JSON list of replies (latin-1
text), in the order of the cases."""
import json
import socket
import sys
import threading
import time

cases = json.load(open(sys.argv[1]))
replies = [None] * len(cases)


def status_lines(reply):
    return reply.count(b"HTTP/1.1 ") + reply.count(b"HTTP/1.0 ")


def one(case):
    s = socket.create_connection(("127.0.0.1", case["port"]), timeout=20)
    reply = b""
    try:
        for hexed, wait in case["segments"]:
            s.sendall(bytes.fromhex(hexed))
            if wait:
                s.settimeout(0.2)
                deadline = time.monotonic() + 10
                while status_lines(reply) < wait and time.monotonic() < deadline:
                    try:
                        got = s.recv(65536)
                    except socket.timeout:
                        continue
                    if not got:
                        break
                    reply += got
        s.shutdown(socket.SHUT_WR)
        s.settimeout(20)
        while True:
            got = s.recv(65536)
            if not got:
                break
            reply += got
    except OSError as e:
        reply += ("\nclient: %s\n" % e).encode()
    finally:
        s.close()
    return reply.decode("latin-1")


def run_port(indices):
    for i in indices:
        replies[i] = one(cases[i])


by_port = {}
for i, c in enumerate(cases):
    by_port.setdefault(c["port"], []).append(i)
threads = [threading.Thread(target=run_port, args=(ix,)) for ix in by_port.values()]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(replies))
