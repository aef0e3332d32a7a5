"""A warm Python: imports what every suite run imports, then forks a child per request, which becomes the run
(``python -m pytest ARGS``) or one of its xdist workers (``python -u -c BOOTSTRAP``, asked for by ``shim``).

Run as ``python -m tests.warm_python.server ADDRESS`` by ``WarmPython``, which it tells "ready" on stdout once it
listens on ADDRESS; it ends when its stdin does (the process that started it is gone), killing its children.
A child whose asker went away (its run killed, or the shim that started it) is killed with its process group.
"""

from __future__ import annotations

import importlib
import io
import os
import runpy
import selectors
import socket
import sys
from pathlib import Path

from . import kill_group
from .protocol import receive, send

SHIM = Path(__file__).with_name("shim.py")
# imported once, before any fork: what every suite run imports before its first test (vllm.config is most of it);
# nothing pytest would rewrite (kvconform's modules, pytest's plugins) and nothing that builds a connector
PRELOAD = ("torch", "vllm.config", "vllm.v1.core.sched.scheduler", "vllm.distributed.kv_transfer.kv_connector.factory",
           "vllm.v1.worker.gpu_model_runner")
REAP_EVERY_S = 0.05
Request = tuple[dict[str, object], list[int]]  # a request and the descriptors sent with it


class Server:
    def __init__(self, address: str) -> None:
        self.address = address
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(address)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(sys.stdin, selectors.EVENT_READ)
        self.connections: set[socket.socket] = set()
        self.children: dict[int, socket.socket] = {}  # pid -> the connection that asked for it

    def serve(self) -> Request:
        """Fork a child per request; returns only in a child, with its request."""
        while True:
            for key, _ in self.selector.select(timeout=REAP_EVERY_S):
                if key.fileobj is sys.stdin:
                    self._end()
                elif key.fileobj is self.listener:
                    connection, _ = self.listener.accept()
                    self.connections.add(connection)
                    self.selector.register(connection, selectors.EVENT_READ)
                elif (asked := self._on_message(key.fileobj)) is not None:  # type: ignore[arg-type]
                    return asked
            self._reap()

    def _on_message(self, connection: socket.socket) -> Request | None:
        request, fds = receive(connection)
        if request is None:  # the asker went away: what it asked for goes too
            self.selector.unregister(connection)
            self.connections.discard(connection)
            connection.close()
            for pid, asker in self.children.items():
                if asker is connection:
                    kill_group(pid)
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)
            self.selector.close()
            for open_socket in (self.listener, *self.connections):
                open_socket.close()
            return request, fds
        try:
            os.setpgid(pid, pid)  # as the child does: whichever runs first, its group exists before it is killed
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        self.children[pid] = connection
        send(connection, {"pid": pid})
        return None

    def _reap(self) -> None:
        for pid, connection in list(self.children.items()):
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                del self.children[pid]
                try:
                    send(connection, {"wait_status": wait_status})
                except OSError:  # the asker went away meanwhile
                    pass

    def _end(self) -> None:
        for pid in self.children:
            kill_group(pid)
        os.unlink(self.address)
        os._exit(0)


def _become(request: dict[str, object], fds: list[int]) -> None:
    """In a forked child: take the request's standard streams (the shim's, or new files), folder and environment."""
    streams = fds or [os.open(os.devnull, os.O_RDONLY),
                      *(os.open(str(request[key]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                        for key in ("stdout", "stderr"))]
    for target, fd in enumerate(streams):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(str(request["cwd"]))
    os.environ.clear()
    os.environ.update(request["env"])  # type: ignore[arg-type]
    import numpy.random

    numpy.random.seed()  # a fresh process's global generator is seeded from the OS, not copied from a parent


def _quiet_preloaded_plugins() -> None:
    """The preload imported modules of pytest plugins (vLLM imports anyio) before pytest could mark them for assertion
    rewriting, which a fresh process's pytest does first: its warning that it cannot is the warm Python's, not the
    run's, so the run is told to ignore exactly those (``PYTEST_ADDOPTS``, which pytest reads with its arguments)."""
    from importlib.metadata import entry_points

    preloaded = sorted({point.value.split(":")[0].split(".")[0] for point in entry_points(group="pytest11")}
                       & set(sys.modules))
    filters = [f"-W 'ignore:Module already imported so cannot be rewritten; {name}:pytest.PytestAssertRewriteWarning'"
               for name in preloaded]
    os.environ["PYTEST_ADDOPTS"] = " ".join([os.environ.get("PYTEST_ADDOPTS", ""), *filters]).strip()


def _workers_from(address: str) -> None:
    """xdist starts each worker as ``python -u -c BOOTSTRAP`` (execnet's popen gateway): in a run forked here, the
    shim goes first, and this warm Python forks the worker."""
    from execnet import gateway_io

    popen_args = gateway_io.popen_args

    def shim_first(spec):  # noqa: ANN001, ANN202  # execnet's XSpec
        args = popen_args(spec)
        return [sys.executable, "-S", "-E", str(SHIM), address, *args[1:]] if args[0] == sys.executable else args

    gateway_io.popen_args = shim_first


def _run_pytest(request: dict[str, object], address: str) -> None:
    _quiet_preloaded_plugins()
    _workers_from(address)
    sys.path[0] = str(request["cwd"])  # as ``python -m`` puts it
    sys.argv = ["-m", *request["args"]]  # type: ignore[misc]  # runpy puts pytest's __main__ path first
    runpy.run_module("pytest", run_name="__main__", alter_sys=True)


def _run_execnet_worker(request: dict[str, object]) -> None:
    """As ``python -u -c BOOTSTRAP``: unbuffered output, ``sys.argv`` ``["-c"]``, the code run as ``__main__``."""
    sys.stdin = open(0, closefd=False)  # noqa: SIM115  # open until the worker exits
    sys.stdout, sys.stderr = (io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), write_through=True)
                              for fd in (1, 2))
    sys.argv = ["-c"]
    sys.path[0] = ""
    main = type(sys)("__main__")
    sys.modules["__main__"] = main
    exec(compile(str(request["code"]), "<string>", "exec"), main.__dict__)  # noqa: S102  # execnet's bootstrap


def main(address: str) -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112  # not in this vLLM: each run imports what it needs itself
            continue
    server = Server(address)
    os.write(1, b"ready\n")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # nothing more for the process that started it; a child takes a stdout of its own
    os.close(null)
    request, fds = server.serve()
    _become(request, fds)
    if request["kind"] == "execnet":
        _run_execnet_worker(request)
    else:
        _run_pytest(request, address)


if __name__ == "__main__":
    main(sys.argv[1])
