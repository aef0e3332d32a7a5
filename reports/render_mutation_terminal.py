"""``kvconform mutate``'s summary as plain text, 120 columns: what the command prints when it ends.

It reads like the run report's terminal text (``render_terminal``): counts with their words, in a table per
module, then only what asks for work: the functions where a mutant survived, and each survivor as the change no
check noticed (its id, where it is, its operator and its diff). The score line comes last, where a terminal's
last screen shows it. The words and figures here (``FATE_WORDS``, ``score_text``, ``run_facts``) are the HTML
page's too (``render_mutation_html``), so both say the same.
"""

from __future__ import annotations

import textwrap

from .mutants import FATES, MutationRun, Tally
from .outcomes import ORDER
from .render_terminal import text_table

WIDTH = 120
# each fate as a report's column names it, in FATES' order: detected first, then what the run could not judge
FATE_WORDS: dict[str, str] = {"killed": "killed", "timed_out": "timed out", "survived": "survived",
                              "not_reached": "not reached", "not_viable": "not viable"}
SCORE_HEADER = "score"
INDENT = "  "
# the first column's width in the tables: what the count columns (the score's as wide as "100.0%") and their gaps
# leave of WIDTH
NAME_WIDTH = WIDTH - sum(max(len(word), len("100.0%")) + 2 for word in (*FATE_WORDS.values(), SCORE_HEADER))


def score_text(tally: Tally) -> str:
    """``65.0%``, or ``-`` where no test reached any mutant."""
    return "-" if tally.score is None else f"{100 * tally.score:.1f}%"


def tally_cells(tally: Tally) -> list[str]:
    """A table row's counts, one per fate, then the score."""
    return [*(str(tally.counts.get(fate, 0)) for fate in FATES), score_text(tally)]


def tally_parts(tally: Tally) -> list[str]:
    """``12 killed``, ``7 survived``: the fates that occurred, each with its count."""
    return [f"{tally.counts[fate]} {FATE_WORDS[fate]}" for fate in FATES if tally.counts.get(fate)]


def score_line(tally: Tally) -> str:
    """``score 65.0% (13 of 20 reached mutants detected)``."""
    return f"score {score_text(tally)} ({tally.detected} of {tally.reached} reached mutants detected)"


def duration_text(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m {rest:02d}s" if minutes else f"{seconds:.1f}s"


def run_facts(run: MutationRun) -> list[str]:
    """What was mutated and how: platform and vLLM, the sample, the duration, the unchanged code's outcomes and
    the diff that restricted the lines."""
    sample = "every reached mutant" if run.sample is None else f"a sample of {run.sample} reached mutants"
    if run.floor_row is not None:
        sample = f"the mutants {run.floor_row} lists for it, first drawn as {sample}"
    ranked = sorted(run.baseline.items(), key=lambda item: ORDER.index(item[0]) if item[0] in ORDER else len(ORDER))
    baseline = ", ".join(f"{n} {outcome}" for outcome, n in ranked)
    return [f"{run.platform}, vLLM {run.vllm}", f"{sample} (seed {run.seed})", f"{len(run.mutants)} mutants in "
            f"{duration_text(run.duration)}", *([f"the unchanged code: {baseline}"] if baseline else []),
            *([f"lines restricted to the diff {run.changed_lines}"] if run.changed_lines else [])]


def _fit(line: str) -> list[str]:
    """A line of at most ``WIDTH`` columns, or the line folded, its continuations indented two more columns."""
    line = line.rstrip()
    if len(line) <= WIDTH:
        return [line]
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.wrap(line, WIDTH, subsequent_indent=indent, replace_whitespace=False, break_on_hyphens=False)


def _clipped(name: str) -> str:
    """A module or function name that fits the tables' first column: its end, where the file and function are."""
    return name if len(name) <= NAME_WIDTH else "..." + name[-(NAME_WIDTH - 3):]


def _header(run: MutationRun) -> list[str]:
    where, *how = run_facts(run)
    return [f"kvconform mutate: {run.connector} on {where}", "; ".join(how), ""]


def _modules(run: MutationRun) -> list[str]:
    words = list(FATE_WORDS.values())
    rows = [["module", *words, SCORE_HEADER]]
    rows += [[_clipped(module), *tally_cells(run.tally(module))] for module in run.modules]
    rows.append(["all modules", *tally_cells(run.tally())])
    return [*text_table(rows), ""]


def _functions(run: MutationRun) -> list[str]:
    rows = []
    for module in run.modules:
        functions = [f for f in run.functions(module) if run.tally(module, f).counts.get("survived")]
        rows += [[_clipped(module), *[""] * (len(FATES) + 1)]] if functions else []
        rows += [[_clipped(INDENT + f), *tally_cells(run.tally(module, f))] for f in functions]
    if not rows:
        return []
    return ["functions where a mutant survived:", *text_table([["function", *FATE_WORDS.values(), SCORE_HEADER],
                                                                *rows]), ""]


def _survivors(run: MutationRun) -> list[str]:
    survivors = run.survivors()
    if not survivors:
        return []
    lines = [f"survivors ({len(survivors)}): changes no check noticed"]
    for m in survivors:
        ran = f"{m.tests} test{'s' if m.tests != 1 else ''} ran"
        lines += [f"{INDENT}{m.id}", f"{INDENT * 2}{m.module}:{m.line}  {m.function}  {m.operator}  ({ran})"]
        lines += [f"{INDENT * 3}{diff_line}" for diff_line in m.diff.splitlines()]
    return [*lines, ""]


def render(run: MutationRun) -> str:
    """The summary of ``run``: its facts, the tallies per module, the functions with survivors, each survivor, the
    score."""
    lines = [*_header(run), *_modules(run), *_functions(run), *_survivors(run),
             f"total: {', '.join(tally_parts(run.tally())) or 'no mutants'}; {score_line(run.tally())}"]
    return "\n".join(folded for line in lines for folded in _fit(line))
