"""Docstrings name only what exists: each kvconform module, attribute or file a docstring cites resolves.

A name left behind by a move sends a reader nowhere. Every docstring of the four packages, of
``kvconform/`` and of the project's tests is read with ``ast`` (nothing imported, vLLM least of all), and
so is every comment of the YAML files the package ships (conformance/expectations/any.yaml, the profiles,
the lanes), which users copy commands from. Three kinds of reference are checked: a dotted name that starts
with a package, a module's own name or a class the module defines or imports
(``kvconform.conformance.bench.timing``, ``engine.rig.EngineStandIn``, ``Rig.engine``) must name a module
and what it defines, and one that starts with the retired top-level name ``conformance`` fails; a relative
``.py``/``.md``/``.yaml``/``.yml``/``.json`` path whose first folder is the repository's (``engine/rig.py``,
``docs/gate.md``) must end some file's path; a bare ``.py`` or ``.md`` name must be some file's, a name the
sources write (``summary.md``) or in ``NOT_FILES``. JUnit properties (``kvconform.half``) and patterns
(``kvconform.expect*``) are not references.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

from tests.install.test_import_graph import ROOT, source_modules

PACKAGES = {"kvconform": "kvconform", "pipelines": "kvconform.pipelines", "reports": "kvconform.reports",
            "platforms": "kvconform.platforms"}
# The retired top-level name: installed, the suite is ``kvconform.conformance`` only, so a word that starts with
# ``conformance.`` names nothing a user can import or pass to ``--pyargs`` (a file path ``conformance/x.py`` is fine).
RETIRED = "conformance"
RETIRED_PROBLEM = f"no module {RETIRED}: installed, it is kvconform.{RETIRED}"
PATH_SUFFIXES = (".py", ".md", ".yaml", ".yml", ".json")
SKIPPED_FOLDERS = {"__pycache__", "build", "dist", "node_modules"}  # and every hidden folder but .ci, and *.egg-info
# Bare file names a docstring uses as examples, not as the name of a file of the repository.
# (A name the sources write, such as ``summary.md``, is an output's and passes too.)
NOT_FILES = {"x.py", "file.py", "module.py", "test_x.py", "setup.py",
             # vLLM's files, which docstrings name by their file name as vLLM's developers do
             "base.py", "gpu_model_runner.py", "kv_connector_model_runner_mixin.py", "worker.py", "_version.py",
             "example_connector.py", "lmcache_mp_connector.py", "mooncake_connector.py", "push_scheduler.py",
             "push_worker.py"}

SHIPPED_YAML_FOLDERS = ("conformance", "pipelines")
TOKEN = re.compile(r"[\w.*/-]+")
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


@dataclass(frozen=True)
class Docstring:
    text: str
    line: int  # the source line the docstring starts on


def docstrings(source: str) -> list[Docstring]:
    """The module's docstring and each class's and function's, nested ones included."""
    tree = ast.parse(source)
    found = []
    for node in [tree, *ast.walk(tree)]:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                found.append(Docstring(first.value.value, first.value.lineno))
    return list(dict.fromkeys(found))  # the module appears twice: as the tree and in ast.walk


def yaml_comments(text: str) -> list[Docstring]:
    """Each ``#`` comment of a YAML file (outside quotes), with its line: what a user reads beside the data."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        quote = None
        for index, char in enumerate(line):
            if quote:
                quote = None if char == quote and line[index - 1:index] != "\\" else quote
            elif char in "'\"":
                quote = char
            elif char == "#" and (index == 0 or line[index - 1].isspace()):
                found.append(Docstring(line[index + 1:], number))
                break
    return found


def _defined(body: list[ast.stmt]) -> set[str]:
    """The names a module or class body binds: defs, classes, assignments, imports (under ``if`` too)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            names |= _defined(node.body + node.orelse + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                names |= _defined(handler.body)
    return names


def _members(cls: ast.ClassDef) -> set[str]:
    """What a class defines: its body's names and the ``self.x`` its methods assign."""
    names = _defined(cls.body)
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) \
                and node.value.id == "self":
            names.add(node.attr)
    return names


