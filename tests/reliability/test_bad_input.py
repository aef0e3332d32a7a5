"""Bad input to the pytest plugin: one line naming the problem, exit status 4 (pytest's usage error), no traceback.

Covers what the plugin itself validates, end to end in a real (in-process) pytest
session: third-party ``--connector module:Class`` specs, ``--profiles`` files, and
the reliability options. Unknown connector names, the CLI commands' own bad input
(lanes, expectations, gate, report, lint) are covered beside their code.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TRIVIAL = "def test_nothing():\n    pass\n"
PROFILES = {
    "typo.yaml": "connectors:\n  ExampleConnector:\n    extra_confg: {}\n",
    "broken.yaml": "connectors:\n  ExampleConnector: [\n",
}

BAD_INPUT = {
    "module does not import": (
        ["--connector", "no_such_module_xyz:Thing"],
        "--connector no_such_module_xyz:Thing: module 'no_such_module_xyz' does not import: "
        "ModuleNotFoundError: No module named 'no_such_module_xyz'"),
    "no such class": (["--connector", "json:Nope"], "--connector json:Nope: module 'json' has no attribute 'Nope'"),
    "not a connector": (
        ["--connector", "json:JSONDecoder"],
        "--connector json:JSONDecoder: JSONDecoder is not a KV connector (not a subclass of KVConnectorBase_V1)"),
    "no class name": (["--connector", "json:"], "--connector 'json:': expected package.module:ClassName"),
    "profile key typo": (["--connector", "ExampleConnector", "--profiles", "typo.yaml"],
                         "typo.yaml:3: connectors.ExampleConnector.extra_confg: Extra inputs are not permitted"),
    "profile not YAML": (["--connector", "ExampleConnector", "--profiles", "broken.yaml"],
                         "broken.yaml:3: not valid YAML: expected the node content, but found '<stream end>'"),
    "profile missing": (["--profiles", "missing.yaml"], "missing.yaml: cannot read: No such file or directory"),
    "negative timeout": (["--kvconform-timeout=-1"], "--kvconform-timeout -1: expected a number of seconds >= 0"),
    "zero wait scale": (["--kvconform-wait-scale=0"], "--kvconform-wait-scale 0: expected a factor above 0"),
    "storage line short": (["-o", "kvconform_default_storage=MyConnector /tmp"],
                           "kvconform_default_storage: 'MyConnector /tmp': expected CONNECTOR FOLDER REGEX"),
    "storage regex bad": (["-o", "kvconform_default_storage=MyConnector /tmp ["],
                          "kvconform_default_storage: 'MyConnector /tmp [': bad regex: unterminated character set"),
}


@pytest.fixture(scope="module", autouse=True)
def vllm_imported():
    """vLLM imported here, before any in-process session: pytester drops modules a session imported, and
    vLLM registers torch types at import that cannot be registered twice."""
    import vllm.distributed.kv_transfer.kv_connector.factory  # noqa: F401


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_trivial=TRIVIAL)
    for name, text in PROFILES.items():
        pytester.path.joinpath(name).write_text(text)
    return pytester.runpytest("-p", "kvconform.conformance.reliability", "--platform=cpu",
                              "-p", "no:cacheprovider", *args)


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_line_and_a_usage_error(pytester, case):
    args, message = BAD_INPUT[case]
    result = _run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines[-20:] + result.errlines[-20:]
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: {message}"), result.errlines
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("args,line", [
    ((), "kvconform: per-test timeout 300 s"),
    (("--kvconform-timeout=45",), "kvconform: per-test timeout 45 s"),
    (("--kvconform-timeout=0",), "kvconform: per-test timeout off (--kvconform-timeout 0)"),
    (("--timeout=7",), "kvconform: per-test timeout pytest-timeout's --timeout"),
    ((), "kvconform: crash isolation off: a connector that crashes the process ends the run (run with -n 1)"),
])
def test_the_header_says_how_hangs_and_crashes_are_handled(pytester, args, line):
    result = _run(pytester, "--collect-only", *args)
    assert result.ret == pytest.ExitCode.OK
    assert line in result.outlines


SLOW_TESTS = """
import time

def test_slow_check(connector):
    time.sleep(4)

def test_slow_other():
    time.sleep(2)
"""


def test_the_timeout_applies_to_conformance_tests_only_and_names_the_connector(pytester):
    """Runs in this process: pytest-timeout's signal method interrupts the sleep in the main thread."""
    pytester.makepyfile(test_slow=SLOW_TESTS)
    result = pytester.runpytest("-p", "kvconform.conformance.reliability", "--platform=cpu", "-p", "no:cacheprovider",
                                "--connector", "ExampleConnector", "--kvconform-timeout=1", "-rf", "-vv")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED *test_slow_check*ExampleConnector* - ExampleConnector did not finish "
                                 "the test's call within 1 s (per-test timeout; change it with --kvconform-timeout)"])
