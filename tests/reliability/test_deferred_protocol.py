"""The test protocol ``reliability/held_reports.py`` builds from pytest's public hooks gives what pytest's own does.

Two real pytest sessions of the same small suite: one with kvconform's protocol
(a kvconform run: ``--platform=cpu``), one with pytest's own (``--setup-show``,
under which the plugin leaves the protocol to pytest). Each test's outcome, the
exceptions offered to ``pytest_exception_interact`` (a failure, not a skip or an
xfail) and a module fixture's teardown, with and without ``-x``, are the same in
both.
"""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

SUITE = """
import pytest

@pytest.fixture(scope="module")
def shared():
    yield
    with open("torn_down.txt", "a") as handle:
        print("module fixture", file=handle)

@pytest.fixture
def broken_setup():
    raise ValueError("no device")

@pytest.fixture
def broken_teardown():
    yield
    raise OSError("busy")

def test_passes(shared):
    pass

def test_fails(shared):
    assert False, "loaded bytes differ"

def test_skips(shared):
    pytest.skip("not on this runner")

@pytest.mark.xfail(reason="known bug")
def test_xfails(shared):
    raise RuntimeError("known")

def test_setup_error(shared, broken_setup):
    pass

def test_teardown_error(shared, broken_teardown):
    pass
"""

RECORDER = """
import json

INTERACT = []

def pytest_exception_interact(node, call, report):
    INTERACT.append([node.name, call.when])

def pytest_sessionfinish(session):
    with open("interact.json", "w") as handle:
        json.dump(INTERACT, handle)
"""


def _run(pytester: pytest.Pytester, *args: str) -> tuple[dict[str, int], list[list[str]], str]:
    pytester.path.joinpath("torn_down.txt").write_text("")
    pytester.makepyfile(test_small=SUITE)
    pytester.makeconftest(RECORDER)
    pytester.path.joinpath("none.yaml").write_text("platform: cpu\nexpectations: []\n")
    result = pytester.runpytest("-p", "kvconform.conformance.plugin.expectations",
                                "--kvconform-expectations", "none.yaml", "--platform=cpu", "-p", "no:cacheprovider",
                                "-rA", *args)
    return (result.parseoutcomes(), json.loads(pytester.path.joinpath("interact.json").read_text()),
            pytester.path.joinpath("torn_down.txt").read_text())


@pytest.mark.parametrize("extra", [[], ["-x"]], ids=["all", "exitfirst"])
def test_kvconforms_protocol_matches_pytests_own(pytester, extra):
    ours = _run(pytester, *extra)
    theirs = _run(pytester, "--setup-show", *extra)
    assert ours == theirs
    outcomes, interact, torn_down = ours
    assert torn_down == "module fixture\n"
    if extra:  # stopped at the first failure
        assert outcomes == {"passed": 1, "failed": 1}
        assert interact == [["test_fails", "call"]]
    else:
        assert outcomes == {"passed": 2, "failed": 1, "skipped": 1, "xfailed": 1, "errors": 2}
        assert interact == [["test_fails", "call"], ["test_setup_error", "setup"], ["test_teardown_error", "teardown"]]
