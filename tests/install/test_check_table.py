"""Every place that names a check names one of the check table's rows (kvconform/check_table.py), and every row is
named where a check must be: the suite's ``check`` markers, the shipped profiles' ``checks:``, docs/checks.md (a
section per check and a row of its table at a glance), the README's list and the report's columns.

The recipe a new check follows (docs/maintaining.md, "Adding a check") is walked on a throw-away check: its row,
its suite module and a profile listing it satisfy every rule here, and leaving out the row or the docs fails them.
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Iterable
from pathlib import Path

from kvconform.check_table import CHECKS, COLUMN_ORDER, PROFILE_KEYS, CheckRow
from kvconform.conformance.connectors.profiles import PROFILES_FILE, load_profiles
from kvconform.pipelines.gate.printing import where_it_runs
from kvconform.reports.matrix import build_matrix
from kvconform.reports.model import CaseResult, RunInfo, build

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "conformance"
CHECKS_DOC = ROOT / "docs" / "checks.md"
README = ROOT / "README.md"
CHECK_WORD = re.compile(r"[a-z][a-z_]*")


def marked_checks(sources: Iterable[str]) -> set[str]:
    """The checks the ``pytest.mark.check("name")`` markers of these module sources name."""
    names = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "check"
                    and ast.unparse(node.func.value) == "pytest.mark"):
                assert node.args and isinstance(node.args[0], ast.Constant), ast.unparse(node)
                names.add(node.args[0].value)
    return names


def documented_checks(doc: str) -> tuple[set[str], list[str]]:
    """docs/checks.md's check sections (``## name``) and the checks of its table at a glance, in its order."""
    sections = {m.group(1) for m in re.finditer(r"^## (\S+)$", doc, re.M) if CHECK_WORD.fullmatch(m.group(1))}
    glance = doc.split("## Checks at a glance", 1)[1].split("\n## ", 1)[0]
    rows = [m.group(1) for m in re.finditer(r"^\| ([a-z_]+) \|", glance, re.M) if m.group(1) != "check"]
    return sections, rows


def readme_checks(readme: str) -> set[str]:
    section = readme.split("## What it checks", 1)[1].split("\n#", 1)[0]
    return {word for word in re.findall(r"\*\*([^*]+)\*\*", section) if CHECK_WORD.fullmatch(word)}


def profile_checks(path: Path = PROFILES_FILE) -> set[str]:
    profiles = load_profiles(path)
    listed = set(profiles.defaults.checks)
    for profile in profiles.connectors.values():
        listed.update(profile.checks or [])
        for variant in profile.variants.values():
            listed.update(variant.checks or [])
    return listed


def mismatches(table: tuple[CheckRow, ...], markers: set[str], doc: str, readme: str,
               profile_keys: set[str]) -> list[str]:
    """Each place that names a check the table lacks, or lacks a check the table has."""
    names = {row.name for row in table}
    keys = {row.name for row in table if row.gated_by == row.name}
    sections, glance = documented_checks(doc)
    found = [f"{where} names {sorted(extra)}, which the check table lacks"
             for where, extra in (("a check marker", markers - names), ("a profile", profile_keys - keys),
                                  ("docs/checks.md", (sections | set(glance)) - names),
                                  ("the README", readme_checks(readme) - names)) if extra]
    found += [f"{where} lacks {sorted(missing)}, which the check table has"
              for where, missing in (("the suite's check markers", names - markers),
                                     ("docs/checks.md's sections", names - sections),
                                     ("docs/checks.md's table at a glance", names - set(glance)),
                                     ("the README's list", names - readme_checks(readme))) if missing]
    if glance and [name for name in glance if name in names] != [row.name for row in table if row.name in glance]:
        found.append(f"docs/checks.md's table at a glance is not in the table's order: {glance}")
    found += [f"{row.name} is gated by {row.gated_by!r}, which is no check that gates itself"
              for row in table if row.gated_by not in keys]
    return found


def _suite_sources() -> list[str]:
    return [path.read_text() for path in sorted(SUITE.glob("test_*.py"))]


