"""An xdist worker's interpreter, as a run forked from a warm Python starts it (tests/warm_python/server.py).

Started as ``python -S -E shim.py ADDRESS -u -c BOOTSTRAP`` in place of ``python -u -c BOOTSTRAP``: it hands its
standard streams, folder and environment to the warm Python at ADDRESS, which forks the worker, then waits for the
worker to end and ends as it did. Killed first (a run's timeout, xdist killing its worker), it closes its connection,
and the warm Python kills the worker.
"""

import os
import signal
import socket
import sys

from protocol import receive, send  # this script's folder is first on its path


def main(address: str, code: str) -> None:
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(address)
        send(connection, {"kind": "execnet", "code": code, "cwd": os.getcwd(), "env": dict(os.environ)}, [0, 1, 2])
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the worker has them now: a stream ends when the worker's copy closes
            os.dup2(null, fd)
        started, _ = receive(connection)
        ended, _ = receive(connection)
    if started is None or ended is None:
        os._exit(1)
    wait_status = int(ended["wait_status"])
    if os.WIFSIGNALED(wait_status):
        signal.signal(os.WTERMSIG(wait_status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(wait_status))
    os._exit(os.WEXITSTATUS(wait_status))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[sys.argv.index("-c") + 1])
