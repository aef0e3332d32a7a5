"""``kvconform lint [PATH ...] [--json] [--select RULES] [--ignore RULES]``.

Finds hard-coded device assumptions (``.cuda()``, ``"cuda"``, unguarded
``torch.cuda`` calls, MLA detected by metadata class) in connector source
without importing it, so a connector for any platform is checked on any machine.
Exit status: 1 when an error-severity finding remains, 0 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from kvconform.errors import UserError

from .findings import Finding, lint_files
from .paths import LintPathError, default_connector_dir, python_files
from .rules import RULES, SEVERITIES


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="files or folders to lint (folders are walked for *.py; "
                        "default: the installed vLLM's kv_connector package)")
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


def run(args: argparse.Namespace) -> int:
    rules = selected_rules(args.select, args.ignore)
    try:
        files = python_files(args.paths or [default_connector_dir()])
    except LintPathError as exc:
        raise UserError(str(exc)) from None
    findings = lint_files(files, rules)
    if args.json:
        print(json.dumps([f.as_dict() for f in findings], indent=2))
    else:
        for finding in findings:
            print(finding.render())
        print(summary(len(files), findings))
    return 1 if any(f.severity == "error" for f in findings) else 0
