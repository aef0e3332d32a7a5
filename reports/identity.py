"""What a conformance test is about: whether it is one, its check, platform, backend, connector and variant.

One module knows the shape of kvconform's test ids, so the pytest plugin (which
sees live items) and the report (which may see only JUnit text) agree on it. A
conformance test is one that carries a ``check`` marker (``is_conformance``); the
reliability plugins watch the tests that run a connector (``connector_of``), which
every conformance test of the suite does.
The plugin records the identity as test properties (``kvconform.*``); reading
properties is exact, and parsing the id is the fallback for JUnit files written
without them.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvconform.check_table import gate_of

if TYPE_CHECKING:
    import pytest  # the plugin hands over its live items; reading a report imports no pytest

UNKNOWN = "-"

# JUnit / ``item.user_properties`` names: the identity, then the expectation that decided the test.
PROPERTY_PREFIX = "kvconform."
IDENTITY_FIELDS = ("check", "platform", "backend", "connector", "variant", "param_id")
PARAMS_PROPERTY = PROPERTY_PREFIX + "params"  # a JSON object: other parameter name -> short text
EXPECT_PROPERTIES = {  # Expectation field -> property name
    "expect": PROPERTY_PREFIX + "expect",
    "where": PROPERTY_PREFIX + "expect.where",
    "reason": PROPERTY_PREFIX + "expect.reason",
    "link": PROPERTY_PREFIX + "expect.link",
}
# The entry's class (bug, policy or hazard), when the expectations give one; read as ``Expected``'s "class".
EXPECT_CLASS_PROPERTY = PROPERTY_PREFIX + "expect.class"

# JUnit suite properties: what the run ran on (``RunInfo`` fields known when the run starts).
RUN_PROPERTY_PREFIX = PROPERTY_PREFIX + "run."
RUN_FIELDS = ("platform", "kvconform", "vllm", "vllm_package", "vllm_note", "torch", "device")

# Parameters the kvconform plugin parametrizes first, in id order, and how to name their value.
# (The engine tier names its connector with a plain string parameter, ``connector_name``.)
AXIS_PARAMS = {"platform": "platform", "attn_backend": "backend", "connector": "connector",
               "connector_name": "connector"}


# A platform's column when one report holds its results from several vLLM releases: ``cpu (vLLM 0.33.0)``.
# Without the version the runs would share the column and, test for test, the later would replace the earlier.
_VLLM_COLUMN = " (vLLM "


def platform_column(platform: str, vllm: str) -> str:
    """The column of ``platform``'s results on vLLM ``vllm``, in a report across vLLM releases."""
    return f"{platform}{_VLLM_COLUMN}{vllm})"


def column_platform(column: str) -> str:
    """The platform a column holds (``cpu`` for ``cpu (vLLM 0.33.0)``, and for ``cpu``)."""
    return column.split(_VLLM_COLUMN, 1)[0]


@dataclass(frozen=True)
class Identity:
    check: str
    platform: str
    backend: str = UNKNOWN
    connector: str = UNKNOWN
    variant: str = ""  # what is left of the parametrize id after the axes, e.g. "float16-bs16"
    param_id: str = ""  # the whole parametrize id, e.g. "cpu-CPU_ATTN-ExampleConnector-float16-bs16"
    params: dict[str, str] = field(default_factory=dict, compare=False)

    def properties(self) -> list[tuple[str, str]]:
        """``(name, value)`` pairs for ``item.user_properties`` (and so JUnit)."""
        pairs = [(PROPERTY_PREFIX + name, str(getattr(self, name))) for name in IDENTITY_FIELDS]
        pairs.append((PARAMS_PROPERTY, json.dumps(self.params, sort_keys=True)))
        return pairs


class ConnectorUnderTest:
    """What a conformance test's ``connector`` parameter is an instance of (``connectors.selection.ConnectorParam``
    derives from it). The plugin is installed into other projects' environments: a test of theirs may have a
    ``connector`` parameter of its own, of any type, and only this type makes a test one the plugins watch."""

    name: str


def connector_of(item: pytest.Item) -> Any:
    """The ``ConnectorParam`` a conformance test runs, or None for any other test, another project's test with a
    ``connector`` parameter of its own included (Any: the reliability plugins read the fields of a type this
    layer cannot import)."""
    callspec = getattr(item, "callspec", None)
    connector = callspec.params.get("connector") if callspec is not None else None
    return connector if isinstance(connector, ConnectorUnderTest) else None


def is_conformance(item: pytest.Item) -> bool:
    """Whether a test is a conformance test: it carries a ``check`` marker, which names its check."""
    return item.get_closest_marker("check") is not None


def check_of(item: pytest.Item) -> str | None:
    """The check a test's ``check`` marker names, or None where it has none."""
    marker = item.get_closest_marker("check")
    return marker.args[0] if marker is not None and marker.args else None


def needed_check(item: pytest.Item) -> str | None:
    """The profile key a connector's profile must list for the test to run, per the check table (``load_failure``
    needs ``roundtrip``); None where the test names no check."""
    check = check_of(item)
    return gate_of(check) if check is not None else None


def glob_match(text: str, pattern: str) -> bool:
    """``*`` and ``?`` are wildcards; brackets are literal, as in every parametrized test id."""
    return fnmatch.fnmatchcase(text, _brackets_literal(pattern))


@functools.lru_cache(maxsize=4096)  # a few dozen entries' patterns, matched against every test at collection
def _brackets_literal(pattern: str) -> str:
    return "".join({"[": "[[]", "]": "[]]"}.get(ch, ch) for ch in pattern)


def check_from_function(name: str) -> str:
    """The check a test function performs when its module carries no ``check`` marker."""
    base = name.split("[", 1)[0]
    return base[len("test_"):] if base.startswith("test_") else base


