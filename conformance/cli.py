"""The ``kvconform`` command: one table of subcommands, each owned by its module.

Each module named here exposes ``configure(parser)`` and ``run(args) -> int``;
modules are imported only when their subcommand runs, so ``kvconform platforms``
never pays for vLLM or the report renderer.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from kvconform.errors import UserError, one_line

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "platforms": ("kvconform.platforms.cli", "show each platform, whether it is detected and why, and its backends"),
    "pipeline": ("kvconform.pipelines.cli", "write a Buildkite pipeline for a platform"),
    "gate": ("kvconform.pipelines.gate_cli", "decide and run the conformance tests a vLLM change touches"),
    "report": ("kvconform.reports.cli", "render JUnit/JSON results into results.json, summary.md and index.html"),
    "lint": ("kvconform.conformance.lint.cli", "find hard-coded device assumptions in connector source"),
    "bench": ("kvconform.conformance.bench.command",
              "measure connector save/load throughput against the platform baseline"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only ``command``'s own module is imported to configure it."""
    parser = argparse.ArgumentParser(prog="kvconform", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module)
        if name == command:
            importlib.import_module(module).configure(sub_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command if command in SUBCOMMANDS else None).parse_args(argv)
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except UserError as exc:
        print(f"kvconform {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
