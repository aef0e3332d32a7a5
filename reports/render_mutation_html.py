"""``kvconform mutate --out DIR``'s HTML page: one mutation run, self-contained.

In the run report's style and for the same reasons (``render_html``): no external assets, its CSS, counts kept
with their words, and every piece of text that comes from source code or a test (diffs, function names, the
killing test's message) escaped. The page reads top down: the score and the run, a table per module with a row
per function, then the survivors with their diffs (the work: a change no check noticed), and last, folded, which
test killed each detected mutant.
"""

from __future__ import annotations

from html import escape

from .mutants import FATES, Mutant, MutationRun
from .render_html import counts_html, page_css
from .render_mutation_terminal import FATE_WORDS, SCORE_HEADER, run_facts, score_line, tally_cells, tally_parts

# each fate's cell colour, on the outcomes' palette: detected as a pass, survived as a failure, the rest grey
FATE_COLOURS: dict[str, str] = {"killed": "#9ad89a", "timed_out": "#c5e6a6", "survived": "#f08a8a",
                                "not_reached": "#d9d9d9", "not_viable": "#ececec"}
# a diff line's first character -> its class in the page
DIFF_CLASSES: dict[str, str] = {"+": "add", "-": "del", "@": "hunk"}

_CSS = """
table.mutation td.n { text-align: right; } table.mutation tr.all > * { font-weight: bold; }
pre.diff span.add { background: #e6ffec; } pre.diff span.del { background: #ffebe9; }
pre.diff span.hunk { color: #666; }
div.survivor { margin: 0.8em 0; } div.survivor p { margin: 0.2em 0; }
""" + "".join(f"td.f-{fate} {{ background: {colour}; }}\n" for fate, colour in FATE_COLOURS.items())


def _diff(diff: str) -> str:
    """A unified diff in a ``<pre>``, its added and removed lines marked."""
    lines = []
    for line in diff.splitlines():
        kind = "" if line.startswith(("+++", "---")) else DIFF_CLASSES.get(line[:1], "")
        lines.append(f'<span class="{kind}">{escape(line)}</span>\n' if kind else escape(line) + "\n")
    return f'<pre class="diff">{"".join(lines)}</pre>'


def _row(name: str, cells: list[str], kind: str = "") -> str:
    """A table row: a name, a count per fate (coloured where not zero), the score."""
    counts = "".join(f'<td class="n{f" f-{fate}" if count != "0" else ""}">{count}</td>'
                     for fate, count in zip(FATES, cells[:-1], strict=True))
    row_class = f' class="{kind}"' if kind else ""
    return (f"<tr{row_class}><th>{escape(name)}</th>{counts}"
            f'<td class="n">{escape(cells[-1])}</td></tr>')


def _module(run: MutationRun, module: str) -> str:
    head = "".join(f"<th>{escape(word)}</th>" for word in (*FATE_WORDS.values(), SCORE_HEADER))
    rows = "".join(_row(f, tally_cells(run.tally(module, f))) for f in run.functions(module))
    total = _row("all functions", tally_cells(run.tally(module)), "all")
    return (f"<h2><code>{escape(module)}</code>: {escape(score_line(run.tally(module)))}</h2>"
            f'<table class="mutation"><thead><tr><th>function</th>{head}</tr></thead><tbody>{rows}{total}</tbody>'
            "</table>")


def _where(m: Mutant) -> str:
    return (f"<code>{escape(m.module)}:{m.line}</code>, <code>{escape(m.function)}</code>, "
            f"<code>{escape(m.operator)}</code>")


def _survivors(run: MutationRun) -> str:
    survivors = run.survivors()
    if not survivors:
        return "<h2>Survivors (0)</h2><p>Every mutant a test reached was detected.</p>"
    items = "".join(f'<div class="survivor" id="{escape(m.id)}"><p><strong><code>{escape(m.id)}</code></strong>: '
                    f"{_where(m)}; {m.tests} test{'s' if m.tests != 1 else ''} ran, every one passed</p>"
                    f"{_diff(m.diff)}</div>" for m in survivors)
    return (f"<h2>Survivors ({len(survivors)})</h2><p>Each is a change to the connector no check noticed: a check "
            f"to add, or a mutant that behaves as the code does (an equivalent mutant).</p>{items}")


def _detected(run: MutationRun) -> str:
    detected = sorted((m for m in run.mutants if m.fate in ("killed", "timed_out")), key=lambda m: (m.module, m.line))
    if not detected:
        return ""
    rows = "".join(f"<tr><td><code>{escape(m.id)}</code></td><td>{_where(m)}</td>"
                   f'<td class="f-{m.fate}">{escape(FATE_WORDS[m.fate])}</td><td>{escape(m.killed_by)}</td></tr>'
                   for m in detected)
    return (f"<h2>Detected ({len(detected)})</h2><details><summary>which test killed each</summary>"
            '<table id="detected"><tr><th>mutant</th><th>where, function, operator</th><th>fate</th>'
            f"<th>killed by</th></tr>{rows}</table></details>")


def render(run: MutationRun) -> str:
    """The page of ``run``."""
    facts = "".join(f"<li>{escape(fact)}</li>" for fact in run_facts(run))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>kvconform mutate: {escape(run.connector)}</title><style>{page_css()}{_CSS}</style></head>
<body>
<h1>kvconform mutate: {escape(run.connector)}: {escape(score_line(run.tally()))}</h1>
<p id="totals">{counts_html(tally_parts(run.tally()), ", ") or "no mutants"}</p>
<ul id="run">{facts}</ul>
{"".join(_module(run, module) for module in run.modules)}
{_survivors(run)}
{_detected(run)}
</body></html>
"""
