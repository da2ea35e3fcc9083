"""A small stand-in for einops.rearrange / einops.repeat, used only when einops is not installed
(the GPU host has no package registry): named axes, parenthesised groups, '...', unit axes '1'
and, for repeat, new axes given by keyword or as a number. Enough for flash-attn's test suite."""
from __future__ import annotations

import math
import re

import torch


def _parse(side: str) -> list:
    """'b (h g) ... 1' -> ['b', ['h', 'g'], '...', '1']"""
    tokens, group = [], None
    for tok in re.findall(r"\(|\)|\.\.\.|\w+", side):
        if tok == "(":
            group = []
        elif tok == ")":
            tokens.append(group)
            group = None
        else:
            (group if group is not None else tokens).append(tok)
    return tokens


def _transform(x: torch.Tensor, pattern: str, allow_new: bool, sizes: dict) -> torch.Tensor:
    left, right = (_parse(s) for s in pattern.split("->"))
    sizes = dict(sizes)
    n_ellipsis = x.dim() - (len(left) - (1 if "..." in left else 0))
    names, shape, dim = [], [], 0
    for tok in left:                                   # split x's dims into elementary axes
        if tok == "...":
            for j in range(n_ellipsis):
                names.append(f"...{j}")
                sizes[f"...{j}"] = x.shape[dim]
                shape.append(x.shape[dim])
                dim += 1
            continue
        group = tok if isinstance(tok, list) else [tok]
        known = math.prod(int(a) if a.isdigit() else sizes.get(a, 1) for a in group)
        for a in group:
            if not a.isdigit() and a not in sizes:
                sizes[a] = x.shape[dim] // known
        for a in group:
            names.append(None if a.isdigit() else a)
            shape.append(int(a) if a.isdigit() else sizes[a])
        dim += 1
    x = x.reshape([s for a, s in zip(names, shape) if a is not None])
    names = [a for a in names if a is not None]
    out_names, out_groups = [], []
    for i, tok in enumerate(right):                    # the output's elementary axes, by group
        if tok == "...":                               # each of the ellipsis' dims stays a dim
            out_names += [f"...{j}" for j in range(n_ellipsis)]
            out_groups += [[f"...{j}"] for j in range(n_ellipsis)]
            continue
        group = tok if isinstance(tok, list) else [tok]
        members = []
        for a in group:
            if a.isdigit():
                a, sizes[f"#{i}{len(members)}"] = f"#{i}{len(members)}", int(a)
            elif a not in names and not allow_new:
                raise ValueError(f"rearrange: axis {a} of {pattern!r} is not on the left")
            members.append(a)
        out_names += members
        out_groups.append(members)
    x = x.permute([names.index(a) for a in out_names if a in names])
    x = x.reshape([sizes[a] if a in names else 1 for a in out_names])
    x = x.expand([sizes[a] for a in out_names])
    return x.reshape([math.prod(sizes[a] for a in g) for g in out_groups])


def rearrange(x: torch.Tensor, pattern: str, **sizes) -> torch.Tensor:
    return _transform(x, pattern, False, sizes)


def repeat(x: torch.Tensor, pattern: str, **sizes) -> torch.Tensor:
    return _transform(x, pattern, True, sizes)
