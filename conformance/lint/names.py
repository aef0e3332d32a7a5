"""Dotted names of expressions, resolved through the module's imports.

``from torch.cuda import Stream`` then ``Stream()`` is ``torch.cuda.Stream``, and
``import torch as t`` then ``t.cuda.synchronize()`` is ``torch.cuda.synchronize``:
the rules match resolved names, so an alias does not hide a finding.
"""

from __future__ import annotations

import ast


def import_aliases(tree: ast.AST) -> dict[str, str]:
    """local name -> the dotted name it was imported as, for every import in the module."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            dots, module = "." * node.level, node.module
            for alias in node.names:
                origin = f"{dots}{module}.{alias.name}" if module else f"{dots}{alias.name}"
                aliases[alias.asname or alias.name] = origin
    return aliases


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def resolved(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The dotted name of ``node`` with its first part replaced by what it was imported as."""
    name = dotted(node)
    if name is None:
        return None
    head, dot, rest = name.partition(".")
    return aliases.get(head, head) + dot + rest


def ends_with(name: str, suffix: str) -> bool:
    """Whether ``name`` ends with dotted ``suffix`` on a part boundary: ``x.is_cuda`` does, ``x.mis_cuda`` not."""
    return name == suffix or name.endswith("." + suffix)


def static_prefix(node: ast.AST) -> str | None:
    """The text a string expression starts with: a literal, an f-string's head, ``"a" + x``'s left side."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        return static_prefix(node.values[0])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return static_prefix(node.left)
    return None
