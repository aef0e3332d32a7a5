"""A small stand-in for the conformance suite, run by the real gate (``test_gate_run.py``, ``test_gate_base.py``).

The conformance suite costs minutes (vLLM import, engine tests); this one runs in
about a second. Each connector's behaviour is set by the ``GATE_SUITE`` environment
variable, and, over it, by a ``GATE_SUITE`` file in the tested checkout's ``vllm/``
(so a change and its base can behave differently, as real code does); everything
else (selection, the overlay, the pytest subprocess, JUnit, the verdict) is the gate's.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from kvconform.pipelines.gate import suite_run, tested_vllm

# Each connector's tests: "pass", "fail", "skip" (all skipped), "xfail" (a known bug, expected),
# "error" (a fixture breaks), "lint" (only the static lint runs). A connector not listed gets no tests.
SUITE = textwrap.dedent('''
    import importlib.util
    import os
    import pathlib
    import pytest

    BEHAVIOUR = dict(item.split("=") for item in os.environ["GATE_SUITE"].split(",") if item)
    # the tested checkout's word, where it has one (a file beside the vllm/__init__.py the run imports)
    CHECKOUT = pathlib.Path(importlib.util.find_spec("vllm").origin).with_name("GATE_SUITE")
    if CHECKOUT.is_file():
        BEHAVIOUR.update(item.strip().split("=") for item in CHECKOUT.read_text().split(",") if item.strip())

    @pytest.fixture
    def rig(connector):
        if BEHAVIOUR[connector] == "error":
            raise RuntimeError("the rig could not be built")

    @pytest.mark.parametrize("connector", list(BEHAVIOUR))
    @pytest.mark.parametrize("dtype", ["float16", "float32"])
    def test_roundtrip(rig, connector, dtype):
        behaviour = BEHAVIOUR[connector]
        if behaviour in ("skip", "lint"):
            pytest.skip(f"{connector} needs a package that is not installed")
        if behaviour == "xfail":
            pytest.xfail("known bug: vLLM issue 1234")
        assert behaviour != "fail", "loaded bytes differ from the saved ones"

    @pytest.mark.parametrize("connector", list(BEHAVIOUR))
    def test_lint(connector):
        if BEHAVIOUR[connector] == "skip":
            pytest.skip(f"{connector} needs a package that is not installed")

    def test_platform_facts():
        pass
''')

# Records what the run's process would import as vLLM, as the suite's results plugin does, without
# paying for the import: where ``import vllm`` resolves, and the commit the gate told it.
RECORDER = textwrap.dedent('''
    import importlib.util, json, os, time
    from pathlib import Path

    import pytest

    def pytest_configure(config):
        if "GATE_SUITE_MARKS" in os.environ:
            Path(os.environ["GATE_SUITE_MARKS"], "run-started").write_text(str(time.time()))

    def pytest_collection_modifyitems(items):  # each test's connector, as the suite's plugin records it
        for item in items:
            connector = item.callspec.params.get("connector") if hasattr(item, "callspec") else None
            if connector:
                item.user_properties.append(("kvconform.connector", connector))

    def pytest_sessionstart(session):  # as the suite's session check stops a run where vLLM refuses the platform
        if os.environ.get("GATE_SUITE_REFUSE"):
            raise pytest.UsageError("kvconform: vLLM cannot configure the cpu platform here: " +
                                    os.environ["GATE_SUITE_REFUSE"] + "; no connector was tested")

    def pytest_sessionfinish(session):
        record = {"process": "controller", "file": os.environ.get("GATE_SUITE_VLLM_FILE")
                  or importlib.util.find_spec("vllm").origin,
                  "commit": os.environ.get("KVCONFORM_VLLM_COMMIT"), "build_commit": None}
        # what the suite's session found it cannot drive of this vLLM, as its results plugin records it
        mismatches = [line for line in os.environ.get("GATE_SUITE_CANNOT_DRIVE", "").split("|") if line]
        junit = Path(session.config.option.xmlpath)
        junit.with_name("results.json").write_text(json.dumps({"runs": [{"vllm_imports": [record],
                                                                        "vllm_mismatches": mismatches}]}))
''')

# The gate's import probe, minus the import (seconds of torch): where ``import vllm`` resolves.
CHEAP_PROBE = textwrap.dedent('''
    import importlib.util, json, os
    print(json.dumps({"process": "probe", "file": importlib.util.find_spec("vllm").origin,
                      "commit": os.environ.get("KVCONFORM_VLLM_COMMIT"), "build_commit": None}))
''')
# The same, taking as long as a real import would, and saying when it ended.
SLOW_PROBE = textwrap.dedent('''
    import os, pathlib, time
    time.sleep(3)
    pathlib.Path(os.environ["GATE_SUITE_MARKS"], "probe-ended").write_text(str(time.time()))
''') + CHEAP_PROBE


@pytest.fixture
def small_suite(tmp_path, monkeypatch):
    """Point the gate's pytest run at the small suite; returns a list of the commands it built."""
    suite = tmp_path / "suite" / "test_small_suite.py"
    suite.parent.mkdir()
    suite.write_text(SUITE)
    (suite.parent / "conftest.py").write_text(RECORDER)
    built = []
    real_command = suite_run.suite_argv

    def command(platform, connectors, results, python=sys.executable, keyword=None) -> list[str]:
        real = real_command(platform, connectors, results, python, keyword)
        built.append(real)
        return [python, "-m", "pytest", str(suite), "-p", "no:cacheprovider", *(["-k", keyword] if keyword else []),
                "-q", *[word for word in real if word.startswith("--junitxml=")]]

    monkeypatch.setattr(suite_run, "suite_argv", command)
    monkeypatch.setattr(tested_vllm, "PROBE", CHEAP_PROBE)
    # no installed plugins in the small run: kvconform's would probe accelerators and import torch
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return built


def run_gate(gate, repo, head, monkeypatch, behaviour: str, *extra: str):
    monkeypatch.setenv("GATE_SUITE", behaviour)
    return gate("--repo", str(repo.path), "--base", repo.base, "--head", head, "--run", "--platform=cpu", *extra)
