"""``--changed-lines``' diff parser on real ``git diff`` and ``diff -u`` output: modified, added, deleted and
renamed files, several hunks, names git quotes or ends with a tab, missing final newlines; and on broken diffs,
a one-line ValueError naming what is wrong."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kvconform.conformance.mutation.changed_lines import changed_lines

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed: the diffs come from it")

LETTERS = "".join(f"{c}\n" for c in "abcdefghijklmn")
# path -> (content before, content after); None: the file does not exist on that side
BEFORE_AFTER: dict[str, tuple[str | None, str | None]] = {
    # two hunks: line 2 changed, line 12 changed and 13 added
    "pkg/mod.py": (LETTERS, LETTERS.replace("b\n", "B\n").replace("l\n", "L\nL2\n")),
    "pkg/added.py": (None, "new\nfile\n"),
    "pkg/gone.py": ("x\ny\nz\n", None),
    "pkg/no_newline.py": ("p\nq", "p\nQ"),
    "pkg/only_removed.py": ("1\n2\n3\n", "1\n3\n"),
    "pkg/sp ace.py": ("hi\n", "ho\n"),  # git ends its header with a tab
    "pkg/t\u00e9st.py": ("u\n", "v\n"),  # git quotes it: "b/t\303\251st.py"
}
# renamed with one line changed: git pairs them (similarity 87%), the new path is the one reported
RENAMED = ("pkg/old_name.py", "pkg/new_name.py", "1\n2\n3\n4\n5\n6\n7\n8\n", "1\n2\n3\n4\n5\n6\n7\nEIGHT\n")
EXPECTED = {"pkg/mod.py": {2, 12, 13}, "pkg/added.py": {1, 2}, "pkg/no_newline.py": {2}, "pkg/sp ace.py": {1},
            "pkg/t\u00e9st.py": {1}, "pkg/new_name.py": {8}}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "core.quotepath=true", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def _write(root: Path, files: dict[str, str | None]) -> None:
    for name, text in files.items():
        path = root / name
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository whose index holds every change of ``BEFORE_AFTER`` and ``RENAMED`` over its first commit."""
    root = tmp_path_factory.mktemp("repo")
    _git(root, "init", "-q")
    old, new, before, after = RENAMED
    _write(root, {**{name: pair[0] for name, pair in BEFORE_AFTER.items()}, old: before})
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "before")
    _write(root, {**{name: pair[1] for name, pair in BEFORE_AFTER.items()}, old: None, new: after})
    _git(root, "add", "-A")
    return root


def test_git_diff(repo):
    diff = _git(repo, "diff", "--cached", "-M")
    assert "rename from pkg/old_name.py" in diff and '"b/pkg/t\\303\\251st.py"' in diff and "+++ /dev/null" in diff
    assert "\\ No newline at end of file" in diff and "+++ b/pkg/sp ace.py\t" in diff
    assert changed_lines(diff) == EXPECTED


def test_git_diff_without_prefixes_and_with_more_context(repo):
    assert changed_lines(_git(repo, "diff", "--cached", "-M", "--no-prefix")) == EXPECTED
    # one hunk instead of two; the same lines
    assert changed_lines(_git(repo, "diff", "--cached", "-M", "-U8", "--", "pkg/mod.py")) == {"pkg/mod.py": {2, 12, 13}}


def test_diff_u_of_two_folders(repo, tmp_path):
    """``diff -ruN a b`` (no git): timestamps after a tab, ``a/``/``b/`` as the folders' names."""
    if shutil.which("diff") is None:
        pytest.skip("diff is not installed")
    for side, index in (("a", 0), ("b", 1)):
        _write(tmp_path / side, {name: pair[index] for name, pair in BEFORE_AFTER.items()})
    out = subprocess.run(["diff", "-ruN", "a", "b"], cwd=tmp_path, capture_output=True, text=True).stdout
    expected = {k: v for k, v in EXPECTED.items() if k != "pkg/new_name.py"}
    assert changed_lines(out) == expected


def test_a_removed_line_that_reads_like_a_file_header_stays_in_its_hunk(tmp_path):
    diff = ("--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n--- a/y.py\n++++ b/y.py\n keep\n"
            "@@ -10 +10 @@\n-old\n+new\n")
    assert changed_lines(diff) == {"x.py": {1, 10}}


def test_nothing_to_mutate():
    assert changed_lines("") == {}
    # a pure rename and a mode change: git headers, no hunks
    assert changed_lines("diff --git a/x.py b/y.py\nsimilarity index 100%\nrename from x.py\nrename to y.py\n"
                         "diff --git a/z.sh b/z.sh\nold mode 100644\nnew mode 100755\n") == {}


@pytest.mark.parametrize(("diff", "message"), [
    ("just some text\n", "not a unified diff"),
    ("@@ -1 +1 @@\n-a\n+b\n", "line 1: hunk header before any '---'/'+++' file header"),
    ("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n", "line 3: the hunk '@@ -1,2 +1,2 @@' is cut short: 1 old and 1"),
    ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n", "line 6: an added line outside any hunk"),
    ("--- a/x\n+++ b/x\n@@ -1,2 +1 @@\n-a\n+b\n+c\n", "line 6: the hunk that starts on line 3 has more lines"),
    ("--- a/x\n+++ b/x\n@@ -1 +1\n", "line 3: malformed hunk header '@@ -1 +1'"),
    ("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n*b\n", "line 5: '*b' inside the hunk that starts on line 3"),
    ("+++ b/x\n@@ -1 +1 @@\n", "line 1: a file header without its pair"),
    ('--- "a/x\n+++ "b/x\n', "line 1: unterminated quoted path"),
    ("diff --cc f.py\n--- a/f.py\n+++ b/f.py\n@@@ -1,1 -1,1 +1,1 @@@\n", "line 4: a combined diff"),
])
def test_malformed_diffs_name_what_is_wrong(diff, message):
    with pytest.raises(ValueError) as caught:
        changed_lines(diff)
    text = str(caught.value)
    assert message in text and "\n" not in text, text
