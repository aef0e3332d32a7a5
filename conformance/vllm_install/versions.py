"""Installed package versions, read from package metadata: never imports the package (vLLM costs seconds)."""

from __future__ import annotations

import importlib.metadata


def installed(*dists: str) -> tuple[str, str] | None:
    """(version, distribution) of the first of ``dists`` that is installed, or None."""
    for dist in dists:
        try:
            return importlib.metadata.version(dist), dist
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
