"""``kvconform mutate``'s terminal summary and HTML page, from a run built by hand with every fate: both show the
tallies per module and function, the score, each survivor's diff, and the page escapes what comes from source."""

from __future__ import annotations

import re
from html import unescape
from html.parser import HTMLParser

import pytest

from kvconform.reports import render_mutation_html, render_mutation_terminal
from kvconform.reports.model import MODULE_LEVEL
from kvconform.reports.mutants import FATES, Mutant, MutationRun

EXAMPLE = "vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py"
HELPER = "mypkg/helpers.py"
SURVIVOR_DIFF = ("--- a/mypkg/helpers.py\n+++ b/mypkg/helpers.py\n@@ -40,3 +40,3 @@\n def key(tokens):\n"
                 '-    return "<script>alert(1)</script>" + str(len(tokens))\n'
                 '+    return "<script>alert(1)</script>" + str(len(tokens) + 1)\n \n')


def _mutant(module: str, function: str, line: int, fate: str, **extra: object) -> Mutant:
    operator = "core/NumberReplacer"
    diff = extra.pop("diff", f"--- a/{module}\n+++ b/{module}\n@@ -{line} +{line} @@\n-x = 0\n+x = 1\n")
    return Mutant(id=f"{module}:{line}:{operator}:0", module=module, function=function, line=line, operator=operator,
                  diff=str(diff), fate=fate, **extra)  # type: ignore[arg-type]


def _run() -> MutationRun:
    mutants = [
        _mutant(EXAMPLE, "ExampleConnector.start_load_kv", 120, "killed", tests=4,
                killed_by="test_roundtrip[cpu-fp16]: AssertionError: token 0 loaded <wrong> bytes"),
        _mutant(EXAMPLE, "ExampleConnector.start_load_kv", 121, "killed", tests=4, killed_by="test_roundtrip[cpu]"),
        _mutant(EXAMPLE, "ExampleConnector.start_load_kv", 130, "timed_out", tests=2),
        _mutant(EXAMPLE, "ExampleConnector.wait_for_save", 200, "survived", tests=3),
        _mutant(EXAMPLE, MODULE_LEVEL, 10, "not_viable"),
        _mutant(HELPER, "key", 41, "survived", tests=1, diff=SURVIVOR_DIFF),
        _mutant(HELPER, "unused", 60, "not_reached"),
        _mutant(HELPER, "unused", 61, "not_reached"),
    ]
    return MutationRun(connector="ExampleConnector", platform="cpu", vllm="0.32.0", modules=[EXAMPLE, HELPER],
                       mutants=mutants, sample=20, seed=7, duration=192.4, baseline={"passed": 34, "skipped": 2})


def test_a_run_of_a_floor_row_says_so():
    run = _run()
    run.floor_row = "conformance/mutation/floor.yaml"
    assert render_mutation_terminal.run_facts(run)[1] == ("the mutants conformance/mutation/floor.yaml lists for it, "
                                                          "first drawn as a sample of 20 reached mutants (seed 7)")


def test_every_fate_is_in_the_record():
    assert {m.fate for m in _run().mutants} == set(FATES)


def test_terminal_summary():
    text = render_mutation_terminal.render(_run())
    assert all(len(line) <= 120 for line in text.splitlines()), max(text.splitlines(), key=len)
    assert text.startswith("kvconform mutate: ExampleConnector on cpu, vLLM 0.32.0\na sample of 20 reached mutants "
                           "(seed 7); 8 mutants in 3m 12s; the unchanged code: 34 passed, 2 skipped\n")
    # per module: killed, timed out, survived, not reached, not viable, score (3 of 4 reached detected; 0 of 1)
    assert re.search(r"^\.\.\..*/kv_connector/v1/example_connector\.py +2 +1 +1 +0 +1 +75\.0%$", text, re.M), text
    assert re.search(r"^mypkg/helpers\.py +0 +0 +1 +2 +0 +0\.0%$", text, re.M), text
    assert re.search(r"^all modules +2 +1 +2 +2 +1 +60\.0%$", text, re.M), text
    # functions: only those where a mutant survived
    functions = text.split("functions where a mutant survived:")[1].split("survivors (2)")[0]
    assert re.search(r"^  ExampleConnector\.wait_for_save +0 +0 +1 +0 +0 +0\.0%$", functions, re.M), functions
    assert re.search(r"^  key +0 +0 +1 +0 +0 +0\.0%$", functions, re.M), functions
    assert "start_load_kv" not in functions and "unused" not in functions
    # each survivor: id, where, function, operator, its diff indented
    assert f"  {HELPER}:41:core/NumberReplacer:0\n    {HELPER}:41  key  core/NumberReplacer  (1 test ran)\n" in text
    assert '      +    return "<script>alert(1)</script>" + str(len(tokens) + 1)' in text
    assert f"{EXAMPLE}:200  ExampleConnector.wait_for_save" in text
    assert text.endswith("total: 2 killed, 1 timed out, 2 survived, 2 not reached, 1 not viable; score 60.0% "
                         "(3 of 5 reached mutants detected)")


