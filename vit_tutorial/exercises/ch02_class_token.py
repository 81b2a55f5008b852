"""Checker for chapter 2's class token and position table: the learner's module prepends one
learned class token to the patch tokens and adds the ``(1, N + 1, D)`` position table,
equation (1) of the ViT paper."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from vit_tutorial.exercises._common import (
    call_safely,
    checker,
    close,
    grade_answer,
    passed,
    shape_of,
)

__all__ = ["check_class_token_and_position"]

_MISSING = (
    "the module has no parameter {name} after __init__. Register it there: self.{name} = "
    "nn.Parameter(...), of shape {shape}. A tensor made in forward, such as torch.randn(batch, 1, "
    "D), is a new random vector at every call and is never learned"
)
_AT_END = (
    "the class token is at the end of the sequence; it goes in front, at position 0, "
    "where the classification head reads it (x[:, 0]): torch.cat([cls, tokens], dim=1)"
)
_AFTER = "Concatenate first, then add the whole (1, N + 1, D) table"


def _parameter_problem(module: nn.Module, N: int, D: int) -> str | None:
    """Why the module's ``cls_token`` or ``pos_embed`` is missing or misshapen, else None."""
    for name, shape in [("cls_token", "(1, 1, D)"), ("pos_embed", "(1, N + 1, D)")]:
        value = getattr(module, name, None)
        if not isinstance(value, Tensor):
            return _MISSING.format(name=name, shape=shape)
        if not isinstance(value, nn.Parameter):
            return (
                f"self.{name} is a plain tensor, not an nn.Parameter: model.parameters() "
                f"does not list it, so no optimiser ever updates it; wrap it in nn.Parameter"
            )
    cls, pos = module.cls_token, module.pos_embed
    if cls.dim() == 3 and cls.shape[0] > 1 and tuple(cls.shape[1:]) == (1, D):
        return (
            f"the class token has a batch dimension, shape {tuple(cls.shape)}: it only works for "
            f"batches of {cls.shape[0]} images, and it learns {cls.shape[0]} different tokens, one "
            "per place in the batch. A ViT learns one class token, shared by every image: make it "
            "(1, 1, D) and expand it to the batch in forward, self.cls_token.expand(B, -1, -1)"
        )
    if cls.numel() != D or cls.shape[-1] != D:
        return f"cls_token must have shape (1, 1, D) = (1, 1, {D}), got {tuple(cls.shape)}"
    if pos.numel() == N * D and pos.shape[-1] == D:
        return (
            f"pos_embed has N = {N} rows, one per patch, so the class token gets no position. In "
            "equation (1) the table has a row for the class token too, its first, and is added "
            f"after the concatenation: shape (1, N + 1, D) = (1, {N + 1}, {D})"
        )
    if pos.numel() != (N + 1) * D or pos.shape[-1] != D:
        return (
            f"pos_embed must have shape (1, N + 1, D) = (1, {N + 1}, {D}), one row per "
            f"token, got {tuple(pos.shape)}"
        )
    return None


def _crash_hint(error: Exception, num_patches: int) -> str:
    """A hint for the usual crashes of a forward: torch.cat's axes, or N + 1 rows on N."""
    text = str(error)
    axis = re.search(r"Sizes of tensors must match except in dimension (-?\d+)", text)
    if axis and int(axis.group(1)) == 1:
        return (
            "; torch.cat needs the class token expanded to the batch of the tokens: "
            "self.cls_token.expand(B, -1, -1) with B = tokens.shape[0], not a fixed number"
        )
    if axis:
        return (
            f"; torch.cat joined them along dimension {axis.group(1)}, but the tokens are "
            f"axis 1 of (B, N, D): torch.cat([cls, tokens], dim=1)"
        )
    if f"({num_patches})" in text and f"({num_patches + 1})" in text:
        return (
            "; the (1, N + 1, D) table was added to the N patch tokens before the class "
            "token was put in front: concatenate first, then add"
        )
    return ""


