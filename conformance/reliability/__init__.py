"""A misbehaving connector must not take the suite down, hang it, or litter the machine.

Registered from ``kvconform.conformance.plugin`` (``pytest_plugins``), each part a small plugin watching every
conformance test: ``timeouts`` (a per-test timeout naming the connector), ``watchdog`` (a hard bound,
kept by another process, for a test stuck where that timeout cannot end it), ``crashes`` (under xdist a
dead worker's test fails naming the connector; its other tests of that check are not run),
``threads`` (leaked threads are an error, and never keep pytest alive), ``storage`` (new entries in a
connector's default storage are an error), ``cleanup`` (a passed test's folder goes at once),
``zmq_contexts`` and ``finalizers`` (what a connector leaves to the garbage collector cannot hang or
break pytest), ``gc_between_tests`` (each test's connectors are released when it ends), ``held_reports`` and
``left_behind`` (reports wait for background shutdowns, then what the test left is judged), and
``library_copies`` (a library mapped from two files, which can crash the process at exit, is named
first). docs/reliability.md describes them for users. ``vllm_status()`` says whether the harness runs
on the installed vLLM, and whether CI tests that release.
"""

from __future__ import annotations

from ..vllm_install.window import TESTED_VLLM, VllmStatus, VllmVersionError, vllm_status

pytest_plugins = [
    "kvconform.conformance.reliability.timeouts",
    "kvconform.conformance.reliability.crashes",
    "kvconform.conformance.reliability.watchdog",
    "kvconform.conformance.reliability.threads",
    "kvconform.conformance.reliability.storage",
    "kvconform.conformance.reliability.cleanup",
    "kvconform.conformance.reliability.zmq_contexts",
    "kvconform.conformance.reliability.finalizers",
    "kvconform.conformance.reliability.held_reports",
    "kvconform.conformance.reliability.library_copies",
]

__all__ = ["TESTED_VLLM", "VllmStatus", "VllmVersionError", "vllm_status"]
