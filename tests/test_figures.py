"""The teaching drawings of vit_tutorial/figures.py and figures_modern.py, and the intro's map
drawn from them (tools/architecture_figure.py, book/images/vit_architecture.svg)."""

from pathlib import Path

import pytest

# matplotlib is in the book extra, not a runtime dependency (`make old-torch` has none)
matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

import architecture_figure  # noqa: E402
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from vit_tutorial.figures import (  # noqa: E402
    GREY,
    HIGHLIGHT,
    PARTS,
    draw_encoder_block,
    draw_swin_map,
    draw_vit_map,
)
from vit_tutorial.figures_modern import draw_modern_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "book" / "images" / "vit_architecture.svg"
REGENERATE = "run `python tools/architecture_figure.py`"
HIGHLIGHTS = [None, *PARTS]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _parts(fig):
    """``{patch: parts}`` for every patch the map tags with the parts it belongs to."""
    (ax,) = fig.axes
    return {
        patch: tuple(patch.get_gid().removeprefix("map:").split(","))
        for patch in ax.patches
        if (patch.get_gid() or "").startswith("map:")
    }


def _face(patch):
    return mcolors.to_hex(patch.get_facecolor())


def _texts(fig):
    return [t for t in fig.findobj(Text) if t.get_text() and t.get_visible()]


def test_the_parts_are_those_the_chapters_name():
    assert list(PARTS) == ["attention", "patches", "positions", "block", "model"]
    for number, name in enumerate(PARTS, start=1):
        assert PARTS[name].startswith(f"chapter {number}:")


@pytest.mark.parametrize("highlight", HIGHLIGHTS)
def test_every_highlight_draws_a_map_that_fits_the_column(highlight):
    fig = draw_vit_map(highlight=highlight)
    width, _ = fig.get_size_inches()
    assert 6.5 <= width <= 7.0  # a ~690-px column at 100 dpi, not shrunk below 90%
    sizes = [text.get_fontsize() for text in _texts(fig)]
    assert sizes and min(sizes) >= 9, f"text under 9 pt: {min(sizes)}"
    assert len(_parts(fig)) > 30  # image, patches, tokens, positions, stack, block, head


@pytest.mark.parametrize("highlight", [p for p in PARTS if p != "model"])
def test_the_highlighted_part_is_in_colour_and_the_rest_in_grey(highlight):
    parts = _parts(draw_vit_map(highlight=highlight))
    lit = [patch for patch, names in parts.items() if highlight in names]
    grey = [patch for patch, names in parts.items() if highlight not in names]
    assert lit and grey
    assert {_face(p) for p in lit} == {HIGHLIGHT[0]}, f"{highlight} is not highlighted"
    assert {_face(p) for p in grey} == {GREY[0]}, f"{highlight}: not all grey"
    (frame,) = [p for p in lit[0].axes.patches if p.get_gid() == "frame:block"]
    edge = HIGHLIGHT[1] if highlight == "block" else GREY[1]
    assert mcolors.to_hex(frame.get_edgecolor()) == edge  # the zoomed block's outline


def test_the_whole_model_is_highlighted_for_chapter_5():
    faces = {_face(p) for p in _parts(draw_vit_map(highlight="model"))}
    assert faces == {HIGHLIGHT[0]}


def test_nothing_highlighted_colours_each_part_by_its_chapter():
    parts = _parts(draw_vit_map())
    faces = {_face(p) for p in parts}
    assert len(faces) == len(PARTS)  # one colour per chapter
    assert not faces & {HIGHLIGHT[0], GREY[0]}
    attention = [p for p, names in parts.items() if "attention" in names]
    positions = [p for p, names in parts.items() if names == ("positions",)]
    assert len({_face(p) for p in attention}) == 1 and len(positions) == 10  # class token too
    assert _face(attention[0]) != _face(positions[0])


@pytest.mark.parametrize("bad", ["head", "Block", "", "encoder"])
def test_a_bad_highlight_names_itself_and_the_allowed_names(bad):
    with pytest.raises(ValueError, match=repr(bad)) as error:
        draw_vit_map(highlight=bad)
    for name in PARTS:
        assert repr(name) in str(error.value)


def test_draws_into_given_axes():
    fig, ax = plt.subplots(figsize=(7, 4.4))
    assert draw_vit_map("patches", ax=ax) is fig
    assert ax.patches


def test_the_encoder_block_names_the_package_modules_and_shapes():
    fig = draw_encoder_block()
    assert 6.5 <= fig.get_size_inches()[0] <= 7.0
    texts = [t.get_text() for t in _texts(fig)]
    for name in ("norm1", "attn", "norm2", "mlp", "(B, T, D)", "LayerNorm", "MLP"):
        assert name in texts, name
    assert any("GELU" in t for t in texts) and any("EncoderBlock" in t for t in texts)
    assert min(t.get_fontsize() for t in _texts(fig)) >= 9


