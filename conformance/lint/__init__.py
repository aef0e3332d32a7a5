"""``kvconform lint``: a static check for hard-coded device assumptions in KV connectors.

vLLM's connectors keep hard-coding CUDA (``.cuda()``, ``.to("cuda")``) and then
break on CPU and XPU; a runtime check only catches that on the platform that
breaks, this lint catches it on any machine.  Rules are data (``rules.py``),
guards are data (``guards.py``), the walk is ``checker.py``.
"""

from .findings import Finding, lint_file, lint_files, lint_source
from .paths import LintPathError, default_connector_dir, python_files
from .rules import RULES, Rule

__all__ = ["RULES", "Finding", "LintPathError", "Rule", "default_connector_dir", "lint_file",
           "lint_files", "lint_source", "python_files"]
