"""vitref: the reference implementation of "Transformers and Vision Transformers, from scratch".

One small module per concept; every chapter, exercise check and benchmark uses these.
"""
from .attention import AttentionHead, causal_mask, scaled_dot_product_attention, softmax
from .blocks import FeedForwardBlock, LayerNorm, ResidualAdd, TransformerEncoderBlock
from .decoder import DecoderBlock, MaskedMultiHeadAttention, Seq2SeqTransformer, ViTDecoder
from .interop import from_timm
from .multihead import CrossAttention, MultiHeadAttention, MultiHeadAttentionLoop, fused_from_loop
from .patches import (
    ChannelwisePatchEmbedding,
    ConvPatchEmbedding,
    LinearPatchEmbedding,
    PatchEmbedding,
    conv_from_linear,
    image_to_patches,
    linear_from_conv,
    patches_to_image,
)
from .positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    embedding_lookup,
    one_hot_embedding,
    sinusoidal_encoding,
)
from .vit import ViT, count_parameters, vit_b16, vit_tiny_cifar10

__version__ = "0.1.0"

__all__ = [
    "AttentionHead", "causal_mask", "scaled_dot_product_attention", "softmax",
    "FeedForwardBlock", "LayerNorm", "ResidualAdd", "TransformerEncoderBlock",
    "DecoderBlock", "MaskedMultiHeadAttention", "Seq2SeqTransformer", "ViTDecoder",
    "from_timm",
    "CrossAttention", "MultiHeadAttention", "MultiHeadAttentionLoop", "fused_from_loop",
    "ChannelwisePatchEmbedding", "ConvPatchEmbedding", "LinearPatchEmbedding", "PatchEmbedding",
    "conv_from_linear", "image_to_patches", "linear_from_conv", "patches_to_image",
    "LearnedPositionalEmbedding", "SinusoidalPositionalEncoding", "embedding_lookup", "one_hot_embedding",
    "sinusoidal_encoding",
    "ViT", "count_parameters", "vit_b16", "vit_tiny_cifar10",
]
