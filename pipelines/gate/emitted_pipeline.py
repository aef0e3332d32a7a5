"""``gate --emit-pipeline``: the Buildkite steps that test the selected connectors on every platform each claims.

The steps are the generator's own (``pipelines/generate.py``), restricted to the
selected connectors, with one report step; the gate only says which connectors go
on which platform.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from kvconform import platforms
from kvconform.errors import UserError

from ..generate import render_yaml, selected_pipeline
from ..lanes import LanesError, load_lanes
from ..placeholders import placeholders
from .selection import Selection, claimed_platforms


def pipeline_for(selection: Selection, platform: str | None, config: Path | None) -> dict[str, Any]:
    """The selected connectors on every platform each claims (or only ``platform``), with one report step."""
    wanted = list(platforms.PLATFORMS) if platform is None or platform == "auto" else [platform]
    per_platform = {p: [c for c in selection.connectors if p in claimed_platforms(c)] for p in wanted}
    try:
        return selected_pipeline(per_platform, config)
    except LanesError as exc:
        raise UserError(str(exc)) from None


def emit_pipeline(selection: Selection, args: argparse.Namespace) -> int:
    """Write the pipeline to ``-o FILE`` or stdout; an empty one, or defaults it relies on, are said on stderr."""
    pipeline = pipeline_for(selection, args.platform, args.config)
    text = render_yaml(pipeline)
    if args.output is None:
        sys.stdout.write(text)
    else:
        try:
            args.output.write_text(text)
        except OSError as exc:
            raise UserError(f"-o {args.output}: cannot write: {exc.strerror}") from None
    if not pipeline["steps"]:
        where = f" on {args.platform}" if args.platform not in (None, "auto") else ""
        print(f"kvconform gate: no selected connector runs{where}: the pipeline has no steps", file=sys.stderr)
        return 0
    for placeholder in placeholders(pipeline, load_lanes(args.config), os.environ):
        print(f"kvconform gate: {placeholder.line()}", file=sys.stderr)
    return 0
