"""What a mutation run of one connector found: each mutant, its fate, and the tallies per module and function.

``kvconform mutate`` (``conformance/mutation/``) changes a connector's own code a little at a time and runs the
conformance tests that reached the changed line; this is the record it writes (JSON) and every renderer reads.
A mutant is *killed* when a test that passed on the unchanged code fails, *timed out* when its tests ran past
their bound (a hang is detected too), *survived* when every test it ran still passed: a change no check
notices. *not reached* mutants sit on lines no test ran; *not viable* ones could not be applied (the change
does not compile). The score is over the mutants a test reached: detected / (detected + survived).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

FORMAT = "kvconform-mutation"
VERSION = 1

Fate = Literal["killed", "timed_out", "survived", "not_reached", "not_viable"]
FATES: tuple[Fate, ...] = ("killed", "timed_out", "survived", "not_reached", "not_viable")
DETECTED: frozenset[str] = frozenset({"killed", "timed_out"})


@dataclass(frozen=True)
class Mutant:
    id: str  # "<module>:<line>:<operator>:<occurrence>", stable across runs of the same source
    module: str  # the file as reports show it (vllm/distributed/..., or the third-party package's path)
    function: str  # the qualified name of the function or method holding the line, or model.MODULE_LEVEL (the
    # coverage report's word: a mutant and a missed line of the same code read the same)
    line: int
    operator: str  # the mutation library's operator name
    diff: str  # unified diff of the one change, three lines of context
    fate: Fate
    tests: int = 0  # conformance tests the mutant ran against (those that reached its line)
    killed_by: str = ""  # the first test that failed, and the first line of its failure
    duration: float = 0.0  # seconds


@dataclass(frozen=True)
class Tally:
    counts: dict[str, int]

    @property
    def detected(self) -> int:
        return sum(self.counts.get(fate, 0) for fate in DETECTED)

    @property
    def reached(self) -> int:
        return self.detected + self.counts.get("survived", 0)

    @property
    def score(self) -> float | None:
        """Detected over reached, or None where no test reached any mutant."""
        return self.detected / self.reached if self.reached else None


@dataclass
class MutationRun:
    connector: str
    platform: str
    vllm: str
    modules: list[str]  # the connector's own modules that were mutated
    mutants: list[Mutant]
    sample: int | None = None  # how many reached mutants were drawn (None: all)
    seed: int = 0
    changed_lines: str | None = None  # the diff that restricted the lines, as given
    floor_row: str | None = None  # the mutation floor file whose row listed the mutants run (sample, seed: its draw)
    duration: float = 0.0
    baseline: dict[str, int] = field(default_factory=dict)  # the unchanged code's outcomes: outcome -> count

    def tally(self, module: str | None = None, function: str | None = None) -> Tally:
        chosen = [m for m in self.mutants
                  if (module is None or m.module == module) and (function is None or m.function == function)]
        return Tally(dict(Counter(m.fate for m in chosen)))

    def functions(self, module: str) -> list[str]:
        return sorted({m.function for m in self.mutants if m.module == module})

    def survivors(self) -> list[Mutant]:
        return sorted((m for m in self.mutants if m.fate == "survived"), key=lambda m: (m.module, m.line, m.id))

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, **asdict(self)}

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")


class MutationFileError(Exception):
    """A file that is not a mutation run's JSON; the message names it and what is wrong."""


def read_run(path: Path) -> MutationRun:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise MutationFileError(f"{path}: cannot read a mutation run: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise MutationFileError(f"{path}: not a mutation run (its format is not {FORMAT!r})")
    if data.get("version") != VERSION:
        raise MutationFileError(f"{path}: mutation run version {data.get('version')!r}; this kvconform reads {VERSION}")
    fields = {k: v for k, v in data.items() if k not in ("format", "version")}
    try:
        mutants = [Mutant(**m) for m in fields.pop("mutants")]
        return MutationRun(mutants=mutants, **fields)
    except (KeyError, TypeError) as exc:
        raise MutationFileError(f"{path}: malformed mutation run: {exc}") from None
