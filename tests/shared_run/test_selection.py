"""The shared run's plugin reads a test's connector as the suite's ids spell it (tests/shared_run/selection.py)."""

from __future__ import annotations

import pytest

from tests.shared_run.selection import connector_of

LABELS = ["ExampleConnector", "MultiConnector", "OverwritesPendingSavesMultiConnector"]


@pytest.mark.parametrize(("nodeid", "expected"), [
    ("test_x[cpu-CPU_ATTN-ExampleConnector-fp8]", "ExampleConnector"),
    ("test_x[cpu-CPU_ATTN-MultiConnector]", "MultiConnector"),
    ("test_x[cpu-CPU_ATTN-MultiConnector@late-saves-float16]", "MultiConnector"),  # a profile variant
    ("test_x[cpu-CPU_ATTN-OverwritesPendingSavesMultiConnector@one-step-child]",
     "OverwritesPendingSavesMultiConnector"),  # not the MultiConnector its name ends with
    ("test_x[cpu-CPU_ATTN-NixlConnector-mla]", None),  # a connector the plan does not name
    ("test_lint_package", None),  # no parameters
])
def test_the_connector_of_a_test_id(nodeid, expected):
    assert connector_of(nodeid, LABELS) == expected