@pytest.mark.parametrize(
    "draw", [draw_vit_map, draw_encoder_block, draw_swin_map, draw_modern_block]
)
def test_no_text_leaves_the_figure_or_overlaps_another(draw):
    fig = draw()
    fig.canvas.draw()  # lays out the legend
    renderer = fig.canvas.get_renderer()
    texts = _texts(fig)
    extents = [t.get_window_extent(renderer) for t in texts]
    for text, extent in zip(texts, extents, strict=True):
        label = repr(text.get_text())
        assert fig.bbox.x0 <= extent.x0 and extent.x1 <= fig.bbox.x1, f"{label} leaves the page"
        assert fig.bbox.y0 <= extent.y0 and extent.y1 <= fig.bbox.y1, f"{label} leaves the page"
    for i, a in enumerate(extents):
        for j in range(i + 1, len(extents)):
            assert not a.overlaps(extents[j]), (texts[i].get_text(), texts[j].get_text())


def test_committed_svg_is_what_the_script_draws(tmp_path):
    drawn = architecture_figure.write(tmp_path / "vit_architecture.svg").read_bytes()
    assert drawn == COMMITTED.read_bytes(), (
        f"book/images/vit_architecture.svg is stale: {REGENERATE}"
    )


def test_drawing_twice_gives_the_same_bytes(tmp_path):
    first = architecture_figure.write(tmp_path / "a.svg").read_bytes()
    assert architecture_figure.write(tmp_path / "b.svg").read_bytes() == first


def test_the_swin_map_shows_four_shrinking_stages_beside_one_vit_resolution():
    fig = draw_swin_map()
    assert 6.5 <= fig.get_size_inches()[0] <= 7.0
    assert min(t.get_fontsize() for t in _texts(fig)) >= 9
    (ax,) = fig.axes
    squares = {p.get_gid(): p for p in ax.patches if (p.get_gid() or "")[:4] in ("swin", "vit:")}
    swin = [squares[f"swin:{i}"].get_width() for i in range(4)]
    vit = {squares[f"vit:{i}"].get_width() for i in range(4)}
    assert swin == sorted(swin, reverse=True) and len(set(swin)) == 4  # the grid halves
    assert len(vit) == 1  # one resolution throughout
    texts = " ".join(t.get_text() for t in _texts(fig))
    for fact in ("56×56, C = 96", "28×28, C = 192", "14×14, C = 384", "7×7, C = 768"):
        assert fact in texts, fact
    assert "stage 3: 6 blocks" in texts and "blocks 10–12" in texts and "14×14, D = 768" in texts


def test_the_swin_map_draws_into_given_axes():
    fig, ax = plt.subplots(figsize=(7, 3.4))
    assert draw_swin_map(ax=ax) is fig


# --- chapter 11's map: the block of 2020 beside the block of the mid-2020s -------------------


def _bounds(patch):
    """A patch's extent in data units (inches of the drawing), circles included."""
    return patch.get_path().transformed(patch.get_patch_transform()).get_extents()


def _columns(fig):
    """``(old, new, floor)``: ``{bounds: parts}`` of the 2020 column and of the modern one,
    split at the modern block's frame, and the bottom of that frame."""
    (ax,) = fig.axes
    (frame,) = [_bounds(p) for p in ax.patches if p.get_gid() == "frame:new"]
    old, new = {}, {}
    for patch, names in _parts(fig).items():
        bounds = _bounds(patch)
        (old if bounds.x0 < frame.x0 else new)[bounds] = (names, _face(patch))
    return old, new, frame.y0


def test_the_modern_block_colours_only_what_changed():
    old, new, _ = _columns(draw_modern_block())
    assert {face for _, face in old.values()} == {GREY[0]}  # 2020: nothing new
    lit = {face for names, face in new.values() if names == ("new",)}
    assert lit == {HIGHLIGHT[0]}
    assert {face for names, face in new.values() if names != ("new",)} == {GREY[0]}
    # two RMSNorms and the final one, QK-norm/RoPE, two LayerScales, SwiGLU, MAP head, registers
    assert sum(names == ("new",) for names, _ in new.values()) == 3 + 1 + 2 + 1 + 1 + 4


def test_the_modern_block_keeps_the_layout_of_2020_slot_for_slot():
    old, new, floor = _columns(draw_modern_block())
    old_ys, new_ys = ({round(b.y0, 6) for b in side if b.width > 1} for side in (old, new))
    # the norms, attention, the MLP, the final norm and the head stand at the same heights;
    # the modern block adds two LayerScales and QK-norm/RoPE inside attention
    assert len(old_ys) == 6 and old_ys <= new_ys and len(new_ys - old_ys) == 3
    for side, tokens, positions in ((old, 7, 7), (new, 10, 5)):  # the table: patches only
        below = [round(b.height, 6) for b in side if b.y1 <= floor]
        assert (below.count(0.2), below.count(0.22)) == (tokens, positions)


def test_the_modern_block_draws_into_given_axes():
    fig, ax = plt.subplots(figsize=(7, 5.6))
    assert draw_modern_block(ax=ax) is fig
    assert ax.patches


def test_the_modern_block_draws_the_same_bytes_twice(tmp_path):
    def draw(path):
        with matplotlib.rc_context():
            matplotlib.rcdefaults()
            matplotlib.rcParams["svg.hashsalt"] = "modern-block"
            draw_modern_block().savefig(path, format="svg", metadata={"Date": None})
        return path.read_bytes()

    assert draw(tmp_path / "a.svg") == draw(tmp_path / "b.svg")
