"""A corpus of honest idioms: realistic answers and helpers, written as students of the course
write them, that the grader must neither hold for review (:func:`autograder.judging.scan.flags`)
nor zero (:func:`autograder.judging.scan.scan_source`), and that grade with full marks.

Each idiom is a solutions notebook with one thing changed (an answer replaced, a cell added or
wrapped in a magic). Every idiom is checked statically (fast): the notebook as the grader reads
it (:func:`autograder.student.cells.code_cells`, IPython syntax rewritten by IPython's own
transformer) raises no flag and no forbidden-function hit for any question of its assignment.
The idioms marked ``graded`` (at least one per assignment 01-08) are graded in the sandbox, as a
class, and must score every automatic question's full points, with nothing held (slow).

The first seven are what a red team found held or zeroed before: a computed ``getattr`` on
``nn``; a ``hasattr(F, ...)`` guard; ``gc.collect()``; ``importlib.metadata``; a loss class's own
``log_softmax`` method; a continuation line starting with ``%``; a comparison with the library
function above the answer in the same cell (the ban's ``ForbiddenCall`` used to stop the cell).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import nbformat
import pytest

import autograder
import grading_students as S
from autograder.judging.scan import flags, scan_object, scan_source
from autograder.student import cells as C

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Idiom:
    name: str             # also the synthetic student's name
    assignment: str
    edit: Callable        # nb -> nb (a solutions notebook, changed)
    graded: bool = False  # graded in the sandbox too (slow)


def _code(source: str) -> str:
    return textwrap.dedent(source).strip("\n") + "\n"


def replace(name: str, source: str):
    """Replace the first code cell that defines ``name`` (top-level def/class)."""
    return lambda nb: S.replace_definition(nb, name, _code(source))


def insert(source: str, before: str | None = None):
    """A new code cell before the cell defining ``before`` (default: after the imports)."""
    return lambda nb: S.insert_cell(nb, _code(source), before)


def after(name: str, source: str):
    """A new code cell after the (last) cell that defines ``name``."""
    def edit(nb):
        index = max(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and S._defines(c.source, name))
        nb.cells.insert(index + 1, nbformat.v4.new_code_cell(_code(source)))
        return nb
    return edit


def prefix(name: str, lines: str):
    """Lines added at the top of the (first) cell that defines ``name`` (a cell magic...)."""
    def edit(nb):
        cell = next(c for c in nb.cells if c.cell_type == "code" and S._defines(c.source, name))
        cell.source = _code(lines) + cell.source
        return nb
    return edit


def both(*edits):
    def edit(nb):
        for one in edits:
            nb = one(nb)
        return nb
    return edit


IDIOMS = [
    # ------------------------------------------------------------------ what the red team found
    Idiom("ffn_getattr_activation", "05_blocks", replace("FeedForwardBlock", '''
        class FeedForwardBlock(nn.Sequential):
            def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None, activation="GELU"):
                hidden = hidden_dim or expansion * emb_size
                act = getattr(nn, activation)()          # "GELU", "ReLU", "SiLU"...
                super().__init__(nn.Linear(emb_size, hidden), act, nn.Dropout(drop_p), nn.Linear(hidden, emb_size))


        print(FeedForwardBlock(8, activation="ReLU"))
        '''), graded=True),
    Idiom("sdpa_hasattr_guard", "03_attention", after("scaled_dot_product_attention", '''
        # Compare with PyTorch's fused kernel, where this version of PyTorch has it.
        if hasattr(F, "scaled_dot_product_attention"):
            q, k, v = torch.randn(3, 2, 5, 8).unbind(0)
            mine, _ = scaled_dot_product_attention(q, k, v)
            print("same as PyTorch:", torch.allclose(mine, F.scaled_dot_product_attention(q, k, v), atol=1e-6))
        '''), graded=True),
    Idiom("gc_collect", "07_vit", after("ViT", '''
        import gc

        del model, logits, attentions        # free the demo model before the next exercise
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        '''), graded=True),
    Idiom("importlib_metadata_version", "02_positional_encoding", insert('''
        from importlib.metadata import version

        print("torch", version("torch"), "| numpy", version("numpy"))
        '''), graded=True),
    Idiom("loss_class_own_log_softmax", "07_vit", replace("smoothed_cross_entropy", '''
        class SmoothedCrossEntropy:
            """Cross-entropy against targets smoothed towards the uniform distribution."""

            def __init__(self, smoothing=0.1):
                self.smoothing = smoothing

            @staticmethod
            def log_softmax(logits):
                shifted = logits - logits.amax(dim=-1, keepdim=True)
                return shifted - shifted.exp().sum(dim=-1, keepdim=True).log()

            def __call__(self, logits, targets):
                B, C = logits.shape
                log_probs = self.log_softmax(logits)                                  # (B, C)
                q = torch.full_like(log_probs, self.smoothing / C)
                q[torch.arange(B), targets] += 1 - self.smoothing
                return -(q * log_probs).sum(dim=-1).mean()


        def smoothed_cross_entropy(logits, targets, smoothing=0.1):
            """logits (B, C), targets (B,) integers in [0, C) -> mean smoothed loss (a 0-dim tensor)."""
            return SmoothedCrossEntropy(smoothing)(logits, targets)


        print(smoothed_cross_entropy(torch.randn(4, 10), torch.tensor([1, 0, 9, 3])))
        '''), graded=True),
    Idiom("percent_continuation_line", "01_tokens", replace("image_to_patches", '''
        def image_to_patches(images, patch_size):
            """images (B, C, H, W) -> patches (B, N, P*P*C) with N = (H/P) * (W/P)."""
            B, C, H, W = images.shape
            if H % patch_size or W % patch_size:
                raise ValueError("image size %dx%d is not divisible by patch size %d"
                                 % (H, W, patch_size))
            return rearrange(images, "b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size)


        print(image_to_patches(torch.randn(2, 3, 32, 32), 4).shape)
        '''), graded=True),
    Idiom("layernorm_compared_first", "05_blocks", replace("LayerNorm", '''
        x = torch.randn(2, 5, 8)
        reference = nn.LayerNorm(8)(x)          # what PyTorch gives, to compare with below


        class LayerNorm(nn.Module):
            def __init__(self, dim, eps=1e-5):
                super().__init__()
                self.eps = eps
                self.weight = nn.Parameter(torch.ones(dim))
                self.bias = nn.Parameter(torch.zeros(dim))

            def forward(self, x):
                mean = x.mean(dim=-1, keepdim=True)
                var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
                return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


        print(torch.allclose(LayerNorm(8)(x), reference, atol=1e-6))
        '''), graded=True),

    # ------------------------------------------------------------------ more of the course's style
    Idiom("setattr_getattr_self_heads", "04_multihead_attention", replace("MultiHeadAttentionLoop", '''
        class MultiHeadAttentionLoop(nn.Module):
            def __init__(self, emb_size, num_heads):
                super().__init__()
                self.num_heads = num_heads
                for i in range(num_heads):
                    setattr(self, f"head{i}", AttentionHead(emb_size, emb_size // num_heads))
                self.projection = nn.Linear(emb_size, emb_size)

            def forward(self, x, mask=None, return_attention=False):
                results = [getattr(self, f"head{i}")(x, mask) for i in range(self.num_heads)]
                outputs, weights = zip(*results)
                out = self.projection(torch.cat(outputs, dim=-1))
                weights = torch.stack(weights, dim=1)
                return (out, weights) if return_attention else out
        '''), graded=True),
    Idiom("dataclass_config", "07_vit", after("ViT", '''
        from dataclasses import asdict, dataclass, field


        @dataclass(frozen=True)
        class ViTConfig:
            img_size: int = 28
            patch_size: int = 7
            in_channels: int = 1
            num_classes: int = 10
            dim: int = 32
            depth: int = 2
            num_heads: int = 4
            mlp_dim: int = 64
            tags: tuple = field(default_factory=tuple)


        config = ViTConfig()
        small = ViT(**{k: v for k, v in asdict(config).items() if k != "tags"})
        print(config, sum(p.numel() for p in small.parameters()))
        ''')),
    Idiom("cell_magic_time", "07_vit", prefix("ViT", "%%time"), graded=True),
    Idiom("pip_install_magics", "01_tokens", insert('''
        !pip install -q einops
        %pip install --quiet einops
        '''), graded=True),
    Idiom("matplotlib_inline", "02_positional_encoding", after("getPositionEncoding", '''
        %matplotlib inline
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        P = getPositionEncoding(seq_len=100, d=64)
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.imshow(P, aspect="auto", cmap="RdBu")
        ax.set(xlabel="dimension", ylabel="position", title=f"{P.shape=}")
        plt.close(fig)
        ''')),
    Idiom("rearrange_layer_patches", "06_patch_embedding", replace("ConvPatchEmbedding", '''
        class ConvPatchEmbedding(nn.Module):
            def __init__(self, in_channels, patch_size, emb_size):
                super().__init__()
                self.patch_size = patch_size
                self.proj = nn.Conv2d(in_channels, emb_size, kernel_size=patch_size, stride=patch_size)
                self.to_tokens = Rearrange("b e h w -> b (h w) e")

            def forward(self, images):
                if (extra := images.shape[-1] % self.patch_size):      # walrus: the leftover pixels
                    raise ValueError(f"width {images.shape[-1]} leaves {extra} pixels out of a patch")
                return self.to_tokens(self.proj(images))


        print(ConvPatchEmbedding(3, 4, 32)(torch.randn(2, 3, 32, 32)).shape)
        '''), graded=True),
    Idiom("register_buffer_encoding", "02_positional_encoding", after("getPositionEncoding", '''
        class SinusoidalPositions(nn.Module):
            """Adds the table of getPositionEncoding to a batch of token embeddings."""

            def __init__(self, max_len: int, dim: int) -> None:
                super().__init__()
                table = torch.from_numpy(getPositionEncoding(max_len, dim)).float()
                self.register_buffer("table", table, persistent=False)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x + self.table[: x.shape[1]]


        print(SinusoidalPositions(50, 16)(torch.zeros(2, 10, 16)).shape)
        ''')),
    Idiom("type_hints_future", "03_attention", replace("scaled_dot_product_attention", '''
        from __future__ import annotations

        from typing import Optional

        from torch import Tensor


        def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor,
                                         mask: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
            d_k: int = q.shape[-1]
            scores = q @ k.transpose(-2, -1) / d_k ** 0.5
            if mask is not None:
                scores = scores.masked_fill(mask == 0, -1e9)
            weights = softmax(scores, dim=-1)
            return weights @ v, weights
        '''), graded=True),
    Idiom("functools_partial_norm", "05_blocks", replace("TransformerEncoderBlock", '''
        from functools import partial

        Norm = partial(nn.LayerNorm, eps=1e-5)


        class TransformerEncoderBlock(nn.Sequential):
            def __init__(self, emb_size=768, num_heads=8, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0,
                         mlp_dim=None):
                super().__init__(
                    ResidualAdd(nn.Sequential(Norm(emb_size), MultiHeadAttention(emb_size, num_heads),
                                              nn.Dropout(drop_p))),
                    ResidualAdd(nn.Sequential(Norm(emb_size),
                                              FeedForwardBlock(emb_size, forward_expansion, forward_drop_p,
                                                               hidden_dim=mlp_dim),
                                              nn.Dropout(drop_p))),
                )
        '''), graded=True),
    Idiom("no_grad_decorator", "04_multihead_attention", after("MultiHeadAttention", '''
        @torch.no_grad()
        def compare(fused, loop, x):
            """The largest difference between two modules' outputs on x."""
            return (fused(x) - loop(x)).abs().max().item()


        print(compare(MultiHeadAttention(16, 4), MultiHeadAttention(16, 4), torch.randn(2, 5, 16)) >= 0)
        ''')),
    Idiom("inference_mode_predict", "07_vit", after("ViT", '''
        @torch.inference_mode()
        def predict(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
            model.eval()
            return model(images).argmax(dim=-1)


        print(predict(model, torch.randn(3, 1, 28, 28)))
        ''')),
    Idiom("fstring_debug_prints", "03_attention", after("AttentionHead", '''
        out, weights = AttentionHead(dim=16, head_dim=4)(torch.randn(2, 5, 16))
        print(f"{out.shape=}, {weights.shape=}")
        print(f"rows sum to {weights.sum(-1).mean().item():.3f}; {'ok' if weights.min() >= 0 else 'negative!'}")
        ''')),
    Idiom("match_statement_activation", "05_blocks", replace("FeedForwardBlock", '''
        class FeedForwardBlock(nn.Sequential):
            def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None, activation="gelu"):
                hidden = hidden_dim or expansion * emb_size
                match activation:
                    case "gelu":
                        act = nn.GELU()
                    case "relu":
                        act = nn.ReLU()
                    case str(other):
                        raise ValueError(f"unknown activation {other!r}")
                super().__init__(nn.Linear(emb_size, hidden), act, nn.Dropout(drop_p), nn.Linear(hidden, emb_size))
        ''')),
    Idiom("super_call_forms", "04_multihead_attention", replace("MultiHeadAttention", '''
        class MultiHeadAttention(nn.Module):
            def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
                super(MultiHeadAttention, self).__init__()
                self.emb_size, self.num_heads = emb_size, num_heads
                self.qkv = nn.Linear(emb_size, emb_size * 3)
                self.att_drop = nn.Dropout(dropout)
                self.projection = nn.Linear(emb_size, emb_size)

            @property
            def head_dim(self) -> int:
                return self.emb_size // self.num_heads

            @staticmethod
            def softmax(scores):
                e = (scores - scores.amax(dim=-1, keepdim=True)).exp()
                return e / e.sum(dim=-1, keepdim=True)

            def forward(self, x, mask=None):
                qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
                queries, keys, values = qkv[0], qkv[1], qkv[2]
                energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys)
                if mask is not None:
                    energy = energy.masked_fill(mask == 0, -1e9)
                att = self.att_drop(self.softmax(energy / self.head_dim ** 0.5))
                out = torch.einsum("bhal, bhlv -> bhav", att, values)
                return self.projection(rearrange(out, "b h n d -> b n (h d)"))

            def extra_repr(self) -> str:
                return f"emb_size={self.emb_size}, num_heads={self.num_heads}"

            def __repr__(self) -> str:
                return f"{type(self).__name__}({self.extra_repr()})"


        print(MultiHeadAttention(16, 4), vars(MultiHeadAttention(16, 4))["num_heads"])
        '''), graded=True),
    Idiom("module_list_comprehension", "08_decoder", replace("DecoderBlock", '''
        class DecoderBlock(nn.Module):
            def __init__(self, dim, num_heads, mlp_dim, context_dim=None):
                super().__init__()
                self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(dim) for _ in range(3))
                self.self_attn = MultiHeadAttention(dim, num_heads)
                self.cross_attn = CrossAttention(dim, num_heads, context_dim)
                self.mlp = FeedForwardBlock(dim, hidden_dim=mlp_dim)
                self.extras = nn.ModuleList([nn.Identity() for _ in range(2)])

            def forward(self, x, context, self_mask=None):
                causal = self_mask == "causal" if isinstance(self_mask, str) else False
                sublayers = [lambda t: self.self_attn(t, causal=causal), lambda t: self.cross_attn(t, context),
                             self.mlp]
                for norm, sublayer in zip((self.norm1, self.norm2, self.norm3), sublayers):
                    x = x + sublayer(norm(x))
                for extra in self.extras:
                    x = extra(x)
                return x
        ''')),
    Idiom("math_sqrt_scaling", "03_attention", replace("scaled_dot_product_attention", '''
        import math


        def scaled_dot_product_attention(q, k, v, mask=None):
            scale = 1 / math.sqrt(q.size(-1))
            scores = torch.matmul(q, k.transpose(-2, -1)) * scale
            if mask is not None:
                scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
            weights = softmax(scores, dim=-1)
            return torch.matmul(weights, v), weights
        '''), graded=True),
    Idiom("assert_shape_checks", "08_decoder", replace("CrossAttention", '''
        class CrossAttention(nn.Module):
            def __init__(self, emb_size, num_heads, context_dim=None):
                super().__init__()
                assert emb_size % num_heads == 0, f"{emb_size=} is not a multiple of {num_heads=}"
                self.num_heads = num_heads
                context_dim = context_dim or emb_size
                self.query = nn.Linear(emb_size, emb_size)
                self.key_value = nn.Linear(context_dim, 2 * emb_size)
                self.projection = nn.Linear(emb_size, emb_size)

            def forward(self, x, context, mask=None, return_attention=False):
                assert x.ndim == 3 and context.ndim == 3, (x.shape, context.shape)
                assert x.shape[0] == context.shape[0], "x and context must have the same batch size"
                q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
                k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
                scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
                if mask is not None:
                    scores = scores.masked_fill(mask == 0, -1e9)
                weights = scores.softmax(dim=-1)
                out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
                return (out, weights) if return_attention else out
        '''), graded=True),
    Idiom("named_parameters_table", "07_vit", after("ViT", '''
        for name, p in model.named_parameters():
            print(f"{name:40s} {str(tuple(p.shape)):>16s} {p.numel():>8,d}")
        print(f"total: {sum(p.numel() for p in model.parameters()):,}")
        ''')),
    Idiom("warnings_filter", "01_tokens", insert('''
        import warnings

        warnings.filterwarnings("ignore", category=UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
        ''')),
    Idiom("tqdm_training_loop", "07_vit", after("cross_entropy", '''
        from tqdm.auto import tqdm

        toy = ViT(img_size=8, patch_size=4, in_channels=1, num_classes=3, dim=16, depth=1, num_heads=2, mlp_dim=32)
        optimizer = torch.optim.AdamW(toy.parameters(), lr=1e-3)
        images, labels = torch.randn(8, 1, 8, 8), torch.randint(0, 3, (8,))
        for step in tqdm(range(3), desc="toy training", disable=True):
            loss = cross_entropy(toy(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"{loss.item():.3f}")
        ''')),
    Idiom("lambda_activation", "06_patch_embedding", after("ConvPatchEmbedding", '''
        swish = lambda t: t * torch.sigmoid(t)      # a one-off activation for the demo
        tokens = ConvPatchEmbedding(3, 4, 32)(torch.randn(2, 3, 32, 32))
        print(swish(tokens).shape, sorted(map(lambda s: s * 2, tokens.shape)))
        ''')),
    Idiom("seeds_and_generators", "02_positional_encoding", insert('''
        import random

        random.seed(0)
        np.random.seed(0)
        torch.manual_seed(0)
        generator = torch.Generator().manual_seed(1)
        noise = torch.randn(4, 4, generator=generator)
        torch.set_printoptions(precision=3, sci_mode=False)
        ''')),
    Idiom("setattr_qkv_in_init", "03_attention", replace("AttentionHead", '''
        class AttentionHead(nn.Module):
            def __init__(self, dim, head_dim):
                super().__init__()
                for name in ("query", "key", "value"):
                    setattr(self, name, nn.Linear(dim, head_dim))

            def forward(self, x, mask=None):
                q, k, v = (getattr(self, name)(x) for name in ("query", "key", "value"))
                return scaled_dot_product_attention(q, k, v, mask)
        '''), graded=True),
    Idiom("enumerate_blocks_device", "07_vit", after("ViT", '''
        device = torch.device("cuda" if torch.cuda.is_available() else
                              "mps" if hasattr(torch.backends, "mps") and torch.backends.mps.is_available() else "cpu")
        model = model.to(device)
        x = torch.randn(2, 1, 28, 28, device=device)
        tokens = torch.cat([model.cls_token.expand(2, -1, -1), model.patch_embed(x)], dim=1) + model.pos_embed
        for i, block in enumerate(model.blocks):
            tokens = block(tokens)
            print(i, tuple(tokens.shape))
        for (name, module), depth in zip(model.named_children(), range(3)):
            print(depth, name, type(module).__name__)
        ''')),
    Idiom("line_magic_time", "08_decoder", after("DecoderBlock", '''
        block = DecoderBlock(dim=16, num_heads=4, mlp_dim=32, context_dim=12)
        x, context = torch.randn(2, 5, 16), torch.randn(2, 9, 12)
        %time out = block(x, context, self_mask="causal")
        %timeit -n 1 -r 1 block(x, context)
        print(out.shape)
        '''), graded=True),
    Idiom("autoreload_and_shell", "01_tokens", insert('''
        %load_ext autoreload
        %autoreload 2
        files = !ls
        !nvidia-smi || echo "no GPU"
        ''')),
    Idiom("exc_info_and_traceback", "04_multihead_attention", after("MultiHeadAttentionLoop", '''
        import sys
        import traceback

        try:
            MultiHeadAttentionLoop(emb_size=16, num_heads=3)(torch.randn(2, 5, 16))
        except Exception:
            kind, error, _ = sys.exc_info()
            print(f"16 is not a multiple of 3 heads: {kind.__name__}: {error}")
            traceback.print_exc(limit=1)
        ''')),
    Idiom("computed_dtype_and_init", "02_positional_encoding", after("getPositionEncoding", '''
        exact = True
        dtype = getattr(torch, "float64" if exact else "float32")
        table = torch.as_tensor(getPositionEncoding(8, 4), dtype=dtype)
        scheme = "xavier_uniform"
        layer = nn.Linear(4, 4)
        getattr(nn.init, f"{scheme}_")(layer.weight)
        print(table.dtype, getattr(F, "gelu")(table).shape)
        ''')),
    Idiom("cross_entropy_module_own_log_softmax", "07_vit", replace("cross_entropy", '''
        class CrossEntropy(nn.Module):
            def log_softmax(self, logits):
                shifted = logits - logits.amax(dim=-1, keepdim=True)
                return shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))

            def forward(self, logits, targets):
                log_probs = self.log_softmax(logits)                       # the method above
                return -log_probs.gather(-1, targets.unsqueeze(-1)).mean()


        def cross_entropy(logits, targets):
            """logits (B, C), targets (B,) integers in [0, C) -> mean loss (a 0-dim tensor)."""
            return CrossEntropy()(logits, targets)


        logits, targets = torch.randn(4, 10), torch.tensor([1, 0, 9, 3])
        print(cross_entropy(logits, targets), F.cross_entropy(logits, targets))
        '''), graded=True),
    Idiom("testing_assert_close_with_library", "03_attention", after("softmax", '''
        x = torch.randn(4, 7) * 10
        torch.testing.assert_close(softmax(x), torch.softmax(x, dim=-1))
        print("softmax matches torch.softmax")
        '''), graded=True),
    Idiom("ordered_dict_sequential", "05_blocks", replace("FeedForwardBlock", '''
        from collections import OrderedDict


        class FeedForwardBlock(nn.Sequential):
            def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
                hidden = hidden_dim or expansion * emb_size
                super().__init__(OrderedDict([
                    ("expand", nn.Linear(emb_size, hidden)),
                    ("act", nn.GELU()),
                    ("drop", nn.Dropout(drop_p)),
                    ("shrink", nn.Linear(hidden, emb_size)),
                ]))
        ''')),
    Idiom("weights_init_apply", "07_vit", after("ViT", '''
        def init_weights(module):
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)


        model.apply(init_weights)
        print(type(model).__name__, model.training)
        ''')),
    Idiom("kv_cache_loop_generation", "08_decoder", after("CachedSelfAttention", '''
        attn = CachedSelfAttention(emb_size=16, num_heads=4).eval()
        tokens, cache, outputs = torch.randn(1, 6, 16), None, []
        with torch.no_grad():
            for t in range(tokens.shape[1]):
                out, cache = attn(tokens[:, t:t + 1], cache)
                outputs.append(out)
        print(torch.cat(outputs, dim=1).shape, *(c.shape for c in cache))
        ''')),
    Idiom("hasattr_and_version_checks", "06_patch_embedding", insert('''
        import sys

        print(sys.version_info >= (3, 8), hasattr(torch, "compile"), torch.__version__.split("+")[0])
        if hasattr(nn, "RMSNorm"):
            print("this PyTorch has RMSNorm")
        ''')),
]

GRADED = [idiom for idiom in IDIOMS if idiom.graded]


def _notebook(idiom: Idiom) -> bytes:
    nb = idiom.edit(S.load(idiom.assignment))
    return nbformat.writes(nb).encode()


def test_the_corpus():
    """The seven the red team found and at least twenty more; names unique; at least one
    graded notebook per assignment 01-08."""
    names = [idiom.name for idiom in IDIOMS]
    assert len(names) == len(set(names)) and len(IDIOMS) >= 7 + 20
    assert {i.assignment for i in GRADED} >= {f"0{n}_{a}" for n, a in [
        (1, "tokens"), (2, "positional_encoding"), (3, "attention"), (4, "multihead_attention"), (5, "blocks"),
        (6, "patch_embedding"), (7, "vit"), (8, "decoder")]}


@pytest.mark.parametrize("idiom", IDIOMS, ids=lambda i: i.name)
def test_no_flag_and_no_hit(idiom, tmp_path):
    """The notebook as the grader reads it raises no flag (nothing held) and no forbidden
    function is found in any answer of its assignment (nothing zeroed)."""
    raw = _notebook(idiom)
    assert raw != nbformat.writes(S.load(idiom.assignment)).encode(), "the idiom changed nothing"
    cells, problem = C.code_cells(raw)
    assert not problem
    assert [f.text() for f in flags(cells)] == []
    questions = autograder.questions(idiom.assignment)
    # every answer is there for the scan to read (a cell that does not parse is not scanned)
    assert {q.answer_name for q in questions} <= C.defined_names(cells)
    for q in questions:
        assert [h.message(q.answer_name) for h in scan_source(cells, q.answer_name, q.forbidden)] == [], q.id
    # the student's process receives exactly the cells the scan read
    received = tmp_path / "submission.ipynb"
    received.write_bytes(C.code_only(raw))
    assert C.read_cells(received) == cells


OWN_METHODS = {   # answers whose class defines a method named like a tensor method
    "label_smoothing": "loss_class_own_log_softmax",
    "cross_entropy": "cross_entropy_module_own_log_softmax",
}


@pytest.mark.parametrize("qid, name", list(OWN_METHODS.items()))
def test_the_in_notebook_check_reads_self_methods_as_the_students(qid, name, tmp_path):
    """check() scans the live answer (scan_object): ``self.log_softmax(x)`` calls the class's
    own method, not the library's, while ``x.log_softmax(-1)`` on a tensor still is a hit."""
    import importlib.util

    idiom = next(i for i in IDIOMS if i.name == name)
    q = autograder.question(qid)
    source = next(c.source for c in idiom.edit(S.load(idiom.assignment)).cells
                  if c.cell_type == "code" and S._defines(c.source, q.answer_name))
    header = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n"
    module = tmp_path / f"{name}.py"
    module.write_text(header + source)
    spec = importlib.util.spec_from_file_location(name, module)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    answer = getattr(loaded, q.answer_name)
    assert scan_object(answer, q.answer_name, q.forbidden) == []
    shortcut = tmp_path / f"{name}_shortcut.py"
    shortcut.write_text(header + source.replace("self.log_softmax(logits)", "logits.log_softmax(-1)"))
    spec = importlib.util.spec_from_file_location(f"{name}_shortcut", shortcut)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    assert [h.key for h in scan_object(getattr(loaded, q.answer_name), q.answer_name, q.forbidden)] == [
        "cross_entropy"]


# ------------------------------------------------------------------ how cells are read and run

REWRITES = {   # a cell as written -> the plain Python the grader reads and the student's process runs
    "!pip install -q einops": "get_ipython().system('pip install -q einops')\n",
    "%matplotlib inline\nimport torch": "get_ipython().run_line_magic('matplotlib', 'inline')\nimport torch\n",
    "files = !ls": "files = get_ipython().getoutput('ls')\n",
    # a continuation line is part of its logical line, whatever its first character (PEP 8 breaks
    # before binary operators): IPython runs it as Python, so does the grader
    "msg = ('%d x %d'\n       % (3, 4))": "msg = ('%d x %d'\n       % (3, 4))",
    "y = (1\n     / 2)": "y = (1\n     / 2)",
    # %%time, %%timeit, %%capture run their body (their line kept blank: the same line numbers)
    "%%time\nout = f(x)": "\nout = f(x)\n",
    "\n%%capture captured\n!ls\nz = 1": "\n\nget_ipython().system('ls')\nz = 1\n",
    "%%timeit setup = 1\nrun = setup + 1": "setup = 1\nrun = setup + 1\n",
    # any other cell magic is not Python: the cell is skipped
    "%%writefile helpers.py\ndef f():\n    pass": "",
    "%%bash\necho hi": "",
    # %time runs its statement (in place, indented as it was); %timeit with options does nothing
    "for i in range(2):\n    %time y = i * 2": "for i in range(2):\n    y = i * 2\n",
    "%timeit -n 1 f(x)": "get_ipython().run_line_magic('timeit', '-n 1 f(x)')\n",
    # plain Python, with or without a '?' in a comment, is left exactly as it is
    "x = 1  # why?\n\n": "x = 1  # why?\n\n",
    "def f(x):\n    return x % 2": "def f(x):\n    return x % 2",
}


@pytest.mark.parametrize("cell, plain", list(REWRITES.items()), ids=list(range(len(REWRITES))))
def test_magics_are_rewritten_as_ipython_rewrites_them(cell, plain):
    assert C.to_python(cell) == plain
    assert C.to_python(plain) == plain                 # the student's process may read them again


def test_the_student_process_reads_the_plain_cells_without_ipython(tmp_path):
    """code_only sends the cells the scan read, marked: reading them imports no IPython (an
    import every notebook would pay for: about 50 ms, measured), and a mark the student wrote in
    their own notebook means nothing to the grader."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("!pip install einops\n%matplotlib inline"),
                nbformat.v4.new_code_cell("%%time\nx = 1"), nbformat.v4.new_markdown_cell("notes")]
    nb.metadata[C.PLAIN_MARK] = True                  # forged by the student: ignored
    raw = nbformat.writes(nb).encode()
    cells, problem = C.code_cells(raw)
    assert not problem and cells == ["get_ipython().system('pip install einops')\n"
                                     "get_ipython().run_line_magic('matplotlib', 'inline')\n", "\nx = 1\n"]
    assert C.read_cells(_written(tmp_path / "own.ipynb", raw), honor_mark=False) == cells
    sent = _written(tmp_path / "sent.ipynb", C.code_only(raw))
    script = ("import sys\nfrom autograder.student.cells import read_cells\n"
              f"cells = read_cells({str(sent)!r})\nprint(repr(cells), 'IPython' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"{cells!r} False"
    assert "notes" not in sent.read_text()


def _written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_notebook_of_many_magics_costs_bounded_time():
    """IPython re-reads a cell after each rewrite: cells with hundreds of magics are left as
    they are (they fail as SyntaxErrors, in the scan and in the run alike) past a budget, so a
    notebook cannot make the grader's reading slow."""
    import time
    many = "!echo\n" * 450 + "y = 1\n" * 2000
    big = "!echo\n" * 150 + "f(a, b, c)[1:2]\n" * 6000
    start = time.perf_counter()
    cells = C.plain_cells([many] * 20 + [big] * 20 + ["!ls"])
    assert time.perf_counter() - start < 10
    assert cells[0] == many and cells[-2] == big          # left as they are...
    assert cells[-1] == "get_ipython().system('ls')\n"    # ...the budget is per cell's cost


def _boom():
    from autograder.student.ban import ForbiddenCall
    raise ForbiddenCall("torch operator aten::layer_norm ... is not allowed here")


def test_a_forbidden_call_stops_its_statement_not_its_cell():
    """As IPython runs a cell (statement by statement), with one exception: the ban's
    ForbiddenCall, raised by a comparison with the library function above the answer, is
    recorded and the cell goes on; any other error stops the cell, as in Jupyter."""
    namespace = {"boom": _boom}
    cells = ["reference = boom()\n\ndef answer():\n    return 1\nafter = answer()",
             "x = 1\ny = 1 / 0\nz = 2",
             "try:\n    boom()\nexcept RuntimeError as e:\n    raise ValueError('wrapped') from e\nw = 3",
             "from __future__ import annotations\nv = 4",
             "def g(a: Undefined) -> int:\n    return a\nnotes = g.__annotations__"]
    errors = C.run_cells(cells, namespace, budget=lambda index: 10)
    assert [e.split(":")[0] for e in errors] == ["cell 1 at line 1", "cell 2 at line 2", "cell 3 at line 4"]
    assert "ForbiddenCall" in errors[0] and "ZeroDivisionError" in errors[1] and "ValueError" in errors[2]
    assert namespace["after"] == 1 and "reference" not in namespace       # the rest of cell 1 ran
    assert namespace["x"] == 1 and "z" not in namespace                    # an ordinary error stops cell 2
    assert namespace["w"] == 3                  # an error raised from a ForbiddenCall is one too
    assert namespace["notes"] == {"a": "Undefined", "return": "int"}       # __future__ kept, as in IPython


# ------------------------------------------------------------------ graded in the sandbox (slow)

@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """The graded idioms as one class, graded the way a course grades (the CLI, the sandbox)."""
    root = tmp_path_factory.mktemp("honest-idioms")
    for idiom in GRADED:
        S.write(_notebook(idiom), root, idiom.name, idiom.assignment)
    env = dict(os.environ, AUTOGRADER_GRADER_VERSION="honest-idioms-test")
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "2",
                           "--no-progress", "--timeout", "60"], cwd=S.REPO, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root


@pytest.mark.slow
@pytest.mark.parametrize("idiom", GRADED, ids=lambda i: i.name)
def test_graded_with_full_marks_and_nothing_held(graded_class, idiom):
    rows = S.read_csv(graded_class)
    got = {q.id: rows[(idiom.name, idiom.assignment, q.id)] for q in autograder.questions(idiom.assignment)}
    assert got == {q.id: (q.points, q.points, "") for q in autograder.questions(idiom.assignment)}


@pytest.mark.slow
def test_the_saved_results_hold_no_flag(graded_class):
    from autograder.batch.state import load_results
    results = {r["student"]: r for r in load_results(graded_class)}
    assert set(results) == {i.name for i in GRADED}
    assert {name: r.get("flags") for name, r in results.items() if r.get("flags")} == {}
