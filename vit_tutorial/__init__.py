"""vit_tutorial: Vision Transformers from scratch, one module per chapter of the book.

Every public name is re-exported here, so ``from vit_tutorial import MultiHeadSelfAttention``
works as well as ``from vit_tutorial.attention import MultiHeadSelfAttention``.
"""

from vit_tutorial.attention import (
    MultiHeadSelfAttention,
    attention_weights,
    scaled_dot_product_attention,
)

__version__ = "0.1.0"

__all__ = [
    "MultiHeadSelfAttention",
    "attention_weights",
    "scaled_dot_product_attention",
]
