"""``kvconform mutate``'s bad input: one line naming the option, exit status 2, before anything loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvconform.conformance.cli import main


@pytest.mark.parametrize(("options", "message"), [
    (["--sample", "0"], "--sample: 0 must be at least 1"),
    (["--jobs", "-1"], "--jobs: -1 must be at least 1"),
    (["--json", "no/such/folder/m.json"], "--json: the folder of no/such/folder/m.json does not exist"),
    (["--changed-lines", "no-such.diff"], "--changed-lines: cannot read no-such.diff"),
    (["--floor", "no-such.yaml"], "--floor: no-such.yaml does not exist"),
    (["--floor", "floor.yaml", "--sample", "3"],
     "--floor runs the mutants its row lists: --sample and --changed-lines choose others"),
])
def test_bad_options_are_one_line_and_exit_2(options: list[str], message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutate", "--connector", "ExampleConnector", *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvconform mutate: error: {message}") and err.count("\n") == 1


def test_a_diff_that_is_not_one_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    diff = tmp_path / "cut.diff"
    diff.write_text("--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n x\n")  # the hunk announces more than it holds
    assert main(["mutate", "--connector", "ExampleConnector", "--changed-lines", str(diff)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvconform mutate: error: --changed-lines: {diff}: ") and err.count("\n") == 1
