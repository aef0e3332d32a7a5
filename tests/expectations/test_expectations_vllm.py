"""An entry's ``vllm:`` condition: it holds only on the installed vLLM it names, so each tested release
(0.32.0 in make test, 0.33.0 in make test-vllm033) pins its own failure, and an entry for the other
release is neither applied nor reported stale."""

from __future__ import annotations

import pytest

from kvconform.conformance.expectations import Entry
from kvconform.conformance.reliability.vllm_version import installed_vllm
from tests.expectations.test_expectations_plugin import FAKE_SUITE, XFAIL_EXAMPLE, _expectations, _run

pytest_plugins = ["pytester"]

INSTALLED = installed_vllm()[0]


def _for_vllm(version: str) -> str:
    return XFAIL_EXAMPLE.replace("    expect: xfail\n", f'    vllm: "{version}"\n    expect: xfail\n', 1)


@pytest.mark.parametrize("pattern,holds", [(None, True), (INSTALLED, True), ("0.*", True), ("9.9.9", False)])
def test_an_entry_holds_on_the_vllm_it_names(pattern, holds):
    entry = Entry(connector="X", vllm=pattern)
    assert entry.holds_on(INSTALLED) is holds
    assert Entry(connector="X", vllm="0.*").holds_on(None) is False  # no vLLM installed: only unconditioned entries


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
