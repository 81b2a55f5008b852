"""Property tests: any argument either works or is refused clearly.

Hypothesis draws arbitrary values (wrong types, zeros, negatives, NaN, infinities, odd
sizes) for the public constructors and functions. Each call must either succeed and
return something of the promised shape, or raise ``TypeError``/``ValueError`` whose
message names the offending argument (or shows its value): never an ``AttributeError``,
``ZeroDivisionError``, ``OverflowError`` or a torch-internal ``RuntimeError``.
"""

from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.axial import AxialViT, attention_flops, axial_mask
from vit_tutorial.encoder import EncoderBlock, drop_path, drop_path_rates
from vit_tutorial.patches import PatchEmbedding, image_to_patches, patch_grid
from vit_tutorial.positional import (
    RelativePositionBias,
    RotaryEmbedding2D,
    resize_pos_embed,
    sinusoidal_1d,
    sinusoidal_2d,
)
from vit_tutorial.vit import VisionTransformer

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

#: Anything a learner might pass where a small positive integer is expected.
ANY = st.one_of(
    st.integers(-3, 9),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.tuples(st.integers(-2, 9), st.integers(-2, 9)),
    st.lists(st.integers(0, 4), max_size=3),
)
SMALL_INT = st.one_of(st.integers(1, 8), ANY)
RATE = st.one_of(st.floats(0, 0.9), ANY)


def refused_clearly(error: Exception, **arguments) -> bool:
    """A TypeError/ValueError naming one of ``arguments`` (by name or by value)."""
    if not isinstance(error, (TypeError, ValueError)):
        return False
    message = str(error)
    # A short value such as 0 or 1 appears in almost any message: only its name counts then.
    return any(
        name in message
        or name.replace("_", " ") in message
        or (len(repr(value)) >= 4 and (repr(value) in message or str(value) in message))
        for name, value in arguments.items()
    )


def call(fn, **arguments):
    """``fn(**arguments)``, or ``None`` when it refused clearly; any other failure fails."""
    try:
        return fn(**arguments)
    except Exception as error:  # noqa: BLE001  (judged below)
        assert refused_clearly(error, **arguments), f"{type(error).__name__}: {error}"
        return None


@SETTINGS
@given(
    image_size=st.one_of(st.sampled_from([8, 12, (8, 12)]), ANY),
    patch_size=st.one_of(st.sampled_from([2, 4, (4, 2)]), ANY),
    dim=st.one_of(st.sampled_from([8, 16]), ANY),
    depth=st.one_of(st.just(1), ANY),
    num_heads=st.one_of(st.sampled_from([1, 2, 4]), ANY),
    mlp_ratio=st.one_of(st.floats(0.1, 4), ANY),
    dropout=RATE,
    drop_path=RATE,
    norm_eps=st.one_of(st.just(1e-6), ANY),
    pool=st.sampled_from(["cls", "mean", "max"]),
    pos_embed=st.sampled_from(["learned", "sincos2d", "relative", "none", "rope"]),
)
def test_vision_transformer_builds_and_runs_or_refuses(**fields):
    model = call(VisionTransformer, in_channels=1, num_classes=3, **fields)
    if model is not None:
        H, W = model.patch_embed.image_size
        assert model(torch.randn(2, 1, H, W)).shape == (2, 3)


@SETTINGS
@given(
    image_size=st.one_of(st.just(8), ANY),
    patch_size=st.one_of(st.just(2), ANY),
    dim=st.one_of(st.just(8), ANY),
    num_heads=st.one_of(st.just(2), ANY),
    pos_embed=st.sampled_from(["learned", "sincos2d", "none"]),
)
def test_axial_vit_builds_and_runs_or_refuses(**fields):
    model = call(AxialViT, in_channels=1, num_classes=3, depth=1, **fields)
    if model is not None:
        H, W = model.patch_embed.image_size
        assert model(torch.randn(2, 1, H, W)).shape == (2, 3)


