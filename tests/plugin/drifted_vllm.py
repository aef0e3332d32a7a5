"""A pytest plugin (``-p tests.plugin.drifted_vllm``) that makes the installed vLLM look like a release
whose internals kvconform no longer fits, the two ways vLLM 0.34 drifted: a dataclass kvconform builds lost
a field kvconform passes, and a vLLM method kvconform hands a stand-in now reads an attribute the stand-in
lacks. It repoints two entries of kvconform's table of vLLM names at the drifted copies below; vLLM itself is
not changed, and nothing would call the copies: the session must not run the checks that need them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvconform.conformance.vllm_install import api


@dataclass
class ModelRunnerOutput:
    """vLLM's runner output as a release might have it: ``kv_connector_output`` renamed."""

    req_ids: list[str]
    sampled_token_ids: list[list[int]] = field(default_factory=list)
    connector_output: object = None


class MambaBase:
    """vLLM's Mamba layer base as a release might have it: its page unpacking reads a new attribute."""

    def bind_kv_cache(self, kv_cache):
        self.kv_cache = (kv_cache[:, : self.page_alignment],)


def pytest_configure(config) -> None:
    api.PLACES["ModelRunnerOutput"] = api.Place((__name__,), "ModelRunnerOutput")
    api.PLACES["MambaBase"] = api.Place((__name__,), "MambaBase")
