"""The lint follows a connector's names into the vLLM module that defines them, wherever it is.

A made-up vLLM tree on disk: the connector's module uses ``pin_tensor`` from ``vllm/utils/host_memory.py``
(outside every folder the import graph reads whole), once directly and once through a package that
re-exports it. The lint reads that definition and the module's top level, not the module's other
functions, and not names used only in annotations or under ``TYPE_CHECKING``. An expected finding
that is gone says why: the code is gone, or the lint no longer reads it.
"""

from __future__ import annotations

import textwrap

import pytest

from kvconform.conformance.lint.closure import connector_closure
from kvconform.conformance.session.lint_findings import LintFinding, findings_mismatch

CONNECTOR = "vllm.distributed.kv_transfer.kv_connector.v1.pin_connector"
OWN = "vllm/distributed/kv_transfer/kv_connector/v1/pin_connector.py"
HOST_MEMORY = "vllm/utils/host_memory.py"

FILES = {
    "vllm/__init__.py": "",
    "vllm/distributed/__init__.py": "",
    "vllm/distributed/kv_transfer/__init__.py": "",
    "vllm/distributed/kv_transfer/kv_connector/__init__.py": "",
    "vllm/distributed/kv_transfer/kv_connector/v1/__init__.py": "",
    OWN: """
        from typing import TYPE_CHECKING

        from vllm.utils.host_memory import pin_tensor
        from vllm.utils import exported_pin
        from vllm.utils.annotations_only import Pinned

        if TYPE_CHECKING:
            from vllm.utils.typing_only import TypedPin


        class PinConnector:
            def register_kv_caches(self, caches) -> Pinned:
                pin_tensor(caches)
                exported_pin(caches)

            def typed(self, pin: TypedPin) -> None:
                pass
        """,
    "vllm/utils/__init__.py": "from .reexported import exported_pin\n",
    HOST_MEMORY: """
        import torch

        HOST_EVENT = torch.cuda.Event()  # top level: runs when the module is imported


        def pin_tensor(tensor):
            torch.cuda.cudart().cudaHostRegister(tensor.data_ptr(), tensor.nbytes, 0)


        def unused(tensor):
            torch.cuda.synchronize()
        """,
    "vllm/utils/reexported.py": """
        import torch


        def exported_pin(tensor):
            torch.cuda.Stream()
        """,
    "vllm/utils/annotations_only.py": """
        import torch


        class Pinned:
            def make(self):
                torch.cuda.Stream()
        """,
    "vllm/utils/typing_only.py": """
        import torch


        def TypedPin():
            torch.cuda.Stream()
        """,
}


@pytest.fixture
def closure(tmp_path):
    for path, source in FILES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(textwrap.dedent(source))
    found = connector_closure(CONNECTOR, root=tmp_path)
    assert found is not None
    return found


def _found(closure) -> set[tuple[str, str, str]]:
    return {(f.path, f.function, f.call) for f in closure.lint() if f.severity == "error"}


def test_a_used_definition_outside_the_import_graph_is_read_with_its_modules_top_level(closure):
    assert closure.files[0] == OWN
    assert (HOST_MEMORY, "pin_tensor", "torch.cuda.cudart") in _found(closure)
    assert (HOST_MEMORY, "<module>", "torch.cuda.Event") in _found(closure)


def test_a_re_exported_name_is_read_where_it_is_defined(closure):
    assert ("vllm/utils/reexported.py", "exported_pin", "torch.cuda.Stream") in _found(closure)


def test_the_rest_of_the_module_and_names_that_never_run_are_not_read(closure):
    found = {(path, function) for path, function, _ in _found(closure)}
    assert (HOST_MEMORY, "unused") not in found
    assert not {path for path, _ in found} & {"vllm/utils/annotations_only.py", "vllm/utils/typing_only.py"}
    assert not closure.reads(HOST_MEMORY, "unused")


@pytest.mark.parametrize(("file", "function", "why"), [
    (HOST_MEMORY, "pin_tensor", "the code is gone: the lint reads vllm/utils/host_memory.py for pin_tensor, and "
                                "pin_tensor there makes no torch.cuda.cudart call"),
    (OWN, "PinConnector.gone", f"the code is gone: the lint reads {OWN} whole, and PinConnector.gone there makes "
                               "no torch.cuda.cudart call"),
    (HOST_MEMORY, "unused", "the lint no longer reads it: of vllm/utils/host_memory.py it reads only what the "
                            "connector's code uses (pin_tensor), not unused"),
    ("vllm/utils/typing_only.py", "TypedPin", "the lint no longer reads it: vllm/utils/typing_only.py is in this "
                                              "vLLM, but the connector's code no longer uses it"),
    ("vllm/v1/simple_kv_offload/cuda_mem_ops.py", "pin_tensor",
     "the code is gone from there: this vLLM has no vllm/v1/simple_kv_offload/cuda_mem_ops.py"),
])
def test_an_expected_finding_not_found_says_whether_the_code_is_gone_or_no_longer_read(closure, file, function, why):
    key = {"rule": "KVC004", "file": file, "function": function, "call": "torch.cuda.cudart"}
    assert closure.unfound(key).startswith(why)


def test_the_expectation_mismatch_carries_the_reason(closure):
    gone = LintFinding(rule="KVC004", file="vllm/v1/simple_kv_offload/cuda_mem_ops.py", function="pin_tensor",
                       call="torch.cuda.cudart")
    carried = [f.key() for f in closure.lint() if f.severity == "error"]
    expected = [LintFinding(**key) for key in carried] + [gone]
    message = findings_mismatch(expected, carried, closure.unfound)
    assert message == ("its lint findings differ from the entry's (expected but not found: KVC004 "
                       "vllm/v1/simple_kv_offload/cuda_mem_ops.py pin_tensor: torch.cuda.cudart (the code is gone "
                       "from there: this vLLM has no vllm/v1/simple_kv_offload/cuda_mem_ops.py))")
    assert findings_mismatch(expected[:-1], carried, closure.unfound) is None
