"""What may retry and what may soft-fail: the CI policy, as tables a reviewer can read.

A retried test failure hides a flaky connector, and a soft-failed lane hides a red
one; both turn a conformance result into noise. So automatic retries are allowed
only for exits that mean the *machine* failed, and soft-fail only for lanes that
say they are experimental and why. Every rule here yields problems as
``(location in the lanes file, message)`` so the loader can point at the line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

KeyPath = tuple[str | int, ...]  # where in the lanes file: ("lanes", "xpu", "retry", 0)
Problem = tuple[KeyPath, str]


# The fields of a lanes file the policy reads. Declared here, as protocols, so the policy sits
# below ``pipelines.lanes`` (which applies it while loading) instead of importing it back.
class RetryRule(Protocol):
    @property
    def exit_status(self) -> int | None: ...
    @property
    def signal_reason(self) -> str | None: ...


class Lane(Protocol):
    @property
    def platform(self) -> str: ...
    @property
    def retry(self) -> Sequence[RetryRule] | None: ...
    @property
    def experimental(self) -> bool: ...
    @property
    def soft_fail(self) -> bool | list[int]: ...
    @property
    def reason(self) -> str | None: ...


class Defaults(Protocol):
    @property
    def retry(self) -> Sequence[RetryRule]: ...


class LanesConfig(Protocol):
    @property
    def defaults(self) -> Defaults: ...
    @property
    def lanes(self) -> Mapping[str, Lane]: ...


@dataclass(frozen=True)
class InfraExit:
    """An exit that means the infrastructure failed, not the code under test."""

    why: str
    platforms: frozenset[str] | None = None  # None: an infrastructure exit on every platform


# exit_status -> why it is infrastructure. Buildkite reports -1 when it lost the agent.
# 134 is SIGABRT: on ROCm a GPU hang aborts the process; elsewhere an abort may be the connector's bug.
RETRYABLE_EXIT_STATUSES: dict[int, InfraExit] = {
    -1: InfraExit("the agent was lost"),
    134: InfraExit("a ROCm GPU hang aborts the process", frozenset({"rocm"})),
}

# signal_reason -> why it is infrastructure.
RETRYABLE_SIGNAL_REASONS: dict[str, InfraExit] = {
    "agent_stop": InfraExit("the agent was stopped (drained or scaled in) while the job ran"),
}


def _described(rule: InfraExit) -> str:
    only = "" if rule.platforms is None else f"; {'/'.join(sorted(rule.platforms))} lanes only"
    return f"({rule.why}{only})"


def _allowed_list() -> str:
    exits = [f"exit_status {status} {_described(rule)}" for status, rule in RETRYABLE_EXIT_STATUSES.items()]
    reasons = [f"signal_reason {reason} {_described(rule)}" for reason, rule in RETRYABLE_SIGNAL_REASONS.items()]
    return ", ".join(exits + reasons)


def _rule_problems(rule: RetryRule, platform: str | None) -> Iterator[str]:
    """Why ``rule`` may not retry on ``platform`` (None: a rule that applies to every lane)."""
    checks = []
    if rule.exit_status is not None:
        checks.append((f"exit_status {rule.exit_status}", RETRYABLE_EXIT_STATUSES.get(rule.exit_status)))
    if rule.signal_reason is not None:
        checks.append((f"signal_reason {rule.signal_reason}", RETRYABLE_SIGNAL_REASONS.get(rule.signal_reason)))
    for what, infra in checks:
        if infra is None:
            yield (f"{what} is not an infrastructure exit: automatic retries would hide test failures; "
                   f"allowed: {_allowed_list()}")
        elif infra.platforms is not None and platform not in infra.platforms:
            where = "in defaults (they apply to every lane)" if platform is None else f"on a {platform} lane"
            yield (f"{what} may retry only on {'/'.join(sorted(infra.platforms))} lanes ({infra.why}), "
                   f"not {where}")


def retry_problems(config: LanesConfig) -> Iterator[Problem]:
    """Automatic retries only for infrastructure exits, per platform."""
    for index, rule in enumerate(config.defaults.retry):
        for message in _rule_problems(rule, None):
            yield ("defaults", "retry", index), message
    for name, lane in config.lanes.items():
        for index, rule in enumerate(lane.retry or []):
            for message in _rule_problems(rule, lane.platform):
                yield ("lanes", name, "retry", index), message


def soft_fail_problems(config: LanesConfig) -> Iterator[Problem]:
    """Soft-fail only on experimental lanes, and an experimental lane says why it is one."""
    for name, lane in config.lanes.items():
        if lane.soft_fail not in (False, []) and not lane.experimental:
            yield ("lanes", name, "soft_fail"), (
                "soft_fail is allowed only on lanes marked experimental: true (a soft-failed "
                "conformance lane is a red result nobody sees)")
        if lane.experimental and not (lane.reason or "").strip():
            yield ("lanes", name, "experimental"), ("an experimental lane needs a reason: "
                                                    "say why it is not a full lane yet")


RULES = (retry_problems, soft_fail_problems)
