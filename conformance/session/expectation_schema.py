"""The expectations files' format: an entry, what it selects, what it expects, and what it must say.

A known finding is written with a reason, a specific link and a class (bug, policy, hazard),
so a red cell is always news. An xfail entry pins the exception and the message it expects
(or, for the lint check, its findings): any other failure is not the finding. The format is
described in ``conformance/expectations/README.md``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .lint_findings import LintFinding, findings_mismatch
from .vllm_conditions import vllm_meets, vllm_specifiers

SELECTORS = ("test", "connector", "check", "backend")
# What each finding is, so a reader knows whom it concerns (shown in every report).
FINDING_CLASSES = {
    "bug": "vLLM's documented contract, or its own behaviour, is broken",
    "policy": "kvconform asks more than vLLM documents (a stricter situation than vLLM's runner produces)",
    "hazard": "wrong in a situation the installed vLLM cannot produce (a latent bug)",
}
# What each kind of entry must say, so a known failure is never an unexplained one, and an expected
# failure is exactly that failure: the exception (``raises``) and its message (``match``) or, for the
# lint check, its findings (``findings``) are pinned. A tuple is alternatives: one of them at least.
REQUIRED = {"pass": (), "xfail": ("reason", "link", "class", "raises", ("match", "findings")), "skip": ("reason",)}
# Exception names too broad to pin one cause: any failure at all (or any check's) would match them; and the failure
# that stands for several of one check's (conformance/checks/verdicts.py), never one cause.
TOO_BROAD = frozenset({"BaseException", "Exception", "builtins.BaseException", "builtins.Exception", "object",
                       "builtins.object", "CheckFailure", "kvconform.conformance.engine.check_failure.CheckFailure",
                       "SeveralFailures", "kvconform.conformance.checks.verdicts.SeveralFailures"})

# A link points at one thing. On GitHub: an issue, a pull request, a commit, or source lines.
_GITHUB_SPECIFIC = re.compile(
    r"https://github\.com/[\w.-]+/[\w.-]+/(?:issues/\d+|pull/\d+|discussions/\d+|commit/[0-9a-f]{7,40}"
    r"|blob/[^/\s]+/\S+#L\d+(?:-L\d+)?)(?:[/?#]\S*)?")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def check_link(link: str) -> str:
    """``link`` when it names one issue, pull request or source line; ValueError for a listing page."""
    if not re.fullmatch(r"https?://[^\s/]+/\S+", link):
        raise ValueError("must be an http(s) URL of the issue, pull request or source line behind the finding")
    if re.match(r"https?://(www\.)?github\.com/", link) and not _GITHUB_SPECIFIC.fullmatch(link):
        raise ValueError(f"{link} is not specific: link one issue (.../issues/N), pull request (.../pull/N), "
                         f"commit or source line (.../blob/<ref>/<file>#L<n>), not a listing page")
    return link


def raised_as(error: BaseException, name: str) -> bool:
    """Whether ``error`` is an instance of the class called ``name`` (bare or module-qualified), as
    ``pytest.mark.xfail(raises=...)`` would say; by name, so an entry need not import the class."""
    return any(name in (cls.__name__, f"{cls.__module__}.{cls.__qualname__}") for cls in type(error).__mro__)


class Entry(BaseModel):
    """One expectation: which tests (all given selectors must match), and what to expect of them."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    test: str | None = None  # a node id or parametrize id, exact or with * and ? wildcards
    connector: str | None = None
    check: str | None = None
    backend: str | None = None
    expect: Literal["pass", "xfail", "skip"] = "pass"
    reason: str | None = None
    link: str | None = None
    finding_class: Literal["bug", "policy", "hazard"] | None = Field(default=None, alias="class")
    raises: str | None = None  # the exception class a failing test must raise (name or module.name)
    match: str | None = None  # a regex its message must contain (re.search), as pytest.raises(match=)
    # the lint check's findings, by rule, file, function and call: the set found must equal this one
    findings: list[LintFinding] | None = None
    # a condition, not a selector: the vLLM versions this entry holds on, a PEP 440 range (">=0.33",
    # ">=0.31,<0.33") or an exact release ("0.32.0"); absent: every version (vllm_meets).
    vllm: str | None = None

    def holds_on(self, vllm_version: str | None) -> bool:
        return self.vllm is None or (vllm_version is not None and vllm_meets(self.vllm, vllm_version))

    @field_validator("vllm")
    @classmethod
    def _is_vllm_condition(cls, condition: str | None) -> str | None:
        if condition is not None:
            vllm_specifiers(condition)
        return condition

    @field_validator("link")
    @classmethod
    def _is_specific_url(cls, link: str | None) -> str | None:
        return None if link is None else check_link(link)

    @field_validator("raises")
    @classmethod
    def _is_class_name(cls, name: str | None) -> str | None:
        if name is None:
            return None
        if not _DOTTED_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an exception class name (e.g. KeyError, or module.ClassName)")
        if name in TOO_BROAD:
            raise ValueError(f"{name} matches any failure of its kind: name the exception class the finding raises")
        return name

    @field_validator("match")
    @classmethod
    def _is_regex(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return pattern

    @model_validator(mode="after")
    def _complete(self) -> Entry:
        if not any(getattr(self, key) for key in SELECTORS):
            raise ValueError(f"an entry needs at least one of: {', '.join(SELECTORS)}")
        alternatives = (k if isinstance(k, tuple) else (k,) for k in REQUIRED[self.expect])
        missing = [keys[0] + "".join(f" (or {key})" for key in keys[1:]) for keys in alternatives
                   if not any(getattr(self, _FIELD_OF.get(key, key)) for key in keys)]
        if missing:
            raise ValueError(f"expect: {self.expect} needs {' and '.join(missing)}")
        return self

    def mismatch(self, when: str, error: BaseException) -> str | None:
        """Why ``error``, raised in test phase ``when``, is not the failure this entry expects; None if it is."""
        message = str(error)
        first = message.strip().splitlines()[0] if message.strip() else ""
        got = f"{type(error).__name__}: {first}" if first else type(error).__name__
        wanted = (f"{self.raises}" + (f" matching {self.match!r}" if self.match is not None else "")
                  + (f" with {sum(f.count for f in self.findings)} lint findings" if self.findings else ""))
        if when != "call":
            return f"it failed in {when}, not in the test itself ({got}); the entry expects {wanted} from the test"
        if self.raises is None or not raised_as(error, self.raises):  # an xfail entry always names one
            return f"it raised {got}; the entry expects {wanted}"
        if self.match is not None and not re.search(self.match, message):
            return f"its {type(error).__name__} message does not match {self.match!r}: {first!r}"
        if self.findings is not None:
            return findings_mismatch(self.findings, getattr(error, "findings", None), getattr(error, "unfound", None))
        return None


_FIELD_OF = {"class": "finding_class"}  # YAML key -> Entry field, where they differ


# Entries in a file for this "platform" hold on every platform (e.g. static lint findings).
ANY_PLATFORM = "any"


class ExpectationsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    platform: str
    expectations: list[dict[str, Any]] | None = None  # entries are validated one by one, for exact lines

    @field_validator("platform")
    @classmethod
    def _known_platform(cls, name: str) -> str:
        from kvconform.platforms import PLATFORMS

        if name not in PLATFORMS and name != ANY_PLATFORM:
            raise ValueError(f"unknown platform {name!r}; choose one of: {', '.join([*PLATFORMS, ANY_PLATFORM])}")
        return name
