"""Platform guards: torch.cuda calls under a CUDA-only condition are fine, elsewhere they are findings."""

from __future__ import annotations

import pytest

PREAMBLE = "import torch\nfrom vllm.platforms import current_platform\n"

GUARDED = {
    "is_cuda_alike": "if current_platform.is_cuda_alike():\n    torch.cuda.synchronize()",
    "is_cuda": "if current_platform.is_cuda():\n    s = torch.cuda.Stream()",
    "is_rocm": "if current_platform.is_rocm():\n    torch.cuda.synchronize()",
    "is_available": "if torch.cuda.is_available():\n    torch.cuda.synchronize()",
    "tensor.is_cuda": "if kv.is_cuda:\n    torch.cuda.current_stream().synchronize()",
    "device.type ==": 'if kv.device.type == "cuda":\n    torch.cuda.synchronize()',
    "literal first": 'if "cuda" == self.device_type:\n    torch.cuda.synchronize()',
    "startswith": 'if str(kv.device).startswith("cuda"):\n    torch.cuda.synchronize()',
    "torch.version.hip": "if torch.version.hip:\n    torch.cuda.synchronize()",
    "and": "if self.async_copy and current_platform.is_cuda():\n    torch.cuda.synchronize()",
    "or of guards": "if current_platform.is_cuda() or current_platform.is_rocm():\n"
                    "    torch.cuda.synchronize()",
    "else of !=": 'if kv.device.type != "cuda":\n    pass\nelse:\n    torch.cuda.synchronize()',
    "elif": "if current_platform.is_xpu():\n    pass\nelif current_platform.is_cuda():\n"
            "    torch.cuda.synchronize()",
    "nested blocks": "if current_platform.is_cuda():\n    for s in streams:\n        with torch.cuda.stream(s):\n"
                     "            pass",
    "early return": "def f():\n    if not current_platform.is_cuda_alike():\n        return\n"
                    "    torch.cuda.synchronize()",
    "early raise": "def f():\n    if not torch.cuda.is_available():\n        raise RuntimeError('no CUDA')\n"
                   "    return torch.cuda.Stream()",
    "assert": "def f():\n    assert current_platform.is_cuda()\n    torch.cuda.synchronize()",
    "ternary": "s = torch.cuda.Stream() if torch.cuda.is_available() else None",
    "and-chain": "ok = torch.cuda.is_available() and torch.cuda.synchronize()",
    "not-or": "ok = not current_platform.is_cuda() or torch.cuda.synchronize()",
    "guarded empty_cache": "if current_platform.is_cuda():\n    torch.cuda.empty_cache()",
}

UNGUARDED = {
    "no condition": "torch.cuda.synchronize()",
    "else of a guard": "if current_platform.is_cuda():\n    pass\nelse:\n    torch.cuda.synchronize()",
    "negated guard": "if not current_platform.is_cuda():\n    torch.cuda.synchronize()",
    "other platform": "if current_platform.is_xpu():\n    torch.cuda.synchronize()",
    "cpu early return": "def f():\n    if current_platform.is_cpu():\n        return\n"
                        "    torch.cuda.synchronize()",
    "not a platform test": "if self.use_streams:\n    torch.cuda.synchronize()",
    "guard or other": "if current_platform.is_cuda() or self.force:\n    torch.cuda.synchronize()",
    "negation without exit": "def f():\n    if not current_platform.is_cuda():\n        log('slow')\n"
                             "    torch.cuda.synchronize()",
    "after the guarded block": "if current_platform.is_cuda():\n    pass\ntorch.cuda.synchronize()",
    "or-chain": "ok = current_platform.is_cuda() or torch.cuda.synchronize()",
    "device in a list": 'if kv_buffer_device in ["cuda", "xpu"]:\n    torch.cuda.synchronize()',
    "ternary else": "s = None if torch.cuda.is_available() else torch.cuda.Stream()",
}


@pytest.mark.parametrize("code", GUARDED.values(), ids=GUARDED.keys())
def test_guarded_torch_cuda_calls_are_not_findings(rules_in, code):
    assert rules_in(PREAMBLE + code) == []


@pytest.mark.parametrize("code", UNGUARDED.values(), ids=UNGUARDED.keys())
def test_unguarded_torch_cuda_calls_are_findings(rules_in, code):
    assert rules_in(PREAMBLE + code) == ["KVC004"]


@pytest.mark.parametrize(("code", "rule"), [
    ("if current_platform.is_cuda():\n    kv = kv.cuda()", "KVC001"),
    ('if current_platform.is_cuda():\n    kv = kv.to("cuda")', "KVC003"),
    ('if torch.cuda.is_available():\n    d = torch.device("cuda")', "KVC002"),
])
def test_a_guard_does_not_excuse_a_device_literal(rules_in, code, rule):
    """Under a guard the default CUDA device is still not necessarily the destination's (vLLM #42924)."""
    assert rules_in(PREAMBLE + code) == [rule]


def test_the_guard_covers_the_right_lines(lint):
    code = PREAMBLE + ("if current_platform.is_cuda():\n    torch.cuda.synchronize()\n"
                       "else:\n    torch.cuda.synchronize()\n")
    assert lint(code) == [("KVC004", 6)]