def test_every_place_names_the_table_s_checks_and_no_other():
    assert mismatches(CHECKS, marked_checks(_suite_sources()), CHECKS_DOC.read_text(), README.read_text(),
                      profile_checks()) == []


def test_every_profile_key_is_listed_by_a_shipped_profile():
    assert set(PROFILE_KEYS) <= profile_checks(), "a check that gates itself but that no shipped profile runs"


def test_the_report_s_columns_are_the_table_s_order():
    shuffled = list(COLUMN_ORDER) + ["collection"]
    random.Random(0).shuffle(shuffled)
    tests = [CaseResult(run="cpu", nodeid=f"t{i}", check=check, platform="cpu", backend="CPU_ATTN",
                        connector="C", outcome="passed") for i, check in enumerate(shuffled)]
    assert build_matrix(build([RunInfo(id="cpu", platform="cpu")], tests)).checks == [*COLUMN_ORDER, "collection"]


def test_the_gate_names_every_runtime_check_a_profile_runs():
    # MultiConnector's profile lists lint too, which reads source; the gate's list once left lifecycle out
    assert where_it_runs("MultiConnector") == (
        "its profile runs roundtrip, contract, workload, lifecycle on cuda, rocm, xpu, cpu")


# The recipe, on a throw-away check "warmup" that rides on roundtrip, and one "drain" that gates itself
NEW_SUITE_MODULE = '''
import pytest
pytestmark = pytest.mark.check("drain")

@pytest.mark.check("warmup")
def test_warmup(subject): ...

def test_drain(subject): ...
'''
NEW_DOC_SECTIONS = "\n## warmup\n\nWhat it drives.\n\n## drain\n\nWhat it drives.\n"
NEW_GLANCE_ROWS = "| warmup | what it catches |\n| drain | what it catches |\n"
NEW_README_WORDS = " **warmup** (what it catches), **drain** (what it catches)."


def _with_recipe(doc: str, readme: str) -> tuple[str, str]:
    """docs/checks.md and the README with the new checks' docs: a section each, a row each, a word each."""
    glance = doc.split("## Checks at a glance", 1)[1].split("\n## ", 1)[0]
    last_glance_row = re.findall(r"^\| [a-z_]+ \|.*\n", glance, re.M)[-1]
    doc = doc.replace(last_glance_row, last_glance_row + NEW_GLANCE_ROWS, 1) + NEW_DOC_SECTIONS
    readme = readme.replace("\n## What it checks\n", "\n## What it checks\n" + NEW_README_WORDS, 1)
    return doc, readme


def test_the_recipe_of_a_new_check_is_complete():
    rows = (*CHECKS, CheckRow("warmup", False, "roundtrip", "a check riding on roundtrip"),
            CheckRow("drain", False, "drain", "a check its profile lists"))
    markers = marked_checks([*_suite_sources(), NEW_SUITE_MODULE])
    doc, readme = _with_recipe(CHECKS_DOC.read_text(), README.read_text())
    profiles = profile_checks() | {"drain"}  # its broken copy's profile lists it
    assert mismatches(rows, markers, doc, readme, profiles) == []
    # each step left out is named
    assert mismatches(CHECKS, markers, doc, readme, profiles) == [
        "a check marker names ['drain', 'warmup'], which the check table lacks",
        "a profile names ['drain'], which the check table lacks",
        "docs/checks.md names ['drain', 'warmup'], which the check table lacks",
        "the README names ['drain', 'warmup'], which the check table lacks"]
    assert mismatches(rows, markers, CHECKS_DOC.read_text(), README.read_text(), profiles) == [
        "docs/checks.md's sections lacks ['drain', 'warmup'], which the check table has",
        "docs/checks.md's table at a glance lacks ['drain', 'warmup'], which the check table has",
        "the README's list lacks ['drain', 'warmup'], which the check table has"]
    assert mismatches(rows, marked_checks(_suite_sources()), doc, readme, profiles) == [
        "the suite's check markers lacks ['drain', 'warmup'], which the check table has"]