class Repository:
    """The modules (name -> source), the files and the property names one check resolves references against.

    ``modules`` are kvconform's: a dotted reference resolves against them. ``tests`` are the project tests'
    modules: their docstrings are read too, and a class one of them defines or imports may be cited by its name.
    ``yaml`` holds the shipped YAML files (path -> text), whose comments are read.
    """

    def __init__(self, modules: dict[str, str], files: set[str], tests: dict[str, str] | None = None,
                 yaml: dict[str, str] | None = None):
        self.modules = modules
        self.files = files  # repository-relative paths, with "/"
        self.tests = tests or {}
        self.yaml = yaml or {}

    @classmethod
    def read(cls, root: Path = ROOT) -> Repository:
        files = set()
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = [name for name in subfolders if not _skipped(name)]
            relative = Path(folder).relative_to(root).as_posix()
            files |= {name if relative == "." else f"{relative}/{name}" for name in names}
        return cls({name: path.read_text() for name, path in source_modules(root).items()}, files,
                   {name: path.read_text() for name, path in project_test_modules(root).items()},
                   {path: (root / path).read_text() for path in sorted(files) if _shipped_yaml(path)})

    @cached_property
    def trees(self) -> dict[str, ast.Module]:
        return {name: ast.parse(source) for name, source in {**self.modules, **self.tests}.items()}

    @cached_property
    def by_last_part(self) -> dict[str, list[str]]:
        """A module's own name (``rig``) -> the modules that have it (``kvconform.conformance.engine.rig``)."""
        found: dict[str, list[str]] = {}
        for name in self.modules:
            found.setdefault(name.rsplit(".", 1)[-1], []).append(name)
        return found

    @cached_property
    def folders(self) -> set[str]:
        return {part for file in self.files for part in file.split("/")[:-1]}

    @cached_property
    def file_names(self) -> set[str]:
        return {file.rsplit("/", 1)[-1] for file in self.files}

    @cached_property
    def strings(self) -> set[str]:
        """Every string constant of kvconform's sources: a JUnit property is named by one."""
        return {node.value for module in self.modules for node in ast.walk(self.trees[module])
                if isinstance(node, ast.Constant) and isinstance(node.value, str)}

    def imported_from(self, module: str) -> dict[str, tuple[str, str]]:
        """Name -> (kvconform module, its name there), for each ``from <kvconform module> import`` in a module."""
        package = module if any(name.startswith(module + ".") for name in self.modules) else module.rsplit(".", 1)[0]
        found = {}
        for node in ast.walk(self.trees[module]):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                source = ".".join([*base, *(node.module or "").split(".")]).strip(".")
                if source in self.modules:
                    found |= {alias.asname or alias.name: (source, alias.name) for alias in node.names
                              if f"{source}.{alias.name}" not in self.modules}
        return found

    def attribute_problem(self, module: str, attributes: list[str]) -> str | None:
        """Why ``module.attributes[0].attributes[1]`` is not defined, or None when it is (or cannot be told)."""
        if not attributes:
            return None
        tree = self.trees[module]
        if attributes[0] not in _defined(tree.body):
            if any(name.startswith(module + ".") for name in self.modules):
                return f"{module} has no module or name {attributes[0]}"
            return f"{module} defines no {attributes[0]}"
        if len(attributes) > 1:
            classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == attributes[0]]
            if classes and not classes[-1].bases and attributes[1] not in _members(classes[-1]):
                return f"{module}.{attributes[0]} defines no {attributes[1]}"
        return None

    def dotted_problem(self, name: str, module: str | None) -> str | None:
        """Why a dotted name in ``module``'s docstrings (a YAML comment's: None) does not resolve; None if it does
        or is not kvconform's."""
        parts = name.split(".")
        if parts[0] == RETIRED:
            return RETIRED_PROBLEM
        if parts[0] in PACKAGES:
            bases = [PACKAGES[parts[0]]]
            parts = parts[1:]
        elif parts[0] in self.by_last_part:
            bases = [candidate.rsplit(".", 1)[0] for candidate in self.by_last_part[parts[0]]]
        elif module and parts[0][:1].isupper() and parts[0] in _defined(self.trees[module].body):
            source, defined = self.imported_from(module).get(parts[0], (module, parts[0]))
            return self.attribute_problem(source, [defined, *parts[1:]])
        else:
            return None
        if name in self.strings or (name.startswith("kvconform.") and name.split(".", 1)[1] in self.strings
                                    and f"kvconform.{parts[0]}" not in self.modules):
            return None  # a JUnit property: ``kvconform.half`` as written, or the prefix and a field's name
        problems = []
        for base in bases:
            names = [*base.split("."), *parts]
            known = max((i for i in range(1, len(names) + 1) if ".".join(names[:i]) in self.modules), default=0)
            if known < len(base.split(".")):
                problems.append(f"no module {base}")
                continue
            problem = self.attribute_problem(".".join(names[:known]), names[known:])
            if problem is None:
                return None
            problems.append(problem)
        return problems[0]

    def path_problem(self, path: str) -> str | None:
        """Why a relative path does not resolve; None when it does or is no path of the repository."""
        if path.startswith("/") or not path.endswith(PATH_SUFFIXES):
            return None
        if "/" in path:
            if path.split("/")[0] not in self.folders:
                return None  # vLLM's (``vllm/v1/...``) or another project's
            found = path in self.files or any(file.endswith("/" + path) for file in self.files)
            return None if found else "no such file in the repository"
        if (path.endswith((".py", ".md")) and path not in NOT_FILES | self.file_names | self.strings
                and not path.startswith(".")):
            return "no file of that name in the repository"
        return None


