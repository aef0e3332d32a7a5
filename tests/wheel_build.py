"""This checkout's wheel, built as the bootstrap step builds it (``pip wheel --no-deps``), from a copy; and the
stand-in of a CI image it is installed into.

From a copy: setuptools writes kvconform.egg-info into the tree it builds, and a stale one left in the
checkout would shadow the installed entry points for every run started there.

The image (``vllm_image``) is a Python that has this environment's packages but not kvconform: a new venv
whose .pth names a folder of links to this site-packages' entries. A wheel goes either into the venv's own
site-packages (pip's default there, as a step installs it) or, with ``install_beside_vllm``, into the folder
that holds vLLM, as in an image whose one site-packages has both (a system Python, a venv built at once).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.load import stretched

ROOT = Path(__file__).resolve().parents[1]
# what a build never reads: git, the environments, reports, caches
NOT_COPIED = (".git", ".venv*", ".oldest-tools", "out", "__pycache__", "*.egg-info", ".mypy_cache", ".pytest_cache")


SITE = Path(sysconfig.get_paths()["purelib"])  # this environment's site-packages: vLLM, torch, pytest
IMAGE_SITE = "image-site"  # the folder of links, under an image's root


def copy_source(target: Path) -> Path:
    """The checkout's files a build reads, copied to ``target`` (which must not exist); returns ``target``."""
    shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns(*NOT_COPIED))
    return target


def build_wheel(tmp_path_factory) -> Path:
    source = copy_source(tmp_path_factory.mktemp("source") / "kvconform")
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(out), str(source)], capture_output=True, text=True, timeout=stretched(300))
    assert build.returncode == 0, build.stderr
    (wheel,) = out.glob("kvconform-*.whl")
    return wheel


def _left_out(name: str, without: tuple[str, ...]) -> bool:
    return "kvconform" in name.lower() or name.endswith(".pth") or name.lower().split("-")[0] in without


def vllm_image(root: Path, without: tuple[str, ...] = ()) -> Path:
    """A Python that has this environment's packages but not kvconform; returns its bin folder.

    A folder of links to every site-packages entry except kvconform's (its
    dist-info, editable finder and .pth files) and those ``without`` names, named in
    a .pth of a new venv: so pip sees no kvconform installed and installs into the venv.
    """
    links = root / IMAGE_SITE
    links.mkdir(parents=True)
    for entry in SITE.iterdir():
        if not _left_out(entry.name, without):
            (links / entry.name).symlink_to(entry)
    venv = root / "image"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=stretched(60))
    [site] = (venv / "lib").glob("python3*/site-packages")
    (site / "vllm-image.pth").write_text(f"{links}\n")
    return venv / "bin"


def image_site(bin_dir: Path) -> Path:
    """The image venv's own site-packages (where pip installs by default)."""
    [site] = (bin_dir.parent / "lib").glob("python3*/site-packages")
    return site


def install_beside_vllm(bin_dir: Path, wheel: Path) -> Path:
    """Install ``wheel`` into the folder of the image's vLLM (its dependencies are there); returns that folder."""
    links = bin_dir.parents[1] / IMAGE_SITE
    done = subprocess.run([str(bin_dir / "python3"), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                           "--target", str(links), str(wheel)], capture_output=True, text=True, timeout=stretched(120))
    assert done.returncode == 0, done.stderr
    return links
