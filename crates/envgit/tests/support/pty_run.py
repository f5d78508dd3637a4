"""Runs a command on a fresh pseudo-terminal, as a person at a terminal would, for envgit's
tests: when EXPECT appears in what the terminal shows, types ANSWER. Prints the terminal's
name and identity (`st_dev:st_ino`, which a command can compare with `stat -L -c %d:%i
/proc/self/fd/0`: names repeat across devpts instances, identities do not), everything shown,
and the exit code. Bounded to 120 s. With PTY_RESIZE=MARK:ROWS:COLS,
resizes the terminal (as a person dragging the window) once MARK appears. With
PTY_ANSWER_AFTER=FILE:N, types ANSWER only once the number the command keeps in FILE has grown
by N since EXPECT appeared (the command went on writing while the question was open). With
PTY_EARLY=TEXT:KEY, types KEY once as soon as TEXT appears, and prints EARLY_AT=N, how much of
the output had been read by then.
Usage: pty_run.py EXPECT ANSWER -- CMD ARGS..."""
import fcntl
import os
import pty
import select
import struct
import sys
import termios
import time

expect, answer = sys.argv[1].encode(), sys.argv[2].encode()
cmd = sys.argv[4:]
master, slave = pty.openpty()
name = os.ttyname(slave)
ident = "%d:%d" % (os.fstat(slave).st_dev, os.fstat(slave).st_ino)
pid = os.fork()
if pid == 0:
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    os.close(master)
    os.close(slave)
    os.execvp(cmd[0], cmd)
os.close(slave)
resize = os.environ.get("PTY_RESIZE")
shown = b""
answered = False
answer_after = os.environ.get("PTY_ANSWER_AFTER")
counted_from = None
early = os.environ.get("PTY_EARLY")
early_at = None


def count():
    try:
        with open(answer_after.rsplit(":", 1)[0]) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


deadline = time.time() + 120
while time.time() < deadline:
    waiting = answer_after and counted_from is not None and not answered
    ready, _, _ = select.select([master], [], [], 0.01 if waiting else 1)
    if waiting and count() >= counted_from + int(answer_after.rsplit(":", 1)[1]):
        os.write(master, answer)
        answered = True
    if master not in ready:
        continue
    try:
        data = os.read(master, 4096)
    except OSError:
        break
    if not data:
        break
    shown += data
    if early and early_at is None and early.rsplit(":", 1)[0].encode() in shown:
        os.write(master, early.rsplit(":", 1)[1].encode())
        early_at = len(shown)
    if not answered and expect in shown:
        if not answer_after:
            os.write(master, answer)
            answered = True
        elif counted_from is None:
            counted_from = count()
    if resize:
        mark, rows, cols = resize.split(":")
        if mark.encode() in shown:
            # Sets the size and sends SIGWINCH to the terminal's foreground process group.
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", int(rows), int(cols), 0, 0))
            resize = None
_, status = os.waitpid(pid, 0)
if early_at is not None:
    sys.stdout.write("EARLY_AT=%d\n" % early_at)
sys.stdout.write("OUTER_TTY=%s\n" % name)
sys.stdout.write("OUTER_TTY_ID=%s\n" % ident)
sys.stdout.write(shown.decode(errors="replace"))
sys.stdout.write("\nEXIT=%d\n" % os.waitstatus_to_exitcode(status))
