"""A pytest plugin (``-p tests.plugin.refusing_vllm``): vLLM's CPU platform refuses to configure, as vLLM 0.34's
does on an x86 machine without triton-cpu, with this module's message."""

from __future__ import annotations

MESSAGE = "this vLLM refuses the platform (a project test's stand-in for a missing kernel package)"


def pytest_configure(config) -> None:
    from vllm.platforms.cpu import CpuPlatform

    def refuse(cls, vllm_config):
        raise RuntimeError(MESSAGE)

    CpuPlatform.check_and_update_config = classmethod(refuse)