def _skipped(folder: str) -> bool:
    return (folder.startswith(".") and folder != ".ci") or folder.endswith(".egg-info") or folder in SKIPPED_FOLDERS


def _shipped_yaml(path: str) -> bool:
    """A YAML file the package ships: the expectations and profiles under conformance/, the lanes under pipelines/."""
    return path.split("/")[0] in SHIPPED_YAML_FOLDERS and path.endswith((".yaml", ".yml"))


def project_test_modules(root: Path = ROOT) -> dict[str, Path]:
    """The project tests' module name (``tests.install.test_wheel``) -> source file."""
    return {".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): path
            for path in sorted((root / "tests").rglob("*.py")) if "__pycache__" not in path.parts}


def problems(repository: Repository, module: str) -> list[str]:
    """``line: reference (why)`` for each reference in a module's docstrings that does not resolve."""
    return reference_problems(repository, docstrings({**repository.modules, **repository.tests}[module]), module)


def yaml_problems(repository: Repository, path: str) -> list[str]:
    """``line: reference (why)`` for each reference in a YAML file's comments that does not resolve."""
    return reference_problems(repository, yaml_comments(repository.yaml[path]), None)


def reference_problems(repository: Repository, texts: list[Docstring], module: str | None) -> list[str]:
    """``line: reference (why)`` for each reference in ``texts`` (of ``module``, or of no module) that does not
    resolve."""
    found = []
    for doc in texts:
        previous = ""
        for match in TOKEN.finditer(doc.text):
            token = match.group().rstrip(".-/")
            before, previous = previous, token  # the word before this one, and this one for the next
            if not token.lstrip(".") or "*" in token:
                continue
            line = doc.line + doc.text.count("\n", 0, match.start())
            if "/" in token or token.endswith(PATH_SUFFIXES):
                problem = repository.path_problem(token)
            elif DOTTED.fullmatch(token):
                problem = repository.dotted_problem(token, module)
            elif token == RETIRED and before == "--pyargs":
                problem = RETIRED_PROBLEM
            else:
                problem = None
            if problem:
                found.append(f"{line}: {token} ({problem})")
    return list(dict.fromkeys(found))


REPOSITORY = Repository.read()
SOURCES = {**source_modules(), **project_test_modules()}


@pytest.mark.parametrize("module", sorted(REPOSITORY.modules) + sorted(REPOSITORY.tests))
def test_docstring_references_resolve(module):
    path = SOURCES[module].relative_to(ROOT)
    assert [f"{path}:{problem}" for problem in problems(REPOSITORY, module)] == []


@pytest.mark.parametrize("path", sorted(REPOSITORY.yaml))
def test_yaml_comment_references_resolve(path):
    assert [f"{path}:{problem}" for problem in yaml_problems(REPOSITORY, path)] == []


# ---- the check can fail: synthetic modules ------------------------------------------------------

SYNTHETIC = {
    "kvconform": "",
    "kvconform.conformance": "",
    "kvconform.conformance.engine": "",
    "kvconform.conformance.engine.rig": "class EngineStandIn:\n    def step(self):\n        self.steps = 1\n"
                                        "RIGS = ()\n",
    "kvconform.conformance.bench": "",
    "kvconform.conformance.bench.command": "",
    "kvconform.reports": "",
    "kvconform.reports.identity": "",
    "kvconform.reports.cli": 'OUTPUTS = ("summary.md",)\nFIELDS = ("connector",)\n',
}
FILES = {"conformance/engine/rig.py", "conformance/bench/command.py", "reports/identity.py", "docs/gate.md"}


def _problems_in(docstring: str, module: str = "kvconform.conformance.bench.command") -> list[str]:
    source = f'"""{docstring}"""\nfrom ..engine.rig import EngineStandIn as Stand\nclass Local:\n    size = 1\n'
    modules = {**SYNTHETIC, module: source}
    return [problem.split(": ", 1)[1] for problem in problems(Repository(modules, FILES), module)]