def _forward_slips(tokens: Tensor, cls: Tensor, pos: Tensor) -> dict[str, Any]:
    """What the usual mistakes compute."""
    B, N, _ = tokens.shape
    c = cls.expand(B, -1, -1)  # (B, 1, D)
    want = torch.cat([c, tokens], 1) + pos
    return {
        _AT_END: [
            torch.cat([tokens, c], 1) + pos,
            torch.cat([tokens + pos[:, 1:], c + pos[:, :1]], 1),
            torch.cat([tokens + pos[:, :N], c], 1),
        ],
        "the positions were added before the class token was put in front: patch n got "
        f"row n of the table, and the class token none. {_AFTER}": torch.cat(
            [c, tokens + pos[:, :N]], 1
        ),
        "the class token gets no position: rows 1 to N of the table went to the patches "
        f"before the concatenation, and row 0 to nothing. {_AFTER}": torch.cat(
            [c, tokens + pos[:, 1:]], 1
        ),
        "the positions are not added: add self.pos_embed": torch.cat([c, tokens], 1),
        "the patch tokens are right, but token 0 is not self.cls_token plus row 0 of "
        "the table: prepend the module's own parameter": lambda got: close(got[:, 1:], want[:, 1:]),
    }


def _grade_forward(module: nn.Module, tokens: Tensor, cls: Tensor, pos: Tensor, what: str) -> None:
    """Grade ``module(tokens)`` against ``[cls; tokens] + pos``, gradients included, once
    ``module.cls_token`` and ``module.pos_embed`` hold ``cls`` and ``pos``."""
    B, N, D = tokens.shape
    case = f"{what}, tokens of shape {(B, N, D)}"
    module.zero_grad(set_to_none=True)
    try:
        with torch.enable_grad():
            got = module(tokens.clone())
    except Exception as error:  # reported to the learner
        raise AssertionError(
            f"forward crashed on {case}: {type(error).__name__}: {str(error).rstrip('.')}"
            + _crash_hint(error, N)
        ) from error
    missing = "the class token is missing"
    grade_answer(
        got,
        torch.cat([cls.expand(B, -1, -1), tokens], 1) + pos,  # (B, N + 1, D)
        case,
        lambda: _forward_slips(tokens, cls, pos),
        expected=lambda got: (
            f"{case}: the output must have shape (B, N + 1, D) = "
            f"{(B, N + 1, D)}, got {shape_of(got)}; "
            + (missing if shape_of(got) == (B, N, D) else "join along dim=1")
        ),
        otherwise="differs from [cls; tokens] + pos_embed by up to {diff}",
    )
    if got.requires_grad:
        got.sum().backward()
    for name in ("cls_token", "pos_embed"):
        if getattr(module, name).grad is None:
            raise AssertionError(
                f"{case}: the numbers are right, but no gradient reaches self.{name}, so "
                f"it is never learned: build the output from the parameter itself (expand "
                f"and repeat keep the gradient; .data, .detach() or torch.tensor(...) cut it)"
            )


@checker
def check_class_token_and_position(fn: Callable[[int, int], nn.Module]) -> None:
    """Grade ``fn(num_patches, dim) -> module``: the class token and the position table.

    The module holds ``cls_token`` ``(1, 1, D)`` and ``pos_embed`` ``(1, N + 1, D)``; its forward
    turns ``(B, N, D)`` tokens into ``[cls; tokens] + pos_embed``, ``(B, N + 1, D)``, for any
    batch size, with gradients reaching both parameters; ``expand`` and ``repeat`` both pass.

    Example:
        >>> class TokenInput(nn.Module):
        ...     def __init__(self, num_patches, dim):
        ...         super().__init__()
        ...         self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        ...         self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        ...     def forward(self, tokens):
        ...         cls = self.cls_token.expand(len(tokens), -1, -1)
        ...         return torch.cat([cls, tokens], dim=1) + self.pos_embed
        >>> check_class_token_and_position(TokenInput)
        Correct! check_class_token_and_position: one class token in front for any batch
        size, then the (1, N + 1, D) table added, on 2 sizes; gradients reach both.
    """
    generator = torch.Generator().manual_seed(0)
    for N, D in [(6, 8), (4, 12)]:
        what = f"fn(num_patches={N}, dim={D})"
        module = call_safely(fn, (N, D), what, grad=True)
        if not isinstance(module, nn.Module):
            raise AssertionError(f"{what} must return an nn.Module, got {type(module).__name__}")
        if (problem := _parameter_problem(module, N, D)) is not None:
            raise AssertionError(f"{what}: {problem}")
        cls = torch.randn(1, 1, D, generator=generator)
        pos = torch.randn(1, N + 1, D, generator=generator)
        with torch.no_grad():
            module.cls_token.copy_(cls.reshape(module.cls_token.shape))
            module.pos_embed.copy_(pos.reshape(module.pos_embed.shape))
        for batch in (2, 3):
            _grade_forward(module, torch.randn(batch, N, D, generator=generator), cls, pos, what)
    passed(
        "one class token in front for any batch size, then the (1, N + 1, D) table added, "
        "on 2 sizes; gradients reach both."
    )
