"""``kvconform mutate``: mutation testing of one connector, with the conformance suite as the oracle.

The order a run takes: check the input; list every mutant of the connector's own modules (``generate``) and keep
those on the lines ``--changed-lines`` names; load the suite once (``warm``); run the baseline with per-test
coverage (``reach``); draw ``--sample`` of the reached mutants, or take the mutation floor's row for the connector
(``--floor``, ``--update-floor``: a fixed set, so that runs compare like for like); run them (``runner``), a progress
line each; write the JSON and the HTML page; print the summary. Exit status 0 once it ran (a survivor is a finding,
not an error), 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kvconform.errors import UserError
from kvconform.reports.mutants import Mutant, MutationRun

from .warm import PLATFORM, OwnModule

if TYPE_CHECKING:
    from kvconform.reports.mutation_floor import ConnectorFloor

DEFAULT_JOBS = 2
JSON_NAME, HTML_NAME = "mutation.json", "index.html"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connector", required=True, metavar="NAME|package.module:Class",
                        help="the connector to mutate: a registered name, or a third-party connector's class")
    parser.add_argument("--sample", type=int, metavar="N", help="run N of the reached mutants, drawn at random")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="the seed of --sample's draw (default: 0)")
    parser.add_argument("--changed-lines", type=Path, metavar="DIFF",
                        help="a unified diff: mutate only the lines it adds or changes")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the run as JSON to FILE")
    parser.add_argument("--out", type=Path, metavar="DIR", help=f"write {HTML_NAME} and {JSON_NAME} into DIR")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, metavar="J",
                        help=f"mutants run at once (default: {DEFAULT_JOBS})")
    floor = parser.add_mutually_exclusive_group()
    floor.add_argument("--floor", type=Path, metavar="FILE",
                       help="run the mutants of the connector's row in the mutation floor FILE "
                            "(conformance/mutation/floor.yaml) and hold them to it: exit 1 where a detected mutant "
                            "is not detected now or a survivor is not explained there")
    floor.add_argument("--update-floor", type=Path, metavar="FILE",
                       help="run the mutants of the connector's row in the mutation floor FILE (a new draw where "
                            "--sample is given or there is no row) and write the run as its row, keeping the reasons "
                            "it gives")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS",
                        help="arguments for pytest, after --, passed to every run of the suite")


def _check(args: argparse.Namespace) -> dict[str, set[int]] | None:
    """The options' values checked; the lines of ``--changed-lines`` (None without it)."""
    for option, value in (("--sample", args.sample), ("--jobs", args.jobs)):
        if value is not None and value < 1:
            raise UserError(f"{option}: {value} must be at least 1")
    if args.json is not None and not args.json.resolve().parent.is_dir():
        raise UserError(f"--json: the folder of {args.json} does not exist")
    if args.floor is not None and (args.sample is not None or args.changed_lines is not None):
        raise UserError("--floor runs the mutants its row lists: --sample and --changed-lines choose others "
                        "(--update-floor --sample N draws the row anew)")
    if args.floor is not None and not args.floor.is_file():
        raise UserError(f"--floor: {args.floor} does not exist")
    if args.pytest_args[:1] == ["--"]:
        args.pytest_args = args.pytest_args[1:]
    try:
        import cosmic_ray  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        raise UserError("kvconform mutate needs cosmic-ray: pip install 'kvconform[mutate]'") from None
    if args.changed_lines is None:
        return None
    from .changed_lines import changed_lines

    try:
        return changed_lines(args.changed_lines.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--changed-lines: cannot read {args.changed_lines}: {exc}") from None
    except ValueError as exc:
        raise UserError(f"--changed-lines: {args.changed_lines}: {exc}") from None


def own_modules(spec: str) -> list[OwnModule]:
    """The connector's own modules (the coverage scope's), or a UserError naming what is wrong with ``spec``."""
    from ..connectors.selection import ConnectorSpecError, resolve_connectors
    from ..coverage.scope import Scope
    from .warm import own_module

    try:
        [param] = resolve_connectors([spec])
    except ConnectorSpecError as exc:
        raise UserError(str(exc)) from None
    scope = Scope({param.name: param.module_path} if param.module_path else None)
    files = sorted(scope.own_files(param.name))
    if not files:
        raise UserError(f"{spec}: no source file of its own to mutate")
    return [own_module(file) for file in files]


def _progress(total: int) -> Callable[[int, Mutant], None]:
    def line(done: int, mutant: Mutant) -> None:
        print(f"mutant {done}/{total} {mutant.fate} {mutant.duration:.1f} s {mutant.module}:{mutant.line} "
              f"{mutant.operator}", flush=True)
    return line


def _vllm_version() -> str:
    from ..vllm_install.versions import installed
    from ..vllm_install.window import VLLM_DISTRIBUTIONS

    found = installed(*VLLM_DISTRIBUTIONS)
    return found[0] if found else "unknown"


def _floor_row(args: argparse.Namespace) -> ConnectorFloor | None:
    """The floor's row whose mutants this run takes instead of a draw: ``--floor``'s, or ``--update-floor``'s where
    the file has a row for the connector and neither ``--sample`` nor ``--changed-lines`` asks for other mutants."""
    from kvconform.reports.mutation_floor import MutationFloorError, load_floor

    path = args.floor or args.update_floor
    if path is None or (args.floor is None and (args.sample is not None or args.changed_lines is not None
                                                 or not path.exists())):
        return None
    try:
        return load_floor(path).connectors.get(args.connector)
    except MutationFloorError as exc:
        raise UserError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from .plan import plan_run
    from .runner import run_mutants
    from .warm import suite_args, warm_up

    changed = _check(args)
    row = _floor_row(args)
    if row is not None:
        args.sample, args.seed = row.sample, row.seed  # the row's provenance: the draw that first chose its mutants
    started = time.monotonic()
    own = own_modules(args.connector)
    pytest_args = suite_args(args.connector, list(args.pytest_args))
    print(f"kvconform mutate: {args.connector}: loading the suite", flush=True)
    warm = warm_up(own, pytest_args)
    for file, why in warm.skipped.items():
        print(f"kvconform mutate: {file} does not import here, its mutants are left out: {why}", file=sys.stderr)
    mutated = [m for m in own if m.file in warm.modules]
    with tempfile.TemporaryDirectory(prefix="kvconform-mutate-") as folder:
        plan = plan_run(mutated, pytest_args, Path(folder), changed, args.sample, args.seed,
                        listed=row.listed() if row is not None else None)
        print(plan.summary(), flush=True)
        ran = list(run_mutants(plan.to_run, warm.modules, warm.live, pytest_args, Path(folder), args.jobs,
                               _progress(len(plan.to_run))))
    result = MutationRun(connector=args.connector, platform=PLATFORM, vllm=_vllm_version(),
                         modules=[m.path for m in mutated],
                         mutants=sorted([*plan.settled, *ran], key=lambda m: (m.module, m.line, m.id)),
                         sample=args.sample, seed=args.seed,
                         changed_lines=str(args.changed_lines) if args.changed_lines else None,
                         floor_row=str(args.floor or args.update_floor) if row is not None else None,
                         duration=round(time.monotonic() - started, 1), baseline=plan.baseline.counts())
    _write(result, args)
    return _hold_to_floor(result, args)


def _hold_to_floor(result: MutationRun, args: argparse.Namespace) -> int:
    """``--floor``: 1 where the run falls below it; ``--update-floor``: the run's row written into it."""
    from kvconform.reports.mutation_floor import (
        MutationFloorError,
        comparable,
        floor_problems,
        load_floor,
        score_changes,
        update,
    )

    try:
        if args.update_floor is not None:
            update(args.update_floor, result)
            print(f"kvconform mutate: wrote {result.connector}'s row of {args.update_floor}")
            return 0
        if args.floor is None:
            return 0
        floor = load_floor(args.floor)
    except MutationFloorError as exc:
        raise UserError(str(exc)) from None
    if why := comparable(result, floor):
        print(f"kvconform mutate: not held to {args.floor}: {why}")
        return 0
    for change in score_changes(result, floor):
        print(f"kvconform mutate: score of {change}")
    problems = floor_problems(result, floor)
    for problem in problems:
        print(f"kvconform mutate: below the floor: {problem}")
    print(f"kvconform mutate: {len(problems)} problem(s) against {args.floor}" if problems
          else f"kvconform mutate: every mutant of the row as {args.floor} has it")
    return 1 if problems else 0


def _write(result: MutationRun, args: argparse.Namespace) -> None:
    from kvconform.reports import render_mutation_terminal

    print(render_mutation_terminal.render(result))
    if args.json is not None:
        result.write(args.json)
    if args.out is not None:
        from kvconform.reports import render_mutation_html

        result.write(args.out / JSON_NAME)
        (args.out / HTML_NAME).write_text(render_mutation_html.render(result))
        print(f"kvconform mutate: wrote {args.out / HTML_NAME}")
