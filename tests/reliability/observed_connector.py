"""ExampleConnector that starts a native thread as its worker side is built, and writes down its conditions.

Loaded by tests/reliability/test_vllm_conditions.py as a third-party connector
(``--connector tests.reliability.observed_connector:ObservedConnector``): a connector's
threads must run as vLLM would run them, not as the harness would like. Each worker side
records, as it saves, the priority and CPUs of the native thread it started, the process's
own at import, and the UCX and OpenMP variables a harness might set, into the JSON-lines
file named by ``KVCONFORM_OBSERVED`` (the test's own variable).
"""

from __future__ import annotations

import ctypes
import json
import os
import threading

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector

AT_IMPORT = {"nice": os.getpriority(os.PRIO_PROCESS, 0), "cpus": sorted(os.sched_getaffinity(0))}
WATCHED_ENV = ("UCX_USE_MT_MUTEX", "OMP_NUM_THREADS")


class _NativeThread:
    """A thread started as a connector's C++ code starts one: ``pthread_create``, invisible to ``threading``."""

    def __init__(self, seconds: float):
        self.tid = 0
        started = threading.Event()
        libc = ctypes.CDLL(None)

        @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
        def body(_arg):
            self.tid = threading.get_native_id()
            started.set()
            libc.usleep(int(seconds * 1e6))
            return None

        self._body = body  # kept alive while the thread runs
        self._handle = ctypes.c_ulong()
        assert libc.pthread_create(ctypes.byref(self._handle), None, body, None) == 0
        assert started.wait(5)


class ObservedConnector(ExampleConnector):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._native = _NativeThread(20.0) if self._is_worker_side() else None

    def _is_worker_side(self) -> bool:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

        return self._role == KVConnectorRole.WORKER

    def wait_for_save(self) -> None:
        super().wait_for_save()
        if self._native is not None:
            tid = self._native.tid
            seen = {"at_import": AT_IMPORT, "native_nice": os.getpriority(os.PRIO_PROCESS, tid),
                    "native_cpus": sorted(os.sched_getaffinity(tid)),
                    "env": {name: os.environ.get(name) for name in WATCHED_ENV}}
            with open(os.environ["KVCONFORM_OBSERVED"], "a") as out:
                out.write(json.dumps(seen) + "\n")
