"""Makes vLLM unimportable in every Python process that has this folder on ``PYTHONPATH``.

``make check`` (the first part of ``make test``) runs the project tests that need no vLLM with this folder on
``PYTHONPATH``, so each of them is also the proof that it needs none: ``import vllm`` raises in the test's own
process, in the pytest and CLI processes it starts and in the kvconform code it calls, and a test that reaches
vLLM fails instead of passing on whichever vLLM is installed. tests/conftest.py says which tests those are.
A child process started with a ``PYTHONPATH`` of its own, or with ``-I``/``-S``, is not covered.
"""

import sys

BLOCKED = "vllm"
BLOCKED_NOTE = "vLLM is blocked in this process"


class VllmBlocker:
    """A meta path finder, asked before all others, that refuses vllm and its submodules."""

    def find_spec(self, name, path=None, target=None):
        if name == BLOCKED or name.startswith(BLOCKED + "."):
            raise ModuleNotFoundError(
                f"{BLOCKED_NOTE}: the test is one of those that need no vLLM (tests/conftest.py's NO_VLLM), "
                f"yet imports {name}; take it out of NO_VLLM",
                name=name,
            )
        return None


sys.meta_path.insert(0, VllmBlocker())
