"""A TLS front for a plain server on loopback, for envgit's tests: accepts TLS with the given
certificate and splices each connection to 127.0.0.1:BACKEND. Prints its port, then serves
until killed. Usage: tls_front.py CERT KEY BACKEND_PORT"""
import socket
import ssl
import sys
import threading

cert, key, backend = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
ctx.set_alpn_protocols(["http/1.1"])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def serve(raw):
    try:
        conn = ctx.wrap_socket(raw, server_side=True)
    except (OSError, ssl.SSLError):
        raw.close()
        return
    up = socket.create_connection(("127.0.0.1", backend))
    t = threading.Thread(target=pump, args=(up, conn), daemon=True)
    t.start()
    pump(conn, up)
    t.join(30)
    conn.close()
    up.close()


while True:
    raw, _ = listener.accept()
    threading.Thread(target=serve, args=(raw,), daemon=True).start()
