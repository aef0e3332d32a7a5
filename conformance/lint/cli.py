"""``kvconform lint [PATH ...] [--connector SPEC ...] [--json] [--select RULES] [--ignore RULES]``.

Finds hard-coded device assumptions (``.cuda()``, ``"cuda"``, unguarded
``torch.cuda`` calls, MLA detected by metadata class) in connector source
without importing it, so a connector for any platform is checked on any machine.
``--connector`` reads what the suite's lint check reads for a connector: the
helpers its module imports (``connector_package.py``, ``closure.py``), not its file alone.
Exit status: 1 when an error-severity finding remains, 0 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

from kvconform.errors import UserError

from ..vllm_install.factory import FactorySourceError, installed_factory_file, parse_registrations
from .closure import Closure
from .connector_package import module_closure
from .findings import Finding, lint_files
from .paths import LintPathError, default_connector_dir, python_files
from .rules import RULES, SEVERITIES

# ``package.module`` or ``package.module:Class``, as the suite's --connector and vLLM's kv_connector_module_path
MODULE_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="files or folders to lint (folders are walked for *.py; "
                        "default: the installed vLLM's kv_connector package)")
    parser.add_argument("--connector", action="append", default=[], metavar="SPEC",
                        help="a connector, with the helpers it imports: package.module[:Class] reads the modules "
                        "of its own package it reaches by import; a name vLLM registers (ExampleConnector) the "
                        "files of vLLM it runs (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the findings as a JSON list")
    parser.add_argument("--select", action="append", default=[], metavar="RULES",
                        help="only these rule ids, comma-separated (repeatable; default: all)")
    parser.add_argument("--ignore", action="append", default=[], metavar="RULES",
                        help="leave out these rule ids, comma-separated (repeatable)")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "rules:\n" + "\n".join(f"  {r.id}  {r.severity:<7}  {r.name}" for r in RULES.values()) + (
        "\nsuppress one on its line with  # kvconform: allow[RULE-ID, ...]")


def _rule_ids(values: list[str], option: str) -> set[str]:
    ids = {part.strip().upper() for value in values for part in value.split(",") if part.strip()}
    unknown = sorted(ids - set(RULES))
    if unknown:
        raise UserError(f"{option}: unknown rule {', '.join(unknown)}; known rules: {', '.join(RULES)}")
    return ids


def selected_rules(select: list[str], ignore: list[str]) -> frozenset[str]:
    chosen = _rule_ids(select, "--select") or set(RULES)
    return frozenset(chosen - _rule_ids(ignore, "--ignore"))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 or noun == "info" else f"{number} {noun}s"


def summary(file_count: int, findings: list[Finding]) -> str:
    """One line: files, findings by severity, and by rule."""
    by_severity = Counter(f.severity for f in findings)
    by_rule = Counter(f.rule for f in findings)
    counts = ", ".join(_count(by_severity[severity], severity) for severity in SEVERITIES)
    rules = f" ({', '.join(f'{rule} {n}' for rule, n in sorted(by_rule.items()))})" if by_rule else ""
    return f"{_count(file_count, 'file')} checked, {_count(len(findings), 'finding')}: {counts}{rules}"


def _registered_module(name: str) -> str | None:
    """The module of the connector vLLM's factory registers as ``name``, read without importing vLLM."""
    factory = installed_factory_file()
    try:
        registry = parse_registrations(factory.read_text(), str(factory)) if factory else {}
    except (OSError, FactorySourceError):
        return None
    return registry.get(name, (None, None))[0]


def connector_closure_of(spec: str) -> Closure:
    """What the lint reads for the connector ``spec`` (``package.module[:Class]``, or a name vLLM registers)."""
    if not MODULE_SPEC.fullmatch(spec):
        raise UserError(f"--connector {spec}: not a connector; give package.module[:Class] or a name vLLM registers")
    module = spec.partition(":")[0]
    if module == spec and "." not in spec:  # a bare name: vLLM's registered connector, else a top-level module
        module = _registered_module(spec) or module
    closure = module_closure(module, search=(Path.cwd(),))  # as ``python -m`` would import it from here
    if closure is None:
        raise UserError(f"--connector {spec}: no Python file of module {module} on this Python's path or in the "
                        "working directory (install its package, or put the folder that holds it on PYTHONPATH)")
    return closure


def _on_disk(path: Path) -> str:
    """``path`` as a reader opens it: relative to the working directory when under it."""
    return os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)


def connector_findings(closures: list[Closure], rules: frozenset[str]) -> list[Finding]:
    """The findings of ``rules`` in what each closure reads, each named by its file on disk."""
    return [replace(f, path=_on_disk(closure.root.absolute() / f.path))
            for closure in closures for f in closure.lint() if f.rule in rules]


def run(args: argparse.Namespace) -> int:
    rules = selected_rules(args.select, args.ignore)
    closures = [connector_closure_of(spec) for spec in args.connector]
    try:
        files = python_files(args.paths or ([] if closures else [default_connector_dir()]))
    except LintPathError as exc:
        raise UserError(str(exc)) from None
    findings = sorted(set(lint_files(files, rules) + connector_findings(closures, rules)))
    checked = {path.resolve() for path in files} | {path.resolve() for c in closures for path in c.paths()}
    if args.json:
        print(json.dumps([f.as_dict() for f in findings], indent=2))
    else:
        for finding in findings:
            print(finding.render())
        print(summary(len(checked), findings))
    return 1 if any(f.severity == "error" for f in findings) else 0
