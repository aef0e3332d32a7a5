"""Every shell command the documentation shows runs against the code as it is.

In the README, ``docs/*.md`` and ``benchmarks/README.md``, each command of a fenced block that starts
with ``kvconform``, ``pytest``, ``python -m pytest``, ``python -m kvconform`` or ``make`` is checked
without running anything heavy: a make target exists and its ``VAR=value`` are variables the Makefile
uses; a ``kvconform`` subcommand exists and its options appear in its ``--help``; ``pytest`` options
appear in ``pytest --help`` with kvconform's plugin; relative paths exist (unless an earlier command of
the block writes them), and a ``--connector module:Class`` defines that class. So a renamed option, a
removed target or a moved file fails here, naming file, line and command. The worked example
(docs/testing-your-connector.md) is run for real by tests/examples/test_worked_example.py.
"""

from __future__ import annotations

import ast
import functools
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md"]
SHELL_FENCES = {"", "sh", "bash", "console", "shell"}
SEPARATORS = {"|", "||", "&&", ";", "&"}
PATH_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".xml", ".md", ".toml", ".txt")
# options whose value is a file or folder the command writes, not one that must exist
OUTPUT_OPTIONS = {"--junitxml", "--junit-xml", "--kvconform-json", "--out", "-o", "--output", "--results", "--json"}
# options whose value is a file or folder that must exist
INPUT_OPTIONS = {"--profiles", "--kvconform-expectations", "--config"}
# words a synopsis uses for "your value here"
PLACEHOLDERS = {"package.module:Class"}


@dataclass(frozen=True)
class Command:
    """One shell command of a doc: where it is, its text, and its words (after any VAR=value prefix)."""

    doc: str
    line: int
    text: str
    env: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]
    # paths earlier commands of the same code block write (an output option's value)
    written_before: tuple[str, ...] = field(default=())

    @property
    def tool(self) -> str | None:
        """'make', 'kvconform' or 'pytest' for a command this test checks, else None."""
        return _tool(self.argv)[0]


