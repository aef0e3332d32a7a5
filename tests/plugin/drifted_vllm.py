"""A pytest plugin (``-p tests.plugin.drifted_vllm``) that makes the installed vLLM look like a release
whose internals kvconform no longer fits, the two ways vLLM 0.34 drifted: a dataclass kvconform builds lost
a field kvconform passes, and a vLLM method kvconform hands a stand-in now reads an attribute the stand-in
lacks. It repoints two entries of kvconform's table of vLLM names at the drifted copies below, and nothing
would call the copies: the session must not run the checks that need them. It also renames a function in vLLM
itself, as a dev build of main might (``init_none_hash``, which every check that builds a request looks up),
in the processes that run tests: the session must name that once, not fail every check.
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


RENAMED = "init_none_hash"


def pytest_configure(config) -> None:
    api.PLACES["ModelRunnerOutput"] = api.Place((__name__,), "ModelRunnerOutput")
    api.PLACES["MambaBase"] = api.Place((__name__,), "MambaBase")
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):  # not an xdist controller
        from vllm.v1.core import kv_cache_utils

        setattr(kv_cache_utils, f"{RENAMED}_renamed", getattr(kv_cache_utils, RENAMED))
        delattr(kv_cache_utils, RENAMED)
