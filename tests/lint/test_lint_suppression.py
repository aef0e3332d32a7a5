"""Inline suppressions: ``# kvconform: allow[RULE, ...]`` on the finding's line, for the rules it names."""

from __future__ import annotations

import pytest

from kvconform.conformance.lint.suppressions import allowed_rules


@pytest.mark.parametrize("code", [
    "kv = x.cuda()  # kvconform: allow[KVC001]",
    "kv = x.cuda()  # kvconform: allow[KVC004, KVC001]",
    "kv = x.cuda()  # reviewed, see #123 -- kvconform: allow[KVC001]",
    "kv = x.cuda()  #kvconform:allow[ KVC001 ]",
])
def test_a_comment_naming_the_rule_suppresses_it(rules_in, code):
    assert rules_in(code) == []


@pytest.mark.parametrize("code", [
    "kv = x.cuda()  # kvconform: allow[KVC004]",
    "kv = x.cuda()  # kvconform: allow[]",
    "kv = x.cuda()  # kvconform: allow",
    "# kvconform: allow[KVC001]\nkv = x.cuda()",
    "kv = x.cuda(); note = '# kvconform: allow[KVC001]'",
])
def test_other_rules_other_lines_and_strings_suppress_nothing(rules_in, code):
    assert rules_in(code) == ["KVC001"]


def test_only_the_named_rule_is_suppressed_on_a_line(rules_in):
    code = "import torch\ns = torch.cuda.Stream(); kv = x.cuda()  # kvconform: allow[KVC004]"
    assert rules_in(code) == ["KVC001"]


def test_a_multiline_call_is_suppressed_on_the_line_it_is_reported(lint):
    code = ("kv = (load(f)\n      .cuda())  # kvconform: allow[KVC001]\n"
            "kv2 = (load(f)  # kvconform: allow[KVC001]\n      .cuda())")
    assert lint(code) == [("KVC001", 4)]


def test_allowed_rules_maps_lines_to_rule_ids():
    source = b"a = 1  # kvconform: allow[KVC001,KVC004]\nb = 2\nc = 3  # kvconform: allow[KVC006]\n"
    assert allowed_rules(source) == {1: frozenset({"KVC001", "KVC004"}), 3: frozenset({"KVC006"})}
