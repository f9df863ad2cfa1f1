"""Runs a command on a fresh pseudo-terminal, then makes the terminal vanish, as an ssh drop
without tmux does: waits until the screen shows MARKER, closes the master side (the child gets
SIGHUP and EIO/EOF on the terminal), and waits for the child. Prints `exit=N seconds=S`
(N negative: killed by that signal; `exit=hung` if it is still alive after TIMEOUT seconds, in
which case it is killed). Python standard library only.

usage: pty_run.py MARKER DELAY TIMEOUT COMMAND [ARG...]  (DELAY: seconds after the marker)
"""

import fcntl
import os
import pty
import select
import signal
import struct
import sys
import termios
import time


def main() -> None:
    marker = sys.argv[1].encode()
    delay = float(sys.argv[2])
    timeout = float(sys.argv[3])
    cmd = sys.argv[4:]
    pid, fd = pty.fork()
    if pid == 0:
        # A new pty is 0x0: give it the size of a real terminal before the program looks.
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
        os.environ["TERM"] = "xterm-256color"
        os.execvp(cmd[0], cmd)
    seen = b""
    deadline = time.time() + 60
    while marker not in seen and time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                seen = (seen + os.read(fd, 65536))[-200_000:]
            except OSError:
                break
    if marker not in seen:
        print("marker-not-seen", flush=True)
    # Let the run get going (the screen keeps being read, as a terminal would).
    until = time.time() + delay
    while time.time() < until:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                os.read(fd, 65536)
            except OSError:
                break
    # The terminal vanishes.
    os.close(fd)
    closed = time.time()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            print(f"exit={code} seconds={time.time() - closed:.2f}", flush=True)
            return
        if time.time() - closed > timeout:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            print("exit=hung", flush=True)
            return
        time.sleep(0.05)


main()