@pytest.mark.parametrize("docstring", [
    "Built on ``kvconform.conformance.engine.rig`` and ``kvconform.conformance.engine.rig.EngineStandIn``.",
    "Run as ``pytest --pyargs kvconform.conformance`` or ``python -m kvconform.conformance.bench.command``.",
    "See engine/rig.py, conformance/engine/rig.py and reports/identity.py; docs/gate.md says why.",
    "``engine.rig.EngineStandIn.step`` sets ``rig.EngineStandIn.steps``; ``rig.RIGS`` lists them.",
    "``Local.size``; ``os.path.join`` and ``torch.cuda.synchronize`` are not ours; ``self.x`` neither.",
    "vLLM's gpu_model_runner.py calls vllm/v1/worker/utils.py; /proc/self/maps; x.py is an example.",
    "``Stand.steps``: the imported class's member.",
    "Recorded as ``kvconform.expect*`` properties, read from conformance/expectations/*.yaml; .py files.",
    "Written to summary.md (the sources name it); ``kvconform.connector`` is a property.",
])
def test_references_that_exist_pass(docstring):
    assert _problems_in(docstring) == []


@pytest.mark.parametrize(("docstring", "expected"), [
    ("Timed by ``kvconform.conformance.harness.bench_harness``.",
     "kvconform.conformance.harness.bench_harness (kvconform.conformance has no module or name harness)"),
    # the retired top-level name, even where kvconform.conformance has what follows it
    ("Built on ``conformance.engine.rig``.", f"conformance.engine.rig ({RETIRED_PROBLEM})"),
    ("Run ``python -m conformance.bench.command``.", f"conformance.bench.command ({RETIRED_PROBLEM})"),
    ("Run ``pytest --pyargs conformance -k fill``.", f"conformance ({RETIRED_PROBLEM})"),
    ("``kvconform.gone``", "kvconform.gone (kvconform has no module or name gone)"),
    ("``kvconform.conformance.engine.rig.Gone``", "kvconform.conformance.engine.rig.Gone "
                                                 "(kvconform.conformance.engine.rig defines no Gone)"),
    ("``engine.rig.EngineStandIn.gone``", "engine.rig.EngineStandIn.gone "
                                         "(kvconform.conformance.engine.rig.EngineStandIn defines no gone)"),
    ("``rig.Missing``", "rig.Missing (kvconform.conformance.engine.rig defines no Missing)"),
    ("``Local.gone``", "Local.gone (kvconform.conformance.bench.command.Local defines no gone)"),
    ("``Stand.gone``", "Stand.gone (kvconform.conformance.engine.rig.EngineStandIn defines no gone)"),
    ("See conformance/harness/bench_harness.py.",
     "conformance/harness/bench_harness.py (no such file in the repository)"),
    ("See docs/design.md.", "docs/design.md (no such file in the repository)"),
    ("Split out of deferred.py.", "deferred.py (no file of that name in the repository)"),
    ("The reasons are in DESIGN.md.", "DESIGN.md (no file of that name in the repository)"),
])
def test_references_that_do_not_exist_fail(docstring, expected):
    assert _problems_in(docstring) == [expected]


def test_a_line_number_points_at_the_reference():
    modules = {**SYNTHETIC, "kvconform.reports.identity": '\n"""First line.\n\nThird: ``reports.gone``."""\n'}
    assert problems(Repository(modules, FILES), "kvconform.reports.identity") == [
        "4: reports.gone (kvconform.reports has no module or name gone)"]


def test_a_test_modules_docstrings_are_read():
    tests = {"tests.bench.test_x": '"""Drives ``engine.rig.EngineStandIn``, not ``rig.Gone``."""\n'
                                   'class Local:\n    """``Local.size`` and ``Local.gone``."""\n    size = 1\n'}
    repository = Repository(SYNTHETIC, FILES, tests=tests)
    assert problems(repository, "tests.bench.test_x") == [
        "1: rig.Gone (kvconform.conformance.engine.rig defines no Gone)",
        "3: Local.gone (tests.bench.test_x.Local defines no gone)"]


YAML = """\
# Reproduce: pytest --pyargs kvconform.conformance -k fill (conformance/engine/rig.py)
ExampleConnector:
  - match: "a # in quotes: conformance.gone, gone.py"  # beside the data: ``rig.Gone``
    reason: 'it is # quoted too: conformance.gone'
  # Reproduce: pytest --pyargs conformance --connector ExampleConnector
  # vLLM's push_worker.py:12; see docs/design.md
"""


def test_yaml_comments_are_read_and_quoted_hashes_are_not():
    repository = Repository(SYNTHETIC, FILES, yaml={"conformance/expectations/x.yaml": YAML})
    assert yaml_problems(repository, "conformance/expectations/x.yaml") == [
        "3: rig.Gone (kvconform.conformance.engine.rig defines no Gone)",
        f"5: conformance ({RETIRED_PROBLEM})",
        "6: docs/design.md (no such file in the repository)"]
