"""A misbehaving connector must not take the suite down, hang it, or litter the machine.

Registered from ``conformance.plugin`` (``pytest_plugins``); each part is a small
plugin of its own, watching every conformance test (one parametrized with a
``connector``):

- ``timeouts``: a per-test timeout (pytest-timeout) unless the user set one; a
  timeout names the connector;
- ``crashes``: under pytest-xdist (``-n 1`` or more) a test whose worker died
  (segfault, ``os._exit``) fails naming the connector and how the process ended;
  after a crash or a timeout, that connector's other tests of the same check are
  reported as not run instead of costing a fresh worker or a full timeout each;
- ``threads``: threads a test leaves running are an error naming them, and a
  leaked non-daemon thread never keeps pytest alive: it exits with the run's status;
- ``storage``: new entries in the connector's *default* storage location (the
  profile always points it at a per-test folder) are an error naming them;
- ``cleanup``: a passed test's temporary folder is removed right away;
- ``zmq_contexts``: ZeroMQ contexts a test leaves open are named and kept alive, so
  that pyzmq's destroy-on-collection cannot hang a later test;
- ``finalizers``: no garbage collection (a connector's ``__del__``) while pytest
  formats a conformance test's report;
- ``deferred``: a test's reports wait for the shutdowns it left running in the
  background (a P/D pair's scheduler side, ``engine/closing.py``) while the next
  test runs; the checks above judge them once those have ended;
- ``library_copies``: a shared library loaded from two files (NIXL's bundled libnl beside
  the system's), whose copies can crash the process as it exits, is named before it does.

``vllm_status()`` says whether the harness runs on the installed vLLM, and whether CI tests that release.
"""

from __future__ import annotations

from ..vllm_install.window import TESTED_VLLM, VllmStatus, VllmVersionError, vllm_status

pytest_plugins = [
    "kvconform.conformance.reliability.timeouts",
    "kvconform.conformance.reliability.crashes",
    "kvconform.conformance.reliability.threads",
    "kvconform.conformance.reliability.storage",
    "kvconform.conformance.reliability.cleanup",
    "kvconform.conformance.reliability.zmq_contexts",
    "kvconform.conformance.reliability.finalizers",
    "kvconform.conformance.reliability.held_reports",
    "kvconform.conformance.reliability.library_copies",
]

__all__ = ["TESTED_VLLM", "VllmStatus", "VllmVersionError", "vllm_status"]