@SETTINGS
@given(
    dim=SMALL_INT,
    num_heads=SMALL_INT,
    mlp_ratio=st.one_of(st.floats(0.1, 4), ANY),
    drop_path=RATE,
    norm_eps=st.one_of(st.just(1e-5), ANY),
)
def test_encoder_block_builds_and_runs_or_refuses(**arguments):
    block = call(EncoderBlock, **arguments)
    if block is not None:
        x = torch.randn(2, 3, arguments["dim"])
        assert block(x).shape == x.shape
        assert (
            call(MultiHeadSelfAttention, dim=arguments["dim"], num_heads=arguments["num_heads"])
            is not None
        )


@SETTINGS
@given(
    image_size=st.one_of(st.just(8), ANY),
    patch_size=SMALL_INT,
    dim=SMALL_INT,
    in_channels=SMALL_INT,
)
def test_patch_embedding_and_patches_or_refuse(**arguments):
    embed = call(PatchEmbedding, **arguments)
    if embed is not None:
        H, W = embed.image_size
        x = torch.randn(1, arguments["in_channels"], H, W)
        assert embed(x).shape == (1, embed.num_patches, arguments["dim"])
        patches = call(image_to_patches, images=x, patch_size=arguments["patch_size"])
        assert patches.shape[1] == embed.num_patches
    call(patch_grid, image_size=arguments["image_size"], patch_size=arguments["patch_size"])


@SETTINGS
@given(
    num_positions=SMALL_INT,
    grid_size=SMALL_INT,
    dim=st.one_of(st.sampled_from([4, 8]), ANY),
    temperature=st.one_of(st.just(10000.0), ANY),
)
def test_sinusoidal_tables_or_refuse(num_positions, grid_size, dim, temperature):
    table = call(sinusoidal_1d, num_positions=num_positions, dim=dim, temperature=temperature)
    if table is not None:
        assert table.shape == (num_positions, dim) and torch.isfinite(table).all()
    table = call(sinusoidal_2d, grid_size=grid_size, dim=dim, temperature=temperature)
    if table is not None:
        assert torch.isfinite(table).all()


@SETTINGS
@given(
    grid_size=SMALL_INT,
    num_heads=SMALL_INT,
    num_prefix_tokens=st.one_of(st.just(1), ANY),
    head_dim=st.one_of(st.just(8), ANY),
    new_grid=SMALL_INT,
)
def test_relative_rope_and_resize_or_refuse(
    grid_size, num_heads, num_prefix_tokens, head_dim, new_grid
):
    bias = call(
        RelativePositionBias,
        grid_size=grid_size,
        num_heads=num_heads,
        num_prefix_tokens=num_prefix_tokens,
    )
    if bias is not None:
        assert bias().shape[0] == num_heads
    rope = call(
        RotaryEmbedding2D,
        head_dim=head_dim,
        grid_size=grid_size,
        num_prefix_tokens=num_prefix_tokens,
    )
    if rope is not None:
        gh, gw = rope.grid_size
        x = torch.randn(1, 1, num_prefix_tokens + gh * gw, head_dim)
        assert rope(x).shape == x.shape
    table = torch.zeros(1, 1 + 4 * 4, 4)
    resized = call(resize_pos_embed, pos_embed=table, old_grid=4, new_grid=new_grid)
    if resized is not None:
        assert resized.shape[-1] == 4


@SETTINGS
@given(
    p=RATE,
    depth=SMALL_INT,
    grid_size=SMALL_INT,
    dim=SMALL_INT,
    axis=st.sampled_from(["height", "width", "depth"]),
)
def test_small_functions_or_refuse(p, depth, grid_size, dim, axis):
    out = call(drop_path, x=torch.ones(4, 2), p=p, training=True)
    if out is not None:
        assert torch.isfinite(out).all()
    rates = call(drop_path_rates, drop_path=p, depth=depth)
    if rates is not None:
        assert len(rates) == depth and all(math.isfinite(r) for r in rates)
    call(axial_mask, grid_size=grid_size, axis=axis)
    flops = call(attention_flops, grid_size=grid_size, dim=dim, kind="full")
    if flops is not None:
        assert flops > 0
