"""``kvconform pipeline``: write the Buildkite pipeline that runs the conformance suite on a platform.

Print it to stdout for ``| buildkite-agent pipeline upload``, or write it with ``-o``; on
stderr, one line per value that is still a lanes-file default to check (``placeholders``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kvconform.errors import UserError
from kvconform.platforms import PLATFORMS

from .generate import ALL, pipeline_from, render_yaml
from .lanes import LANES_FILE, LanesError, load_lanes
from .placeholders import placeholders


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--platform", required=True, choices=[*PLATFORMS, ALL],
                        help="the platform whose lanes to generate, or all of them")
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help=f"lanes file (default: {LANES_FILE.relative_to(LANES_FILE.parent.parent)})")
    parser.add_argument("--connector", action="append", default=None, metavar="NAME",
                        help="only steps for this connector (repeatable; default: every connector group)")
    parser.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                        help="write the pipeline here (default: stdout)")


def _write(path: Path, text: str) -> None:
    if not path.parent.is_dir():
        raise UserError(f"cannot write {path}: directory {path.parent} does not exist")
    try:
        path.write_text(text)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None


def run(args: argparse.Namespace) -> int:
    try:
        config = load_lanes(args.config)
        pipeline = pipeline_from(config, [args.platform], args.connector, str(args.config or LANES_FILE))
    except LanesError as exc:
        raise UserError(str(exc)) from None
    text = render_yaml(pipeline)
    if args.output is None:
        sys.stdout.write(text)
    else:
        _write(args.output, text)
    for placeholder in placeholders(pipeline, config, os.environ):
        print(f"kvconform pipeline: {placeholder.line()}", file=sys.stderr)
    return 0