def _value_name(value: Any) -> str:
    """A short text for a parameter value: its ``name`` when it has one (platforms, connectors)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return str(value)
    for attr in ("name", "id", "__name__"):
        named = getattr(value, attr, None)
        if isinstance(named, str):
            return named
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _strip_leading(param_id: str, tokens: Iterable[str]) -> str:
    rest = param_id
    for token in tokens:
        if rest == token:
            return ""
        if rest.startswith(token + "-"):
            rest = rest[len(token) + 1:]
    return rest


def _marker_connector(item: pytest.Item) -> str | None:
    """A test without a ``connector`` parameter may name one: ``connector_name=`` on any marker."""
    for mark in item.iter_markers():
        name = mark.kwargs.get("connector_name")
        if name:
            return str(name)
    return None


def from_item(item: pytest.Item, platform: str) -> Identity:
    """The identity of a collected pytest item; ``platform`` is the run's, used when no parameter names one.

    The kvconform fixtures' values are exact; a test that uses none of them but
    follows the id convention (plain parametrize ids) is read like a JUnit name.
    """
    callspec = getattr(item, "callspec", None)
    params = dict(callspec.params) if callspec is not None else {}
    param_id = callspec.id if callspec is not None else ""
    axes: dict[str, str] = {}
    for param, field_name in AXIS_PARAMS.items():
        if param in params:
            axes.setdefault(field_name, _value_name(params.pop(param)))
    if axes:
        variant = _strip_leading(param_id, axes.values())
    else:
        axes = parse_param_id(param_id)
        variant = axes.pop("variant")
    named = check_of(item)
    check = str(named) if named is not None else check_from_function(item.name)
    return Identity(
        check=check,
        platform=axes.get("platform", platform),
        backend=axes.get("backend", UNKNOWN),
        connector=axes.get("connector") or _marker_connector(item) or UNKNOWN,
        variant=variant,
        param_id=param_id,
        params={name: _value_name(value) for name, value in params.items()},
    )


def parse_param_id(param_id: str, connectors: Iterable[str] = ()) -> dict[str, str]:
    """Read ``<platform>-<backend>-<connector>-<variant>`` off a parametrize id; absent axes stay absent.

    A platform or backend is recognised from the platform table; what follows them
    is the connector. Where the caller knows the connectors' ids (``connectors``),
    the connector is the longest of them that the rest starts with as whole
    parameters, so an id holding a dash (``NixlConnector@device-buffer``, a profile
    variant's) is read as itself; a rest that starts with none of them has no
    connector. Without them, the next parameter is the connector, or, with neither
    platform nor backend, only a parameter whose name says so.
    """
    from kvconform.platforms import PLATFORMS  # no torch, no vLLM: the table alone

    tokens = param_id.split("-") if param_id else []
    parsed: dict[str, str] = {}
    if tokens and tokens[0] in PLATFORMS:
        parsed["platform"] = tokens.pop(0)
    backends = {b for spec in PLATFORMS.values() for b in (*spec.backends, *spec.mla_backends)}
    if tokens and tokens[0] in backends:
        parsed["backend"] = tokens.pop(0)
    rest = "-".join(tokens)
    known = [name for name in connectors if rest == name or rest.startswith(f"{name}-")]
    if known:
        parsed["connector"] = max(known, key=len)
        rest = rest[len(parsed["connector"]) + 1:]
    elif tokens and not connectors and (parsed or _looks_like_connector(tokens[0])):
        parsed["connector"] = tokens[0]
        rest = "-".join(tokens[1:])
    parsed["variant"] = rest
    return parsed


def connector_in_nodeid(nodeid: str, connectors: Iterable[str]) -> str | None:
    """The one of ``connectors`` a test id is parametrized with (``test_x[cpu-CPU_ATTN-ExampleConnector-fp8]``)."""
    start = nodeid.find("[")
    if start < 0 or not nodeid.endswith("]"):
        return None
    return parse_param_id(nodeid[start + 1:-1], tuple(connectors)).get("connector")


_NAME_WITH_ID = re.compile(r"^(?P<function>[^\[]*)(?:\[(?P<param_id>.*)\])?$", re.DOTALL)


def _looks_like_connector(token: str) -> bool:
    return "Connector" in token


def from_test_name(name: str, properties: dict[str, str], platform: str | None = None) -> Identity:
    """The identity of a JUnit test case: from ``kvconform.*`` properties, else parsed from its name.

    Parsing relies on the plugin's id order, ``<platform>-<backend>-<connector>-<variant>``;
    an axis that is not recognised is left as ``-`` rather than guessed.
    """
    match = _NAME_WITH_ID.match(name)
    function = match.group("function") if match else name
    param_id = (match.group("param_id") if match else None) or ""
    parsed = parse_param_id(param_id)
    recorded = {key[len(PROPERTY_PREFIX):]: value for key, value in properties.items()
                if key.startswith(PROPERTY_PREFIX) and key[len(PROPERTY_PREFIX):] in IDENTITY_FIELDS}
    try:
        params = json.loads(properties.get(PARAMS_PROPERTY, "{}"))
    except ValueError:
        params = {}

    def pick(key: str, default: str) -> str:
        return recorded.get(key) or parsed.get(key) or default

    return Identity(
        check=pick("check", check_from_function(function)),
        platform=pick("platform", platform or UNKNOWN),
        backend=pick("backend", UNKNOWN),
        connector=pick("connector", UNKNOWN),
        variant=recorded.get("variant", parsed["variant"]),
        param_id=recorded.get("param_id", param_id),
        params=params if isinstance(params, dict) else {},
    )
