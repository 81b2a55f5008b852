"""What goes wrong when a learner prepends the class token and adds the position table.

The diagnosis behind :func:`vit_tutorial.exercises.patches.check_class_token_and_position`
(chapter 2, exercise 4): the learner's module must hold two parameters, ``cls_token`` of
shape ``(1, 1, D)`` and ``pos_embed`` of shape ``(1, N + 1, D)``, and turn ``(B, N, D)``
patch tokens into ``[cls; tokens] + pos_embed``, equation (1) of the ViT paper.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor, nn

from vit_tutorial.exercises._common import close, diagnose, shape_of

__all__ = ["grade_forward", "parameter_problem"]

_MISSING = (
    "the module has no parameter {name} after __init__. Register it there: "
    "self.{name} = nn.Parameter(...), of shape {shape}. A tensor made in forward, "
    "such as torch.randn(batch, 1, D), is a new random vector at every call and is "
    "never learned"
)
_AT_END = (
    "the class token is at the end of the sequence; it goes in front, at position 0, "
    "where the classification head reads it (x[:, 0]): torch.cat([cls, tokens], dim=1)"
)
_BEFORE = (
    "the positions were added before the class token was put in front: patch n got "
    "row n of the table, and the class token none. Concatenate first, then add the "
    "whole (1, N + 1, D) table"
)
_NO_CLASS_POSITION = (
    "the class token gets no position: rows 1 to N of the table went to the patches "
    "before the concatenation, and row 0 to nothing. Concatenate first, then add the "
    "whole (1, N + 1, D) table"
)


def parameter_problem(module: nn.Module, num_patches: int, dim: int) -> str | None:
    """Why the module's ``cls_token`` or ``pos_embed`` is missing or misshapen, else None."""
    N, D = num_patches, dim
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
            f"the class token has a batch dimension, shape {tuple(cls.shape)}: it only works "
            f"for batches of {cls.shape[0]} images, and it learns {cls.shape[0]} different "
            f"tokens, one per place in the batch. A ViT learns one class token, shared by "
            f"every image: make it (1, 1, D) and expand it to the batch in forward, "
            f"self.cls_token.expand(B, -1, -1)"
        )
    if cls.numel() != D or cls.shape[-1] != D:
        return f"cls_token must have shape (1, 1, D) = (1, 1, {D}), got {tuple(cls.shape)}"
    if pos.numel() == N * D and pos.shape[-1] == D:
        return (
            f"pos_embed has N = {N} rows, one per patch, so the class token gets no "
            f"position. In equation (1) the table has a row for the class token too, its "
            f"first, and is added after the concatenation: shape (1, N + 1, D) = "
            f"(1, {N + 1}, {D})"
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


def _mistakes(tokens: Tensor, cls: Tensor, pos: Tensor) -> list[tuple[str, Tensor]]:
    """What the usual mistakes compute, each with its explanation."""
    B, N, _ = tokens.shape
    c = cls.expand(B, -1, -1)  # (B, 1, D)
    return [
        (_AT_END, torch.cat([tokens, c], 1) + pos),
        (_AT_END, torch.cat([tokens + pos[:, 1:], c + pos[:, :1]], 1)),
        (_AT_END, torch.cat([tokens + pos[:, :N], c], 1)),
        (_BEFORE, torch.cat([c, tokens + pos[:, :N]], 1)),
        (_NO_CLASS_POSITION, torch.cat([c, tokens + pos[:, 1:]], 1)),
        ("the positions are not added: add self.pos_embed", torch.cat([c, tokens], 1)),
    ]


def grade_forward(module: nn.Module, tokens: Tensor, cls: Tensor, pos: Tensor, what: str) -> None:
    """Grade ``module(tokens)`` against ``[cls; tokens] + pos``, gradients included.

    ``module.cls_token`` and ``module.pos_embed`` already hold ``cls`` ``(1, 1, D)`` and
    ``pos`` ``(1, N + 1, D)``; an :class:`AssertionError` names the mistake.
    """
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
    want = torch.cat([cls.expand(B, -1, -1), tokens], 1) + pos  # (B, N + 1, D)
    if not isinstance(got, Tensor) or got.shape != want.shape:
        hint = "the class token is missing" if shape_of(got) == (B, N, D) else "join along dim=1"
        raise AssertionError(
            f"{case}: the output must have shape (B, N + 1, D) = {tuple(want.shape)}, "
            f"got {shape_of(got)}; {hint}"
        )
    if not close(got, want):
        patches_right = close(got[:, 1:], want[:, 1:])
        otherwise = (
            "the patch tokens are right, but token 0 is not self.cls_token plus row 0 of "
            "the table: prepend the module's own parameter"
            if patches_right
            else f"differs from [cls; tokens] + pos_embed by up to "
            f"{(got.detach() - want).abs().max().item():.3g}"
        )
        raise AssertionError(f"{case}: {diagnose(got, _mistakes(tokens, cls, pos), otherwise)}")
    if got.requires_grad:
        got.sum().backward()
    for name in ("cls_token", "pos_embed"):
        if getattr(module, name).grad is None:
            raise AssertionError(
                f"{case}: the numbers are right, but no gradient reaches self.{name}, so "
                f"it is never learned: build the output from the parameter itself (expand "
                f"and repeat keep the gradient; .data, .detach() or torch.tensor(...) cut it)"
            )
