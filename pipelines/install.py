"""How a generated step brings kvconform into a vLLM CI image that lacks it.

vLLM CI's images carry vLLM and its pinned test requirements, not kvconform; a step
that ran pytest there anyway would end in ``unrecognized arguments: --platform=...``.
So every step first fetches the kvconform wheel the bootstrap step built and
uploaded (``pipelines/bootstrap.yml``; the wheel of exactly the kvconform that
generated the pipeline, named by its version), then, where the tests run, installs
it if ``import kvconform`` fails, or stops in one line naming what is missing and
how to add it. An image that has kvconform keeps its own. The install is
``--no-deps`` followed by ``kvconform.pipelines.image_deps``, which adds only
missing packages and never upgrades the image's pinned pytest.

The lines hold no ``$``: they pass through pipeline upload, the agent's shell and,
in a container lane, one more ``sh -c`` unchanged.
"""

from __future__ import annotations

from importlib import metadata

from .shell import Raw, join

DISTRIBUTION = "kvconform"
# Where the bootstrap step writes the wheel and uploads it from; steps download it to the same path.
WHEEL_DIR = "kvconform-dist"
# pip as root in a container: no warning about root, and no refusal by a distribution's
# EXTERNALLY-MANAGED marker (both environment variables, which older pips ignore, unlike flags).
PIP_ENV = ["PIP_ROOT_USER_ACTION=ignore", "PIP_BREAK_SYSTEM_PACKAGES=1"]
EXIT_MISSING = 2


def version() -> str:
    """The version of the kvconform generating the pipeline, as its wheel's file name spells it."""
    return metadata.version(DISTRIBUTION).replace("-", "_")


def wheel_path() -> str:
    """The bootstrap's wheel of this kvconform (pure Python: one file name for every platform)."""
    return f"{WHEEL_DIR}/{DISTRIBUTION}-{version()}-py3-none-any.whl"


def fetch_line() -> str:
    """Download the wheel where the step's commands run (the agent, or a container with the agent mounted).

    A build without one (a pipeline not uploaded by the bootstrap) is not an error
    here: an image with kvconform needs no wheel; ``ensure_line`` decides.
    """
    wheel = wheel_path()
    note = (f"kvconform: no {wheel} among the build artifacts (the bootstrap step uploads it); "
            "the kvconform in the image must serve")
    return f"{join(['buildkite-agent', 'artifact', 'download', wheel, '.'])} || {join(['echo', note])} >&2"


def _fail(message: str) -> str:
    return f"{{ {join(['echo', message])} >&2; exit {EXIT_MISSING}; }}"


def ensure_line() -> str:
    """Where the tests run: kvconform imports, or the wheel is installed, or one line says what to do."""
    wheel = wheel_path()
    lacks = "kvconform: this image has no kvconform"
    no_wheel = (f"{lacks} and this build no {wheel}: upload the pipeline with the bootstrap.yml of kvconform "
                f"(it builds that wheel from KVCONFORM_SPEC), or install kvconform {version()} in the image")
    no_pip = f"{lacks} and no pip to install {wheel} with: add pip or kvconform {version()} to the image"
    has_it = join(["python3", "-P", "-c", "import kvconform"])
    has_pip = join(["python3", "-m", "pip", "--version"])
    install = join([Raw(" ".join(PIP_ENV)), "python3", "-m", "pip", "install", "--quiet", "--no-deps",
                    "--disable-pip-version-check", wheel])
    deps = join(["python3", "-P", "-m", "kvconform.pipelines.image_deps"])
    return (f"{has_it} 2>/dev/null || {{ test -f {join([wheel])} || {_fail(no_wheel)}; "
            f"{has_pip} >/dev/null 2>&1 || {_fail(no_pip)}; {install} && {deps}; }}")
