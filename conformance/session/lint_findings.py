"""The lint findings an expectation pins, by what they are (rule, file, function, call), never by their lines.

An xfail entry of the lint check lists the findings it expects; the failure the check raises
carries the findings it made, and the entry accepts it only when the two are the same multiset.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field


class LintFinding(BaseModel):
    """One finding a lint entry expects, by what it is (not where): the lint check's ``Finding.key()``."""

    model_config = ConfigDict(extra="forbid")
    rule: str  # KVC004
    file: str  # the file inside vLLM: vllm/v1/simple_kv_offload/worker.py
    function: str  # the enclosing definition, qualified: SimpleCPUOffloadWorker.register_kv_caches
    call: str  # what is called there, as source: torch.cuda.Stream
    count: int = Field(default=1, ge=1)  # how many such calls that function makes

    def key(self) -> tuple[str, str, str, str]:
        return self.rule, self.file, self.function, self.call


LINT_KEY = ("rule", "file", "function", "call")  # a lint finding's key, in LintFinding.key()'s order


def _finding_text(key: tuple[str, str, str, str], count: int) -> str:
    rule, file, function, call = key
    return f"{rule} {file} {function}: {call}" + (f" (x{count})" if count > 1 else "")


def findings_mismatch(expected: list[LintFinding], carried: Iterable[dict[str, str]] | None,
                      unfound: Callable[[dict[str, str]], str] | None = None) -> str | None:
    """Why the findings an error carries are not the entry's (as multisets); None when they are equal.

    ``unfound`` (the lint check's, carried with the findings) says of an expected finding not found
    whether the lint read its place and the code is gone, or the lint no longer reads it.
    """
    if carried is None:
        return "it carries no lint findings, and the entry expects findings"
    want = Counter({f.key(): f.count for f in expected})
    got = Counter((f["rule"], f["file"], f["function"], f["call"]) for f in carried)
    extra, missing = got - want, want - got
    if not extra and not missing:
        return None
    def why(key: tuple[str, str, str, str]) -> str:
        return f" ({unfound(dict(zip(LINT_KEY, key, strict=True)))})" if unfound and key in missing else ""

    parts = [f"{label}: {'; '.join(_finding_text(k, n) + why(k) for k, n in sorted(diff.items()))}"
             for label, diff in (("not in the entry", extra), ("expected but not found", missing)) if diff]
    return f"its lint findings differ from the entry's ({', '.join(parts)})"
