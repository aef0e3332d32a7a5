"""Installs a vLLM plugin distribution for a test without pip: a ``<name>.dist-info`` folder in a temporary folder.

``importlib.metadata`` finds a distribution by the ``*.dist-info`` folders on ``sys.path``, so a folder holding
``METADATA`` and ``entry_points.txt`` put on ``sys.path`` (this process) or ``PYTHONPATH`` (a suite subprocess)
installs it as far as vLLM's ``load_general_plugins`` and kvconform's discovery can tell. The plugin's code is
``plugin_package/`` beside this module (or a module a test writes beside the metadata).
"""

from __future__ import annotations

from pathlib import Path

PLUGIN_PACKAGE = Path(__file__).parent / "plugin_package"
EXAMPLE_DISTRIBUTION = "kvconform-example-plugin"
EXAMPLE_ENTRY_POINTS = {"kvconform_example": "kvconform_example_plugin:register"}


def install_distribution(folder: Path, distribution: str, entry_points: dict[str, str]) -> Path:
    """Write ``distribution``'s metadata with ``entry_points`` (name -> module:function) in the
    ``vllm.general_plugins`` group into ``folder``; ``folder``, to put on the import path."""
    info = folder / f"{distribution.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    lines = [f"{name} = {value}" for name, value in entry_points.items()]
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\n" + "\n".join(lines) + "\n")
    return folder
