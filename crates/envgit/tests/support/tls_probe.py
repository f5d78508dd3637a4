"""Hostile and odd TLS clients, run inside `envgit run` by envgit's tests. Each talks to the
sandbox's proxy (127.0.0.1:3128) by hand and prints one line saying what it got back.
Usage: tls_probe.py KIND HOST"""
import socket
import ssl
import sys

kind, host = sys.argv[1], sys.argv[2]


def tunnel(target):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target.encode(), target.encode()))
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return s, head.split(b"\r\n")[0].decode()


def tls(sock, sni):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    return ctx.wrap_socket(sock, server_hostname=sni)


def status_of(conn, request):
    conn.sendall(request)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        return "error %s" % e.__class__.__name__
    return data.split(b"\r\n")[0].decode() or "closed"


try:
    if kind == "sni-mismatch":
        s, line = tunnel(host + ":443")
        conn = tls(s, "other.envgit.test")
        print("handshake completed:", status_of(conn, b"GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % host.encode()))
    elif kind == "host-mismatch":
        s, line = tunnel(host + ":443")
        conn = tls(s, host)
        print(status_of(conn, b"GET / HTTP/1.1\r\nHost: other.envgit.test\r\n\r\n"))
    elif kind == "relayed-connect":
        s, line = tunnel(host + ":443")
        conn = tls(s, host)
        print(status_of(conn, b"CONNECT other.envgit.test:443 HTTP/1.1\r\nHost: other.envgit.test:443\r\n\r\n"))
    elif kind == "oversized-head":
        s, line = tunnel(host + ":443")
        conn = tls(s, host)
        big = b"X-Big: " + b"a" * 200000 + b"\r\n"
        print(status_of(conn, b"GET / HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (host.encode(), big)))
    elif kind == "garbage":
        s, line = tunnel(host + ":443")
        s.sendall(b"\x16\x03\x01\x00\x05hello-not-a-client-hello" * 4)
        try:
            print("got", s.recv(100))
        except OSError as e:
            print("error", e.__class__.__name__)
    elif kind == "ssh":
        s, line = tunnel(host + ":443")
        s.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
        try:
            print("got", s.recv(100))
        except OSError as e:
            print("error", e.__class__.__name__)
    elif kind == "slowloris":
        # Open a tunnel, start a request and stall; the caller checks that others are served.
        s, line = tunnel(host + ":443")
        conn = tls(s, host)
        conn.sendall(b"GET /slow HTTP/1.1\r\nHost: ")
        print("stalled", flush=True)
        import time
        time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 3)
    else:
        print("unknown kind", kind)
except Exception as e:  # the test reads the line, whatever happened
    print("exception", e.__class__.__name__, e)
