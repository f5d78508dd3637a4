"""Run inside the sandbox: sends raw bytes to 127.0.0.1:PORT and prints what came back.

argv: PORT HEX [DELAY_SECONDS] [MODE]. Sleeps DELAY after connecting, sends the bytes, prints
`sent` (so a test knows it ran), then prints the reply. MODE `eof` (the default) half-closes
and reads until the peer closes; MODE `keep` leaves the connection open and reads until one
whole answer arrived (an `ok` body or one of envgit's `envgit:` lines), printing
`no answer` if none came within 15 s."""
import socket
import sys
import time

port, data = int(sys.argv[1]), bytes.fromhex(sys.argv[2])
delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
mode = sys.argv[4] if len(sys.argv) > 4 else "eof"
s = socket.create_connection(("127.0.0.1", port), timeout=30)
if delay:
    time.sleep(delay)
s.sendall(data)
print("sent", flush=True)
reply = b""
if mode == "eof":
    s.shutdown(socket.SHUT_WR)
    try:
        while True:
            got = s.recv(65536)
            if not got:
                break
            reply += got
    except socket.timeout:
        pass
else:
    s.settimeout(15)
    try:
        while not (b"ok\n" in reply or (b"envgit:" in reply and reply.endswith(b"\n"))):
            got = s.recv(65536)
            if not got:
                break
            reply += got
    except socket.timeout:
        reply += b"\nno answer\n"
sys.stdout.write(reply.decode("latin-1"))
