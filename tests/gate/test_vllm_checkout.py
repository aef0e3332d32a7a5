"""The gate tests' git helper: a failed setup step says what git said."""

import pytest

from tests.gate.vllm_checkout import GitFailed, git


def test_a_failed_git_command_quotes_git(tmp_path):
    git(tmp_path, "init", "-q")
    with pytest.raises(GitFailed, match=r"git checkout -q no-such-branch \(in .+\) exited 1: "
                                        r"error: pathspec 'no-such-branch' did not match"):
        git(tmp_path, "checkout", "-q", "no-such-branch")


def test_output_is_stripped_unless_asked(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "f").write_text("x\n")
    git(tmp_path, "add", "f")
    git(tmp_path, "commit", "-q", "-m", "one")
    assert git(tmp_path, "show", "HEAD:f") == "x"
    assert git(tmp_path, "show", "HEAD:f", strip=False) == "x\n"
