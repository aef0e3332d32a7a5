"""A lint entry pins its findings, not their lines (pytester sessions with the expectations plugin).

The fake lint check lints a snippet with the real lint and fails as ``conformance/test_lint.py`` does
(``lint_failure``); the entry lists the snippet's one finding by rule, file, function and call. The
same finding at other lines is still the expected failure; an extra finding, or one gone, fails the
test and says which; all gone is an unexpected pass, as for any strict xfail.
"""

from __future__ import annotations

import pytest

from tests.expectations.test_expectations_plugin import _expectations, _run, tested_vllm  # noqa: F401 (a fixture)

pytest_plugins = ["pytester"]

FAKE_LINT = '''
import pytest
from pathlib import Path

from kvconform.conformance.lint import lint_source
from kvconform.conformance.test_lint import lint_failure

pytestmark = pytest.mark.check("lint")

FOUND = """
import torch


class Worker:
    def register(self, caches):
        self.stream = torch.cuda.Stream()
"""
VARIANTS = {
    "as-found": FOUND,
    "edited-above": "import os\\n\\n\\nLIMIT = 3  # an unrelated edit above the finding\\n" + FOUND,
    "one-more": FOUND + "        torch.cuda.synchronize()\\n",
    "moved-function": FOUND.replace("def register", "def initialize"),
    "fixed": FOUND.replace("torch.cuda.Stream()", "torch.Stream()"),
}


@pytest.mark.parametrize("variant", VARIANTS, ids=[f"cpu-Snippet-{v}" for v in VARIANTS])
def test_lint(variant):
    errors = [f for f in lint_source(VARIANTS[variant].encode(), Path("vllm/worker.py")) if f.severity == "error"]
    if errors:
        places = ", ".join(f"{f.path}:{f.line} {f.rule}" for f in errors)
        raise lint_failure(f"Snippet: {len(errors)} lint error(s) in vllm/worker.py: {places}", errors)
'''

# written at line 3 of exp.yaml, after platform: and expectations:
ENTRY = """
  - test: "*test_lint[cpu-Snippet-*]"
    expect: xfail
    class: bug
    reason: torch.cuda.Stream() unguarded
    link: https://github.com/vllm-project/vllm/issues/3
    raises: Failed
    findings:
      - {rule: KVC004, file: vllm/worker.py, function: Worker.register, call: torch.cuda.Stream}
"""


@pytest.fixture
def lint_run(pytester):
    pytester.makepyfile(test_lint=FAKE_LINT)
    exp = _expectations(pytester, ENTRY)
    return _run(pytester, "--kvconform-expectations", exp)


def test_the_same_finding_at_other_lines_is_the_expected_failure(lint_run):
    lint_run.stdout.fnmatch_lines(["XFAIL *test_lint[[]cpu-Snippet-as-found[]]*",
                                   "XFAIL *test_lint[[]cpu-Snippet-edited-above[]]*"])


@pytest.mark.parametrize(("variant", "why"), [
    ("one-more", "its lint findings differ from the entry's (not in the entry: "
                 "KVC004 vllm/worker.py Worker.register: torch.cuda.synchronize)"),
    ("moved-function", "its lint findings differ from the entry's (not in the entry: KVC004 vllm/worker.py "
                       "Worker.initialize: torch.cuda.Stream, expected but not found: KVC004 vllm/worker.py "
                       "Worker.register: torch.cuda.Stream)"),
])
def test_a_new_or_a_missing_finding_fails_and_names_it(lint_run, variant, why):
    entry = "exp.yaml:3 (bug: torch.cuda.Stream() unguarded)"
    lint_run.stdout.fnmatch_lines([f"*_ test_lint[[]cpu-Snippet-{variant}[]] _*",
                                   f"not the expected failure of {entry}: {why}"])


def test_all_fixed_is_an_unexpected_pass(tested_vllm, lint_run):  # noqa: F811 (the fixture)
    # on a release CI tests (tested_vllm, set up first); on another it is a note (test_expectations_untested)
    lint_run.stdout.fnmatch_lines(["*unexpectedly passing: remove the entry exp.yaml:3*"])
    lint_run.assert_outcomes(xfailed=2, failed=3)
    assert lint_run.ret == pytest.ExitCode.TESTS_FAILED


def test_an_entry_expecting_a_finding_twice_needs_both(pytester):
    pytester.makepyfile(test_lint=FAKE_LINT)
    exp = _expectations(pytester, ENTRY.replace("call: torch.cuda.Stream}", "call: torch.cuda.Stream, count: 2}"))
    result = _run(pytester, "--kvconform-expectations", exp, "-k", "as-found")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expected but not found: KVC004 vllm/worker.py Worker.register: torch.cuda.Stream)"])


def test_findings_are_pinned_only_against_an_error_that_carries_them(pytester):
    pytester.makepyfile(test_lint=FAKE_LINT.replace("raise lint_failure(", "pytest.fail(").replace(
        ", errors)", ", pytrace=False)"))
    exp = _expectations(pytester, ENTRY)
    result = _run(pytester, "--kvconform-expectations", exp, "-k", "as-found")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*it carries no lint findings, and the entry expects findings*"])
