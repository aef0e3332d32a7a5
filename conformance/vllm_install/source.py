"""Which vLLM a test process imported, and which commit it was told to test.

The PR gate tests a checkout by putting an overlay of its sources first on the
import path of the pytest run. That is an assumption until each process says what
it really imported: this module is how they say it (the run header, results.json)
and how the gate reads it back. Nothing here imports vLLM: the header uses the
import system's lookup, the records use the module a test already imported.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import TypedDict

# Set by ``kvconform gate`` for the pytest run: the commit whose vLLM the run is meant to import.
TOLD_COMMIT_ENV = "KVCONFORM_VLLM_COMMIT"


def build_commit() -> str | None:
    """The commit vLLM's build recorded (``vllm._version``), when this process imported vLLM."""
    vllm = sys.modules.get("vllm")
    version_module = sys.modules.get("vllm._version")
    return getattr(vllm, "__commit__", None) or getattr(version_module, "__commit_id__", None)


class ImportRecord(TypedDict):
    """One process's record (results.json's ``vllm_imports``; the report's ``VllmImport``)."""

    process: str  # "controller", "probe", or the xdist worker's id
    file: str | None  # vllm.__file__
    commit: str | None  # the commit the gate told the run to test
    build_commit: str | None  # the commit vLLM's build recorded, when it recorded one


def imported(process: str) -> ImportRecord | None:
    """What ``process`` imported as vLLM (file, told commit, build commit); None when it imported none."""
    vllm = sys.modules.get("vllm")
    if vllm is None:
        return None
    return {"process": process, "file": getattr(vllm, "__file__", None),
            "commit": os.environ.get(TOLD_COMMIT_ENV) or None, "build_commit": build_commit()}


def resolved_file() -> str | None:
    """The file ``import vllm`` would load here, found without running it."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None else None


def header_line() -> str:
    """The run header's line: where ``import vllm`` resolves, and the commit the gate told (if any)."""
    told = os.environ.get(TOLD_COMMIT_ENV)
    where = resolved_file() or "not importable"
    return f"kvconform: vLLM imported from {where}" + (f" (checkout commit {told}, from the PR gate)" if told else "")
