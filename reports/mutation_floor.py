"""The mutation floor: what the suite notices of each CPU connector's code today, so that it cannot silently fall.

``conformance/mutation/floor.yaml`` keeps, per connector, one fixed set of mutants (first drawn by ``kvconform
mutate --sample N --seed S``) as it last ran: each module's score, the ids of the mutants a test detected, and
every survivor with the reason it survives (an equivalent mutant, code no CPU run reaches) or the issue that will
turn it into a check. ``kvconform mutate ... --floor FILE`` runs exactly the row's mutants (``listed``), so that
the scores of two runs compare like for like however far the suite's reach grows: a mutant the floor says was
detected that is not detected now is a regression, a survivor the floor does not explain is a finding to explain or
check, a listed survivor that is now detected is an explanation out of date, and a listed mutant the source no
longer has means the row must be rewritten. Like the coverage floor it is measured on one vLLM release; a run on
another release's files says so and is not compared.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .mutants import DETECTED, MutationRun

UNEXPLAINED = "not explained yet"  # a new survivor's reason until someone writes one (a project test refuses it)


class MutationFloorError(Exception):
    """A floor file that cannot be read; the message names the file and what is wrong."""


class ConnectorFloor(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sample: int | None = None  # the --sample that first drew the row's mutants (None: every reached mutant)
    seed: int = 0  # and its --seed
    scores: dict[str, float] = Field(default_factory=dict)  # module -> score of the sample, 0..1
    detected: list[str] = Field(default_factory=list)  # mutant ids a test killed or timed out
    survivors: dict[str, str] = Field(default_factory=dict)  # mutant id -> why it survives

    def listed(self) -> set[str]:
        """The row's mutants: a run held to it runs these and no others."""
        return {*self.detected, *self.survivors}


class MutationFloor(BaseModel):
    model_config = ConfigDict(extra="forbid")
    platform: str
    vllm: str
    connectors: dict[str, ConnectorFloor] = Field(default_factory=dict)


def load_floor(path: Path) -> MutationFloor:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
        return MutationFloor.model_validate(data)
    except (OSError, yaml.YAMLError) as exc:
        raise MutationFloorError(f"{path}: cannot read the mutation floor: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        raise MutationFloorError(f"{path}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def comparable(run: MutationRun, floor: MutationFloor) -> str | None:
    """Why ``run`` cannot be held to ``floor`` (another release, platform, connector or sample), or None."""
    entry = floor.connectors.get(run.connector)
    if entry is None:
        return f"the mutation floor has no row for {run.connector}"
    for what, ran, kept in (("vLLM", run.vllm, floor.vllm), ("platform", run.platform, floor.platform),
                            ("sample", run.sample, entry.sample), ("seed", run.seed, entry.seed)):
        if ran != kept:
            return f"this run's {what} is {ran}, the floor's {kept}: not compared"
    return None


def floor_problems(run: MutationRun, floor: MutationFloor) -> list[str]:
    """Each way ``run`` falls below ``floor`` or leaves it out of date; empty where it holds (or is not comparable)."""
    if comparable(run, floor) is not None:
        return []
    entry = floor.connectors[run.connector]
    fates = {mutant.id: mutant for mutant in run.mutants}
    problems = [f"{ident} is the floor's, and this source has no such mutant: rewrite the row (--update-floor "
                f"--sample N draws a new set)" for ident in sorted(entry.listed() - fates.keys())]
    for mutant in sorted(run.mutants, key=lambda m: m.id):
        where = f"{mutant.id} ({mutant.module}:{mutant.line}, {mutant.function}, {mutant.operator})"
        if mutant.fate not in DETECTED and mutant.id in entry.detected:
            problems.append(f"{where} {mutant.fate.replace('_', ' ')}; the floor says a test detected it")
        elif mutant.fate == "survived" and mutant.id not in entry.survivors:
            problems.append(f"{where} survived, and the floor does not explain it: add a check that notices it, "
                            f"or list it under survivors with the reason it cannot be noticed")
        elif mutant.fate in DETECTED and mutant.id in entry.survivors:
            problems.append(f"{where} is detected now; the floor still lists it as a survivor "
                            f"({entry.survivors[mutant.id]}): move it to detected")
    return problems


HEADER = """\
# The mutation floor (docs/mutation.md): per CPU connector, one fixed set of mutants (first drawn with sample and
# seed) as kvconform mutate last ran it on this vLLM: each module's score, the mutants a test detected, and every
# survivor with why it survives (an equivalent mutant, code no CPU run reaches) or which issue turns it into a check.
# kvconform mutate --floor runs exactly a row's mutants and holds them to it, so scores compare like for like;
# --update-floor rewrites a connector's row from such a run (or from a new draw, given --sample), keeping the reasons.
"""


def update(path: Path, run: MutationRun) -> None:
    """Write ``run``'s row into the floor at ``path`` (created where missing), keeping its survivors' reasons."""
    import yaml

    floor = load_floor(path) if path.exists() else MutationFloor(platform=run.platform, vllm=run.vllm)
    if path.exists() and (floor.vllm, floor.platform) != (run.vllm, run.platform):
        raise MutationFloorError(f"{path}: measured on vLLM {floor.vllm} ({floor.platform}); this run is on "
                                 f"{run.vllm} ({run.platform}): a floor holds one release")
    old = floor.connectors.get(run.connector)
    floor.connectors[run.connector] = floor_entry(run, old.survivors if old else {})
    floor.connectors = dict(sorted(floor.connectors.items()))
    path.write_text(HEADER + yaml.safe_dump(floor.model_dump(), sort_keys=False, width=120))


def score_changes(run: MutationRun, floor: MutationFloor) -> list[str]:
    """Each module's score in the floor's row and in ``run`` (a run of the row's own mutants), one line each."""
    if comparable(run, floor) is not None:
        return []
    now = floor_entry(run, {}).scores
    kept = floor.connectors[run.connector].scores
    return [f"{module}: {_score(kept.get(module))} in the floor, {_score(now.get(module))} now"
            for module in sorted(kept.keys() | now.keys())]


def _score(score: float | None) -> str:
    return "-" if score is None else f"{score:.3f}"


def floor_entry(run: MutationRun, reasons: dict[str, str]) -> ConnectorFloor:
    """The floor's row for ``run``: its scores and detected ids, and its survivors with ``reasons`` (id -> why;
    a survivor without one reads "not explained yet", which a reader of the file sees at once)."""
    modules = sorted({m.module for m in run.mutants})
    scores = {module: round(score, 3) for module in modules
              if (score := run.tally(module=module).score) is not None}
    return ConnectorFloor(
        sample=run.sample, seed=run.seed, scores=scores,
        detected=sorted(m.id for m in run.mutants if m.fate in DETECTED),
        survivors={m.id: reasons.get(m.id, UNEXPLAINED) for m in run.survivors()})
