"""CI only: lets vLLM 0.34+'s CPU platform configure on an x86 machine that has no triton-cpu.

vLLM 0.34's ``CpuPlatform.check_and_update_config`` raises "vLLM on x86 CPUs requires Triton
(triton-cpu)" when ``vllm.triton_utils.HAS_TRITON`` is False, and the package registry this CI uses
serves no triton-cpu. The Makefile installs this module, with a ``.pth`` line that imports it, into
the one environment it builds for that release (``make venv-vllm034``), and turns it on for the runs
it makes there (``KVCONFORM_CI_WAIVE_TRITON=1``, in ``RUN034``); elsewhere, and in that environment
without the variable, it does nothing. It is never part of kvconform's wheel, so a user's install
never gets it.

It waives that one check and nothing else: while ``check_and_update_config`` runs, ``HAS_TRITON``
reads True (the function reads it there only); everywhere else vLLM sees Triton's real state. It
says so in ``KVCONFORM_WAIVERS``, which kvconform prints in the run's header and carries into every
report of a run in this environment. The patch is applied when vLLM imports ``vllm.platforms.cpu``
(an import hook), so a process that never imports vLLM pays nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

WAIVER = "Triton requirement waived for CI: triton-cpu is not installable here (CpuPlatform.check_and_update_config)"
TARGET = "vllm.platforms.cpu"


def _waive(module) -> None:
    platform = module.CpuPlatform
    original = platform.check_and_update_config.__func__

    def check_and_update_config(cls, vllm_config):
        import vllm.triton_utils as triton_utils

        has_triton = triton_utils.HAS_TRITON
        triton_utils.HAS_TRITON = True
        try:
            return original(cls, vllm_config)
        finally:
            triton_utils.HAS_TRITON = has_triton

    platform.check_and_update_config = classmethod(check_and_update_config)


class _WaiveOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_waive(module):
            exec_module(module)
            _waive(module)

        spec.loader.exec_module = exec_and_waive  # type: ignore[method-assign]
        return spec


if os.environ.get("KVCONFORM_CI_WAIVE_TRITON") == "1":
    os.environ.setdefault("KVCONFORM_WAIVERS", WAIVER)
    sys.meta_path.insert(0, _WaiveOnImport())
