"""What a finding is, without its line: rule, file, the enclosing function (qualified) and the call.

Expectations pin findings by this key (``findings:`` in conformance/expectations/any.yaml), so it must
name the same code wherever it sits in the file, and tell different code apart.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from kvconform.conformance.lint import lint_source
from kvconform.conformance.test_lint import findings_yaml, lint_failure

WORKER = """
import torch
from torch.cuda import Event as CudaEvent

stream = torch.cuda.Stream()


def pin(t):
    return torch.cuda.cudart().cudaHostRegister(t)


class Worker:
    def register(self, caches):
        lo, hi = torch.cuda.Stream.priority_range()
        self.load = torch.cuda.Stream(priority=hi)
        self.save = torch.cuda.Stream(priority=lo)

    async def wait(self, kv):
        def later():
            return CudaEvent()
        kv.to("cuda:0", non_blocking=True)
        return later

    class Inner:
        def probe(self):
            return type(self.meta) is FlashMLAMetadata
"""


def _keys(source: str, path: str = "vllm/worker.py") -> list[tuple[str, str, str]]:
    findings = lint_source(textwrap.dedent(source).encode(), Path(path))
    return [(f.rule, f.function, f.call) for f in findings]


def test_each_finding_names_its_enclosing_function_and_what_it_calls():
    assert _keys(WORKER) == [
        ("KVC004", "<module>", "torch.cuda.Stream"),
        ("KVC004", "pin", "torch.cuda.cudart"),
        ("KVC004", "Worker.register", "torch.cuda.Stream.priority_range"),
        ("KVC004", "Worker.register", "torch.cuda.Stream"),
        ("KVC004", "Worker.register", "torch.cuda.Stream"),
        ("KVC004", "Worker.wait.later", "CudaEvent"),  # the call as written, through its import alias
        ("KVC003", "Worker.wait", "kv.to"),
        ("KVC006", "Worker.Inner.probe", "type(self.meta) is FlashMLAMetadata"),  # no call: the comparison
    ]


def test_the_key_does_not_move_with_the_line():
    moved = "# an unrelated edit above\n\n\nimport os\n" + textwrap.dedent(WORKER)
    before = lint_source(textwrap.dedent(WORKER).encode(), Path("vllm/worker.py"))
    after = lint_source(moved.encode(), Path("vllm/worker.py"))
    assert [f.line + 4 for f in before] == [f.line for f in after]
    assert [f.key() for f in before] == [f.key() for f in after]
    assert before[0].key() == {"rule": "KVC004", "file": "vllm/worker.py", "function": "<module>",
                               "call": "torch.cuda.Stream"}


def test_a_call_written_over_several_lines_is_one_line_of_source():
    source = "import torch\nkv = caches[\n    name\n].cuda(\n)\ns = torch.cuda.Stream(\n    priority=0)\n"
    assert [(f.rule, f.call) for f in lint_source(source.encode(), Path("a.py"))] == [
        ("KVC001", "caches[name].cuda"), ("KVC004", "torch.cuda.Stream")]


def test_the_lint_failure_carries_the_keys_and_prints_them_as_an_entry_would():
    findings = [f for f in lint_source(textwrap.dedent(WORKER).encode(), Path("vllm/worker.py"))
                if f.severity == "error"]
    failure = lint_failure("X: 7 lint error(s) in vllm/worker.py: ...", findings)
    assert str(failure).startswith("X: 7 lint error(s)") and type(failure).__name__ == "Failed"
    assert failure.findings == tuple(f.key() for f in findings)
    lines = findings_yaml(findings)
    assert ("  - {rule: KVC004, file: vllm/worker.py, function: Worker.register, call: torch.cuda.Stream, "
            "count: 2}") in lines
    assert len(lines) == 6  # the two Stream() calls of register are one line, with their count
