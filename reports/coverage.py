"""Connector coverage as people read it: the HTML report's section and ``kvconform report --uncovered``.

The numbers are the results' ``coverage`` section (``--kvconform-coverage``; ``model.ConnectorCoverage``):
per connector, coverage.py's percentage with branches over the connector's own modules, and the lines no
test of it ran grouped by function, so a connector's author sees which of their code the suite never
reached. Every name and path goes through ``html.escape``: a third-party connector names its own files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from html import escape

from .model import ConnectorCoverage, ModuleCoverage, Results

EXIT = "exit"  # how a branch that leaves its function reads (coverage.py records it as a negative line)

# a module's path -> its explained lines: (what they are, "120-140", why), from a coverage floor file
Explanations = Callable[[str], list[tuple[str, str, str]]]


class CoverageLookupError(Exception):
    """``--uncovered`` names a connector the results have no coverage for; the message is one line."""


def line_ranges(lines: Iterable[int]) -> str:
    """``[3, 4, 5, 9]`` as ``3-5, 9``."""
    spans: list[list[int]] = []
    for line in sorted(set(lines)):
        if spans and line == spans[-1][1] + 1:
            spans[-1][1] = line
        else:
            spans.append([line, line])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _branch(source: int, destination: int) -> str:
    return f"{source}->{destination if destination > 0 else EXIT}"


def _counts(module: ModuleCoverage) -> str:
    return (f"{module.covered_statements} of {module.statements} statements, "
            f"{module.covered_branches} of {module.branches} branches")


def summary_line(connector: ConnectorCoverage) -> str:
    """``NixlConnector (cpu): 41.2% of its own code (14 modules); 9 shared modules reached``."""
    own = connector.own
    shared = len(connector.modules) - len(own)
    return (f"{connector.connector} ({connector.platform}): {connector.percent:.1f}% of its own code "
            f"({len(own)} module{'s' * (len(own) != 1)})" + (f"; {shared} shared module{'s' * (shared != 1)} reached"
                                                             if shared else ""))


def _module_text(module: ModuleCoverage, explain: Explanations | None = None) -> list[str]:
    lines = [f"  {module.path}  {module.percent:.1f}% ({_counts(module)})"]
    lines += [f"    {group.function}: {line_ranges(group.lines)}" for group in module.missing]
    if module.missing_branches:
        lines.append(f"    branches never taken: {', '.join(_branch(a, b) for a, b in module.missing_branches)}")
    if explain is not None and module.own:
        lines += [f"    {kind}: {span}: {why}" for kind, span, why in explain(module.path)]
    return lines


def uncovered_text(results: Results, connector: str, explain: Explanations | None = None) -> str:
    """What ``kvconform report --uncovered CONNECTOR`` prints: per platform, the connector's figure, then each
    module's lines that no test ran, by function (its own modules first, then the shared code it reached), and
    under each own module the lines ``explain`` says why no run reaches."""
    entries = [c for c in results.coverage if c.connector == connector]
    if not entries:
        if not results.coverage:
            raise CoverageLookupError("these results have no coverage: run the suite with --kvconform-coverage "
                                      "and --kvconform-json PATH, then pass that file")
        known = sorted({c.connector for c in results.coverage})
        raise CoverageLookupError(f"no coverage for {connector!r} in these results; connectors with coverage: "
                                  f"{', '.join(known)}")
    out: list[str] = []
    for entry in entries:
        out.append(f"{summary_line(entry)}; lines and branches no test ran, by function:")
        for title, modules in (("its own modules", entry.own),
                               ("shared code its tests reached (not counted)", [m for m in entry.modules
                                                                                if not m.own])):
            if modules:
                out.append(f" {title}:")
                out += [line for module in modules for line in _module_text(module, explain)]
    return "\n".join(out)


_STYLE = """<style>
#coverage td.pct { text-align: right; } #coverage-details pre { max-height: 30em; }
</style>"""


def _module_html(module: ModuleCoverage) -> str:
    rows = "".join(f"<tr><td><code>{escape(g.function)}</code></td><td>{escape(line_ranges(g.lines))}</td></tr>"
                   for g in module.missing)
    branches = (f"<p>branches never taken: {escape(', '.join(_branch(a, b) for a, b in module.missing_branches))}"
                f"</p>" if module.missing_branches else "")
    table = f"<table><tr><th>function</th><th>lines no test ran</th></tr>{rows}</table>" if rows else ""
    return (f"<details><summary><code>{escape(module.path)}</code> {module.percent:.1f}% "
            f"({escape(_counts(module))})</summary>{table}{branches}</details>")


def _connector_html(connector: ConnectorCoverage) -> str:
    shared = [m for m in connector.modules if not m.own]
    return (f"<details><summary>{escape(connector.connector)} ({escape(connector.platform)}): "
            f"{connector.percent:.1f}%</summary>{''.join(map(_module_html, connector.own))}"
            + (f"<p>shared code its tests reached (not counted):</p>{''.join(map(_module_html, shared))}"
               if shared else "") + "</details>")


def html_section(results: Results) -> str:
    """The HTML report's coverage section: a table of each connector's figure per platform, then, folded, its
    modules with the lines no test ran grouped by function; empty where the results have no coverage."""
    if not results.coverage:
        return ""
    rows = "".join(
        f"<tr><td>{escape(c.platform)}</td><td>{escape(c.connector)}</td><td class=\"pct\">{c.percent:.1f}%</td>"
        f"<td class=\"pct\">{len(c.own)}</td><td class=\"pct\">{len(c.modules) - len(c.own)}</td></tr>"
        for c in results.coverage)
    details = "".join(map(_connector_html, results.coverage))
    return (f'{_STYLE}<h2>Connector coverage</h2><p>Lines and branches of each connector\'s own modules that its '
            f'tests ran (coverage.py, with branches); shared code its tests reached is listed, not counted.</p>'
            f'<table id="coverage"><tr><th>platform</th><th>connector</th><th>covered</th><th>own modules</th>'
            f'<th>shared reached</th></tr>{rows}</table>'
            f'<div id="coverage-details">{details}</div>')