def test_terminal_folds_long_lines_and_says_when_nothing_was_reached():
    long_line = "+    " + "x" * 300
    run = MutationRun(connector="C", platform="cpu", vllm="0.32.0", modules=["m.py"],
                      mutants=[_mutant("m.py", "f", 1, "survived", diff=long_line), _mutant("m.py", "g", 2, "killed")])
    text = render_mutation_terminal.render(run)
    assert all(len(line) <= 120 for line in text.splitlines())
    folded = [line for line in text.splitlines() if "xxx" in line]
    assert len(folded) == 3 and "".join(line.strip() for line in folded).replace(" ", "") == long_line.replace(" ", "")
    empty = MutationRun(connector="C", platform="cpu", vllm="0.32.0", modules=["m.py"],
                        mutants=[_mutant("m.py", "f", 1, "not_reached")])
    text = render_mutation_terminal.render(empty)
    assert re.search(r"^m\.py +0 +0 +0 +1 +0 +-$", text, re.M) and "survivors" not in text
    assert text.endswith("total: 1 not reached; score - (0 of 0 reached mutants detected)")


class _Tags(HTMLParser):
    """The start tags of a page, as a browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def _texts(html: str, tag: str) -> list[str]:
    """The text of each ``tag`` element, its markup removed and its entities decoded."""
    elements = re.findall(rf"<{tag}\b[^>]*>(.*?)</{tag}>", html, re.S)
    return [unescape(re.sub(r"<[^>]+>", "", inner)) for inner in elements]


@pytest.fixture
def page() -> str:
    return render_mutation_html.render(_run())


def test_html_page(page):
    html = page
    parser = _Tags()
    parser.feed(html)
    assert "script" not in parser.tags, "a <script> from a diff reached the page unescaped"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;wrong&gt;" in html
    assert not {"link", "img", "iframe"} & set(parser.tags)  # self-contained
    assert _texts(html, "h1") == ["kvconform mutate: ExampleConnector: score 60.0% (3 of 5 reached mutants detected)"]
    run = " ".join(_texts(html, "li"))
    assert "cpu, vLLM 0.32.0" in run and "a sample of 20 reached mutants (seed 7)" in run and "3m 12s" in run
    headings = _texts(html, "h2")
    assert f"{EXAMPLE}: score 75.0% (3 of 4 reached mutants detected)" in headings
    assert f"{HELPER}: score 0.0% (0 of 1 reached mutants detected)" in headings
    assert "Survivors (2)" in headings and "Detected (3)" in headings


def _rows(html: str) -> list[list[str]]:
    """Each table row's cells, as text."""
    return [[re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", html)]


def test_html_tables_per_module_and_function(page):
    html = page
    rows = _rows(html)
    assert ["ExampleConnector.start_load_kv", "2", "1", "0", "0", "0", "100.0%"] in rows
    assert ["ExampleConnector.wait_for_save", "0", "0", "1", "0", "0", "0.0%"] in rows
    assert [MODULE_LEVEL, "0", "0", "0", "0", "1", "-"] in rows
    assert ["unused", "0", "0", "0", "2", "0", "-"] in rows
    assert ["all functions", "2", "1", "1", "0", "1", "75.0%"] in rows
    assert ["all functions", "0", "0", "1", "2", "0", "0.0%"] in rows
    killed = [r for r in rows if r[2:3] == ["killed"]]
    assert [r[3] for r in killed] == ["test_roundtrip[cpu-fp16]: AssertionError: token 0 loaded &lt;wrong&gt; bytes",
                                      "test_roundtrip[cpu]"]


def test_html_survivors_with_marked_diffs(page):
    html = page
    diffs = re.findall(r'<pre class="diff">(.*?)</pre>', html, re.S)
    assert len(diffs) == 2
    helper = next(d for d in diffs if "helpers.py" in d)
    assert ('<span class="del">-    return &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot; + str(len(tokens))'
            "</span>") in helper
    assert '<span class="add">+    return &quot;&lt;script&gt;' in helper
    assert '<span class="hunk">@@ -40,3 +40,3 @@</span>' in helper
    assert "\n def key(tokens):\n" in helper  # context unmarked
    # the page's text of each diff is the diff, line for line
    assert _texts(html, "pre") == [SURVIVOR_DIFF, _run().mutants[3].diff]


def test_html_without_survivors_says_so():
    run = MutationRun(connector="C", platform="cpu", vllm="0.32.0", modules=["m.py"],
                      mutants=[_mutant("m.py", "f", 1, "killed", killed_by="t")])
    html = render_mutation_html.render(run)
    assert "<h2>Survivors (0)</h2><p>Every mutant a test reached was detected.</p>" in html
    assert "score 100.0% (1 of 1 reached mutants detected)" in html