def _tool(argv: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """The tool a command runs and its arguments: `python -P -m pytest ...` is pytest."""
    if not argv:
        return None, ()
    first = argv[0]
    if first in ("make", "kvconform", "pytest"):
        return first, argv[1:]
    if re.fullmatch(r"(.*/)?python3?(\.\d+)?", first):
        rest = list(argv[1:])
        while rest and rest[0] in ("-P", "-u", "-B", "-X") or (rest and rest[0].startswith("-X")):
            rest.pop(0)
        if len(rest) >= 2 and rest[0] == "-m" and rest[1] in ("pytest", "kvconform"):
            return rest[1], tuple(rest[2:])
    return None, ()


def _segments(text: str) -> list[list[str]]:
    """A command line's shell words, split at `|`, `&&`, `;` (but not at the `|` of a synopsis's `[a | b]`);
    synopsis brackets and `...` are dropped, `#` starts a comment."""
    segments: list[list[str]] = [[]]
    depth = 0
    for word in shlex.split(text, comments=True):
        depth += word.count("[") - word.count("]")
        if word in SEPARATORS:
            if depth <= 0:
                segments.append([])
            continue
        word = word.strip("[]").removesuffix("...").strip("[]")
        if word:
            segments[-1].append(word)
    return [s for s in segments if s]


def commands_of(doc: Path) -> list[Command]:
    """The commands in a markdown file's shell code blocks, with the line each starts on."""
    name = str(doc.relative_to(REPO))
    lines = doc.read_text(encoding="utf-8").splitlines()
    found: list[Command] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^\s*(```+)\s*([\w-]*)", lines[i])
        if not fence:
            i += 1
            continue
        marker, info = fence.group(1), fence.group(2).lower()
        start = i + 1
        end = start
        while end < len(lines) and not lines[end].strip().startswith(marker):
            end += 1
        if info in SHELL_FENCES:
            found.extend(_block_commands(name, lines, start, end))
        i = end + 1
    return found


def _block_commands(name: str, lines: list[str], start: int, end: int) -> list[Command]:
    block = lines[start:end]
    # a console transcript: only `$ ` lines are commands, the rest is their output
    prompted = any(line.lstrip().startswith("$ ") for line in block)
    written: list[str] = []
    commands = []
    j = 0
    while j < len(block):
        line = block[j].strip()
        lineno = start + j + 1
        j += 1
        if prompted:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        while line.endswith("\\") and j < len(block):
            line = line[:-1].rstrip() + " " + block[j].strip()
            j += 1
        if not line or line.startswith("#"):
            continue
        try:
            segments = _segments(line)
        except ValueError:
            continue  # not shell (an unbalanced quote in prose or output)
        for segment in segments:
            env = []
            while segment and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", segment[0]):
                key, _, value = segment.pop(0).partition("=")
                env.append((key, value))
            command = Command(name, lineno, line, tuple(env), tuple(segment), tuple(written))
            if command.tool:
                commands.append(command)
                written.extend(_outputs(command))
    return commands


def _outputs(command: Command) -> list[str]:
    """The paths a command writes (values of output options), so later commands may read them."""
    out = []
    args = list(_tool(command.argv)[1])
    for k, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in OUTPUT_OPTIONS:
            if not eq and k + 1 < len(args) and not args[k + 1].startswith("-"):
                value = args[k + 1]
            if value:
                out.append(value)
    return out


ALL_COMMANDS = [c for doc in DOCS if doc.exists() for c in commands_of(doc)]


# ---- what the code offers -------------------------------------------------------------------------------

def _run(*argv: str) -> str:
    result = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(argv)} exited {result.returncode}:\n{result.stderr[-2000:]}"
    return result.stdout


def parse_help_options(text: str) -> dict[str, str]:
    """Option -> 'value', 'optional' or 'flag', read off a --help text (pytest's or argparse's)."""
    options: dict[str, str] = {}
    for line in text.splitlines():
        if not re.match(r"^\s{1,6}-", line):
            continue
        definition = re.split(r"\s{2,}", line.strip())[0]
        for spec in definition.split(", "):
            m = re.match(r"^(-{1,2}[A-Za-z0-9][\w-]*)(?:([ =])(\S.*))?$", spec.strip())
            if not m:
                continue
            kind = "flag" if not m.group(2) else ("optional" if m.group(3).startswith("[") else "value")
            options.setdefault(m.group(1), kind)
            if m.group(1).startswith("--"):
                # pytest's help drops a long option that differs from another only in dashes (--junitxml
                # beside --junit-xml): both are accepted
                options.setdefault("--" + m.group(1)[2:].replace("-", ""), kind)
    return options


@functools.cache
def pytest_options() -> dict[str, str]:
    """pytest's options with every plugin of this environment loaded: kvconform's (a pytest11 entry point),
    xdist's and pytest-timeout's."""
    text = _run("-m", "pytest", "--help", "-p", "no:cacheprovider")
    assert "--kvconform-strict" in text, "kvconform's plugin is not loaded in `pytest --help`"
    return parse_help_options(text)


@functools.cache
def kvconform_subcommands() -> frozenset[str]:
    text = _run("-m", "kvconform", "--help")
    return frozenset(re.findall(r"^    ([a-z][\w-]*)(?:\s|$)", text, re.M))


@functools.cache
def kvconform_options(sub: str) -> dict[str, str]:
    return parse_help_options(_run("-m", "kvconform", sub, "--help"))


@functools.cache
def makefile() -> tuple[frozenset[str], str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set()
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_.][^:=#\t]*?)\s*:(?!=)", line)
        if m and "$(" not in m.group(1):
            targets.update(m.group(1).split())
    return frozenset(targets), text


# ---- the checks -----------------------------------------------------------------------------------------

def _looks_like_path(word: str) -> bool:
    if word in PLACEHOLDERS or "://" in word or word.startswith(("-", "$", "'", '"', "{")):
        return False
    return "/" in word or word.endswith(PATH_SUFFIXES)


def _path_problem(word: str, written: tuple[str, ...]) -> str | None:
    """Why a relative path a command names is missing from the repository, or None."""
    path = word.split("::")[0]
    if path.startswith(("/", "..", "~")) or re.fullmatch(r"[A-Z_]+/?", path):
        return None  # outside the repository, or a placeholder (FILE, PATH)
    for out in written:
        if path == out or path.startswith(out.rstrip("/") + "/") or Path(path).parts[0] == Path(out).parts[0]:
            return None  # an earlier command of the block writes it
    if not (REPO / path).exists():
        return f"{path}: no such file or folder in the repository"
    return None


def _option_problems(args: list[str], known: dict[str, str], where: str) -> tuple[list[str], list[str]]:
    """Unknown options, and the positional words left over (with values of input options)."""
    problems, positional = [], []
    k = 0
    while k < len(args):
        arg = args[k]
        k += 1
        if arg == "--":
            positional.extend(args[k:])
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name not in known:
                problems.append(f"{name}: not an option of {where}")
                continue
            if not eq and known[name] == "value" and k < len(args):
                value = args[k]
                k += 1
            elif not eq and known[name] == "optional" and k < len(args) and not args[k].startswith("-"):
                value = args[k]
                k += 1
            if name in INPUT_OPTIONS and value:
                positional.append(value)
        elif arg.startswith("-") and len(arg) > 1 and not re.fullmatch(r"-\d+", arg):
            short = arg[:2]
            if short not in known:
                problems.append(f"{short}: not an option of {where}")
            elif known[short] in ("value", "optional"):
                if len(arg) == 2 and k < len(args):
                    k += 1  # its value is the next word
            else:  # combined flags, e.g. -qx
                problems.extend(f"-{c}: not an option of {where}" for c in arg[2:] if f"-{c}" not in known)
        else:
            positional.append(arg)
    return problems, positional


def _connector_problems(command: Command, args: list[str]) -> list[str]:
    """`--connector module:Class` names a class its module defines, where the module is in the repository or
    on the command's PYTHONPATH."""
    roots = [REPO / p for key, value in command.env if key == "PYTHONPATH" for p in value.split(":") if p]
    specs = [a.partition("=")[2] if a.startswith("--connector=") else args[i + 1]
             for i, a in enumerate(args) if a.startswith("--connector=") or (a == "--connector" and i + 1 < len(args))]
    problems = []
    for spec in specs:
        module, colon, cls = spec.partition(":")
        if not colon or spec in PLACEHOLDERS:
            continue
        rel = Path(*module.split("."))
        files = [f for root in (*roots, REPO) for f in (root / rel.with_suffix(".py"), root / rel / "__init__.py")
                 if f.exists()]
        if not files:
            problems.append(f"--connector {spec}: module {module} is neither in the repository nor on its PYTHONPATH")
            continue
        tree = ast.parse(files[0].read_text(encoding="utf-8"))
        if not any(isinstance(n, ast.ClassDef) and n.name == cls for n in tree.body):
            problems.append(f"--connector {spec}: {files[0].relative_to(REPO)} defines no class {cls}")
    return problems


def problems_of(command: Command) -> list[str]:
    """What in a command does not match the code; empty when it does."""
    tool, args = _tool(command.argv)
    args = list(args)
    problems: list[str] = []
    for key, value in command.env:
        if key == "PYTHONPATH":
            problems.extend(p for part in value.split(":") if part
                            for p in [_path_problem(part, ())] if p)
    if tool == "make":
        targets, text = makefile()
        for arg in args:
            if arg.startswith("-"):
                continue
            if "=" in arg:
                var = arg.partition("=")[0]
                if not re.search(rf"\b{re.escape(var)}\b", text):
                    problems.append(f"{var}: not a variable the Makefile uses")
            elif arg not in targets:
                problems.append(f"make {arg}: no such target in the Makefile")
        return problems
    if tool == "kvconform":
        if not args or args[0] in ("-h", "--help"):
            return problems
        sub = args[0]
        if sub not in kvconform_subcommands():
            return [f"kvconform {sub}: no such subcommand (there are: {', '.join(sorted(kvconform_subcommands()))})"]
        unknown, positional = _option_problems(args[1:], kvconform_options(sub), f"kvconform {sub}")
    else:
        unknown, positional = _option_problems(args, pytest_options(), "pytest (with kvconform's plugin)")
        problems.extend(_connector_problems(command, args))
    problems.extend(unknown)
    problems.extend(p for word in positional if _looks_like_path(word)
                    for p in [_path_problem(word, command.written_before)] if p)
    return problems


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=[f"{c.doc}:{c.line}" for c in ALL_COMMANDS])
def test_documented_command_matches_the_code(command):
    problems = problems_of(command)
    assert not problems, f"{command.doc}:{command.line}: {command.text}\n  " + "\n  ".join(problems)


def test_every_doc_with_commands_is_read():
    """The files the docs' commands come from: the README and the pages holding the user's commands."""
    docs = {c.doc for c in ALL_COMMANDS}
    assert {"README.md", "docs/testing-your-connector.md", "docs/running.md", "docs/gate.md"} <= docs, docs
    tools = {c.tool for c in ALL_COMMANDS if c.doc == "README.md"}
    assert tools == {"make", "kvconform", "pytest"}, tools
    readme = [c.text for c in ALL_COMMANDS if c.doc == "README.md"]
    assert any(t.startswith("make conformance") for t in readme) and any(t.startswith("make test") for t in readme)


def test_the_connector_authors_example_is_checked():
    """docs/testing-your-connector.md's commands (run for real by tests/examples/test_worked_example.py) are
    among those checked here, and each names the example's module, class and profile as they are."""
    example = [c for c in ALL_COMMANDS if c.doc == "docs/testing-your-connector.md" and c.tool == "pytest"]
    assert len(example) >= 2, [c.text for c in example]
    for command in example:
        assert ("PYTHONPATH", "examples") in command.env, command.text
        assert "dict_connector:DictConnector" in command.argv, command.text
        assert problems_of(command) == [], command.text
    assert any("examples/dict_connector.yaml" in c.argv for c in example)
    readme = [c for c in ALL_COMMANDS if c.doc == "README.md" and "dict_connector:DictConnector" in c.argv]
    assert {tuple(c.argv) for c in readme} <= {tuple(c.argv) for c in example}, "README and the page differ"


# ---- the validator itself ------------------------------------------------------------------------------

def _one(text: str, fence: str = "sh") -> Command:
    lines = [f"```{fence}", *text.splitlines(), "```"]
    commands = _block_commands("made-up.md", lines, 1, len(lines) - 1)
    assert len(commands) == 1, commands
    return commands[0]


@pytest.mark.parametrize(("text", "expected"), [
    ("pytest --pyargs kvconform.conformance --platfrom=cpu", "--platfrom: not an option of pytest"),
    ("python -m pytest --pyargs kvconform.conformance --kvconform-strcit", "--kvconform-strcit: not an option"),
    ("pytest tests/no_such_folder -q", "tests/no_such_folder: no such file or folder"),
    ("pytest --pyargs kvconform.conformance --profiles examples/missing.yaml", "examples/missing.yaml: no such file"),
    ("PYTHONPATH=examples python -m pytest --pyargs kvconform.conformance --connector dict_connector:NoSuchClass",
     "defines no class NoSuchClass"),
    ("python -m pytest --pyargs kvconform.conformance --connector dict_connector:DictConnector",
     "module dict_connector is neither in the repository"),
    ("PYTHONPATH=no_such_dir pytest --pyargs kvconform.conformance", "no_such_dir: no such file or folder"),
    ("kvconform lint --no-such-flag", "--no-such-flag: not an option of kvconform lint"),
    ("kvconform lint examples/no_such_connector.py", "examples/no_such_connector.py: no such file"),
    ("kvconform nosuchsub --json", "kvconform nosuchsub: no such subcommand"),
    ("kvconform gate --repo ../vllm --base main --dry-run --jsn", "--jsn: not an option of kvconform gate"),
    ("make no-such-target", "make no-such-target: no such target"),
    ("make conformance NO_SUCH_VARIABLE=1", "NO_SUCH_VARIABLE: not a variable the Makefile uses"),
])
def test_the_validator_rejects(text, expected):
    problems = problems_of(_one(text))
    assert any(expected in p for p in problems), problems


def test_the_validator_accepts_what_the_code_offers():
    for text in ("pytest --pyargs kvconform.conformance --platform=cpu -n 2 -rs -k 'a and b' --timeout 30",
                 "CI=true make test PYTEST_ARGS=-rs",
                 "kvconform bench --json bench.json --threads 1",
                 "kvconform pipeline --platform all -o pipeline.yml"):
        assert problems_of(_one(text)) == [], text
    lines = ["```sh", "pytest --pyargs kvconform.conformance --junitxml=out/x.xml",
             "kvconform report out/x.xml --out out", "```"]
    first, second = _block_commands("m.md", lines, 1, 3)
    assert _outputs(first) == ["out/x.xml"] and second.written_before == ("out/x.xml",)
    assert problems_of(second) == []
    assert problems_of(Command("m.md", 1, "", (), second.argv)) == ["out/x.xml: no such file or folder in the "
                                                                    "repository"]


def test_blocks_are_read_as_a_shell_reads_them():
    """`$ ` prompts (output lines skipped), `\\` continuations, VAR=value prefixes, pipes and comments."""
    lines = ["```console", "$ CI=true kvconform gate --repo . --base main \\", "      --dry-run   # why",
             "kvconform gate: output, not a command", "$ kvconform pipeline --platform cpu | cat", "```", "",
             "```python", "make = 'pytest --no-such-option'", "```", "",
             "```sh", "make test   # everything", "```"]
    commands = _block_commands("m.md", lines, 1, 5) + _block_commands("m.md", lines, 12, 13)
    assert [(c.line, c.argv, c.env) for c in commands] == [
        (2, ("kvconform", "gate", "--repo", ".", "--base", "main", "--dry-run"), (("CI", "true"),)),
        (5, ("kvconform", "pipeline", "--platform", "cpu"), ()),
        (13, ("make", "test"), ()),
    ]
    synopsis = _one("pytest --pyargs kvconform.conformance [--connector NAME | --connector package.module:Class]...")
    assert synopsis.argv[-4:] == ("--connector", "NAME", "--connector", "package.module:Class")
