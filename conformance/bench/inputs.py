"""``kvconform bench``'s option values checked: each bad value is a ``UserError`` naming its option.

The sizes, numbers and output folder are checked before vLLM is imported; the platform, backend, block
size and connectors are resolved as the suite resolves them (the block size vLLM prefers for the backend,
the registered connectors and profile files).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from kvconform import platforms
from kvconform.errors import UserError

if TYPE_CHECKING:
    from kvconform.platforms.spec import PlatformSpec

    from ..connectors.selection import ConnectorParam

DEFAULT_SIZES = (256, 1024, 4096)
DEFAULT_REPEAT = 5
BLOCK_SIZES = (16, 32, 64, 128)
VLLM_DEFAULT_BLOCK_SIZE = 16  # CacheConfig's default, which a backend turns into its preferred size
MAX_SIZE = 1 << 17


def parse_sizes(text: str) -> list[int]:
    """The sizes as numbers, in order, each once; whether they fit the block size is ``check_sizes``'s."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        try:
            size = int(part)
        except ValueError:
            raise UserError(f"--sizes: {part!r} is not a whole number of tokens") from None
        if not 0 < size <= MAX_SIZE:
            raise UserError(f"--sizes: {size} must be a positive number of tokens up to {MAX_SIZE}")
        if size not in sizes:
            sizes.append(size)
    return sizes


def check_sizes(sizes: list[int], block_size: int) -> None:
    for size in sizes:
        if size % block_size:
            raise UserError(f"--sizes: {size} must be a multiple of the block size ({block_size})")


def block_size_for(backend: str, asked: int | None) -> int:
    """``asked``, or the size vLLM's config picks for ``backend``; a size its kernels refuse is a UserError."""
    from ..engine.backends import backend_class

    cls = backend_class(backend)
    if asked is None:
        preferred: int = cls.get_preferred_block_size(VLLM_DEFAULT_BLOCK_SIZE)
        return preferred
    if not cls.supports_block_size(asked):
        sizes = ", ".join(str(s) for s in cls.get_supported_kernel_block_sizes())
        raise UserError(f"--block-size: {backend} does not run block size {asked} "
                        f"(vLLM: its kernel block sizes are {sizes})")
    return asked


def check_numbers(args: argparse.Namespace) -> None:
    if args.repeat < 1:
        raise UserError(f"--repeat: {args.repeat} must be at least 1")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads: {args.threads} must be at least 1")
    if args.min_ratio is not None and not (math.isfinite(args.min_ratio) and args.min_ratio > 0):
        raise UserError(f"--min-ratio: {args.min_ratio} must be a positive number")
    if args.storage_dir is not None and not args.storage_dir.is_dir():
        raise UserError(f"--storage-dir: {args.storage_dir} is not a directory")


def target(args: argparse.Namespace) -> tuple[PlatformSpec, str]:
    """(platform spec, attention backend), or a UserError saying why not."""
    try:
        spec, _probe = platforms.resolve(args.platform)
        backend = platforms.check_backends(spec, [args.attn_backend] if args.attn_backend else None)[0]
    except platforms.PlatformError as exc:
        raise UserError(str(exc)) from None
    return spec, backend


def connectors(args: argparse.Namespace) -> list[ConnectorParam]:
    """The connectors asked for (default: every registered one); a bad name or profile file is a UserError."""
    from ..connectors.profiles import ProfileError, load_profiles
    from ..connectors.selection import ConnectorSpecError, resolve_connectors

    try:
        for path in args.profiles:  # a malformed file fails before vLLM is imported for the registry
            load_profiles(path)
        return resolve_connectors(args.connector, tuple(args.profiles))
    except (ConnectorSpecError, ProfileError) as exc:
        raise UserError(str(exc)) from None


def check_output(destination: str | None) -> None:
    if destination is not None and destination != "-" and not Path(destination).resolve().parent.is_dir():
        raise UserError(f"--json: the folder of {destination} does not exist")
