"""Answer banks of Chapter 1 (tokens): patches, embedding_lookup.

Variants, realistic right answers and realistic wrong answers, each with how the check must
name it (the schema: tests/answers/bank.py; the test: tests/test_answer_banks.py). Written by
hand as students write them, not with the catalogue's builders; the building blocks they use are the
course's solutions (each question's @solution) or the code the notebooks give (given.py).
"""

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange

from .bank import right, says, solution, solution_value, variant, wrong


# ###################################################################################################
# the solutions, as the answer cells of the solutions notebook write them
# (tests/test_answer_banks.py::test_each_solution_is_the_notebooks_answer holds them equal)
@solution("patches")
def image_to_patches(images, patch_size):
    """images (B, C, H, W) -> patches (B, N, P*P*C) with N = (H/P) * (W/P)."""
    B, C, H, W = images.shape
    if H % patch_size or W % patch_size:
        raise ValueError(f"image size {H}x{W} is not divisible by patch size {patch_size}")
    ### BEGIN SOLUTION
    patches = rearrange(images, "b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size)
    ### END SOLUTION
    return patches


@solution("embedding_lookup")
def embed(token_ids, weight):
    """token_ids (...) integers in [0, V), weight (V, D) -> embeddings (..., D)."""
    vocab_size = weight.shape[0]
    ### BEGIN SOLUTION
    one_hot = F.one_hot(token_ids, num_classes=vocab_size).to(weight.dtype)  # (..., V)
    return one_hot @ weight                                                   # (..., D)
    ### END SOLUTION


numbers_per_token = solution_value("concept_patch_numbers", 192)


# ####################################################################################################
# variants: other correct formulations
# ----------------------------------------------------------------- patches
@variant("patches")
def patches_loops(images, patch_size):
    b, c, h, w = images.shape
    out = []
    for i in range(h // patch_size):
        for j in range(w // patch_size):
            block = images[:, :, i * patch_size:(i + 1) * patch_size, j * patch_size:(j + 1) * patch_size]
            out.append(block.permute(0, 2, 3, 1).reshape(b, -1))        # (B, P*P*C), channels last
    return torch.stack(out, dim=1)


@variant("patches")
def patches_unfold(images, patch_size):
    b, c, h, w = images.shape
    grid = images.unfold(2, patch_size, patch_size).unfold(3, patch_size, patch_size)   # (B, C, h, w, P, P)
    return grid.permute(0, 2, 3, 4, 5, 1).reshape(b, (h // patch_size) * (w // patch_size), -1)


@variant("patches")
def patches_numpy(images, patch_size):
    x = images.numpy()
    b, c, h, w = x.shape
    p = patch_size
    return x.reshape(b, c, h // p, p, w // p, p).transpose(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), -1)


# ----------------------------------------------------------------- embedding
@variant("embedding_lookup")
def embed_index(token_ids, weight):
    return weight[token_ids]


@variant("embedding_lookup")
def embed_numpy(token_ids, weight):
    return np.eye(weight.shape[0])[token_ids.numpy()] @ weight.numpy().astype(np.float64)


@variant("embedding_lookup")
def embed_float64(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).double() @ weight.double()


# ####################################################################################################
# realistic answers (first set)
# =============================================================================== patches
@right("patches")
def patches_view_permute(images, patch_size):
    b, c, h, w = images.shape
    p = patch_size
    x = images.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)     # b, h, w, s1, s2, c
    return x.reshape(b, -1, p * p * c)


@right("patches")
def patches_f_unfold(images, patch_size):
    b, c, h, w = images.shape
    p = patch_size
    cols = F.unfold(images, kernel_size=p, stride=p)                          # (B, C*P*P, N), (c s1 s2)
    n = cols.shape[-1]
    return cols.transpose(1, 2).reshape(b, n, c, p, p).permute(0, 1, 3, 4, 2).reshape(b, n, -1)


@right("patches")
def patches_named_sizes(images, patch_size):
    B, C, H, W = images.shape
    return rearrange(images, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", h=H // patch_size, w=W // patch_size,
                     p1=patch_size, p2=patch_size)


@right("patches")
def patches_list_of_blocks(images, patch_size):
    p = patch_size
    blocks = [images[:, :, i:i + p, j:j + p].permute(0, 2, 3, 1).flatten(1)
              for i in range(0, images.shape[2], p) for j in range(0, images.shape[3], p)]
    return torch.stack(blocks, dim=1)


@wrong("patches", "channels_first")
def patches_c_first(images, patch_size):
    return rearrange(images, "b c (h p1) (w p2) -> b (h w) (c p1 p2)", p1=patch_size, p2=patch_size)


@wrong("patches", "channels_first")
def patches_unfold_raw(images, patch_size):
    return F.unfold(images, kernel_size=patch_size, stride=patch_size).transpose(1, 2)


@wrong("patches", "column_order")
def patches_w_before_h(images, patch_size):
    return rearrange(images, "b c (h s1) (w s2) -> b (w h) (s1 s2 c)", s1=patch_size, s2=patch_size)


@wrong("patches", "transposed_patch")
def patches_s2_s1(images, patch_size):
    b, c, h, w = images.shape
    p = patch_size
    return images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 5, 3, 1).reshape(b, -1, p * p * c)


@wrong("patches", "reshape_only")
def patches_just_reshape(images, patch_size):
    b = images.shape[0]
    return images.reshape(b, -1, patch_size * patch_size * images.shape[1])


@wrong("patches", "channels_last_reshape")
def patches_permute_then_reshape(images, patch_size):
    b, c, h, w = images.shape
    return images.permute(0, 2, 3, 1).reshape(b, -1, patch_size * patch_size * c)


@wrong("patches", "grid_not_flattened")
def patches_grid_kept(images, patch_size):
    return rearrange(images, "b c (h s1) (w s2) -> b h w (s1 s2 c)", s1=patch_size, s2=patch_size)


@wrong("patches", "grid_as_patch_size")
def patches_h_is_p(images, patch_size):
    return rearrange(images, "b c (h s1) (w s2) -> b (h w) (s1 s2 c)", h=patch_size, w=patch_size)


@wrong("patches", says("float32's precision only"))
def patches_into_zeros(images, patch_size):
    b, c, h, w = images.shape
    p = patch_size
    out = torch.zeros(b, (h // p) * (w // p), p * p * c)
    n = 0
    for i in range(h // p):
        for j in range(w // p):
            out[:, n] = images[:, :, i * p:(i + 1) * p, j * p:(j + 1) * p].permute(0, 2, 3, 1).reshape(b, -1)
            n += 1
    return out


@wrong("patches", "interleaved")
def patches_strided(images, patch_size):
    return rearrange(images, "b c (p1 h) (p2 w) -> b (h w) (p1 p2 c)", p1=patch_size, p2=patch_size)


# =============================================================================== embedding_lookup
@right("embedding_lookup")
def embed_eye(token_ids, weight):
    return torch.eye(weight.shape[0], dtype=weight.dtype)[token_ids] @ weight


@right("embedding_lookup")
def embed_compare_arange(token_ids, weight):
    one_hot = (token_ids.unsqueeze(-1) == torch.arange(weight.shape[0])).to(weight.dtype)
    return one_hot @ weight


@right("embedding_lookup")
def embed_scatter(token_ids, weight):
    one_hot = torch.zeros(*token_ids.shape, weight.shape[0], dtype=weight.dtype)
    one_hot.scatter_(-1, token_ids.unsqueeze(-1), 1.0)
    return torch.einsum("...v,vd->...d", one_hot, weight)


@right("embedding_lookup")
def embed_index_select(token_ids, weight):
    return weight.index_select(0, token_ids.reshape(-1)).reshape(*token_ids.shape, weight.shape[1])


@wrong("embedding_lookup", "one_hot_classes")
def embed_no_num_classes(token_ids, weight):
    return F.one_hot(token_ids).to(weight.dtype) @ weight


@wrong("embedding_lookup", "off_by_one")
def embed_minus_one(token_ids, weight):
    return torch.eye(weight.shape[0], dtype=weight.dtype)[token_ids - 1] @ weight


@wrong("embedding_lookup", says("works with float32 inputs but raises"))
def embed_float_one_hot(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).float() @ weight


@wrong("embedding_lookup", says("an integer tensor"))
def embed_long_one_hot(token_ids, weight):
    return torch.matmul(F.one_hot(token_ids, num_classes=weight.shape[0]), weight)


@wrong("embedding_lookup", "returns_one_hot")
def embed_only_one_hot(token_ids, weight):
    return F.one_hot(token_ids, num_classes=weight.shape[0]).to(weight.dtype)


@wrong("embedding_lookup", "num_classes_d")
def embed_d_classes(token_ids, weight):
    return F.one_hot(token_ids, num_classes=weight.shape[1]).to(weight.dtype) @ weight


@wrong("embedding_lookup", "transposed_weight")
def embed_weight_t(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).to(weight.dtype) @ weight.t()


@wrong("embedding_lookup", says("float32's precision only"))
def embed_result_float(token_ids, weight):
    return (F.one_hot(token_ids, weight.shape[0]).to(weight.dtype) @ weight).float()


@wrong("embedding_lookup", "off_by_one")
def embed_one_hot_minus_one(token_ids, weight):
    return F.one_hot(token_ids - 1, weight.shape[0]).to(weight.dtype) @ weight


# ####################################################################################################
# realistic answers, second set: first written for a parallel implementation of these checks
#
# =============================================================================== 01 patches
@right("patches")
def patches_view_permute_2(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.view(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)   # (B, h, w, s1, s2, C)
    return x.reshape(B, -1, p * p * C)


@right("patches")
def patches_unfold_functional(images, patch_size):
    B, C, H, W = images.shape
    cols = F.unfold(images, kernel_size=patch_size, stride=patch_size)      # (B, C*P*P, N), (c s1 s2)
    cols = cols.view(B, C, patch_size * patch_size, -1)
    return cols.permute(0, 3, 2, 1).reshape(B, cols.shape[-1], -1)


@wrong("patches", "channels_first")
def patches_permute_channels_first(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    return images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5).reshape(B, -1, C * p * p)


@wrong("patches", "column_order")
def patches_h_w_swapped(images, patch_size):
    return rearrange(images, "b c (w s1) (h s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size)


@wrong("patches", "transposed_patch")
def patches_columns_inside(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    return images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 5, 3, 1).reshape(B, -1, C * p * p)


@wrong("patches", "reshape_only")
def patches_plain_view(images, patch_size):
    B, C, H, W = images.shape
    return images.reshape(B, -1, patch_size * patch_size * C)


@wrong("patches", "channels_last_reshape")
def patches_channels_last_then_reshape(images, patch_size):
    B, C, H, W = images.shape
    return images.permute(0, 2, 3, 1).reshape(B, -1, patch_size * patch_size * C)


@wrong("patches", says("float32's precision only"))
def patches_forced_float32(images, patch_size):
    B, C, H, W = images.shape
    out = torch.zeros(B, (H // patch_size) * (W // patch_size), patch_size * patch_size * C)
    out[:] = rearrange(images, "b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size)
    return out


# =============================================================================== 01 embedding
@right("embedding_lookup")
def embed_scatter_2(token_ids, weight):
    one_hot = torch.zeros(*token_ids.shape, weight.shape[0], dtype=weight.dtype)
    one_hot.scatter_(-1, token_ids.unsqueeze(-1), 1.0)
    return one_hot @ weight


@right("embedding_lookup")
def embed_einsum(token_ids, weight):
    return torch.einsum("...v,vd->...d", F.one_hot(token_ids, weight.shape[0]).type_as(weight), weight)


@wrong("embedding_lookup", says("works with float32 inputs but raises"))
def embed_eye_default_dtype(token_ids, weight):
    return torch.eye(weight.shape[0])[token_ids] @ weight


@wrong("embedding_lookup", says("float32's precision only"))
def embed_cast_everything(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).float() @ weight.float()


@wrong("embedding_lookup", "transposed_weight")
def embed_weight_t_2(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).to(weight.dtype) @ weight.T


@wrong("embedding_lookup", says("integer tensor"))
def embed_long_one_hot_2(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]) @ weight


# ####################################################################################################
# patches flattened channel-interleaved (a class of the instructor's hidden collection): named by the
# counterfactual "patch_order" (the reference's pattern changed), whatever the order
@wrong("patches", ("patch_order", says("(s1 c s2)")))
def patches_channel_between_rows(images, patch_size):
    return rearrange(images, "b c (h s1) (w s2) -> b (h w) (s1 c s2)", s1=patch_size, s2=patch_size)


@wrong("patches", ("patch_order", says("(s2 c s1)")))
def patches_permute_channel_middle(images, patch_size):
    b, c, height, width = images.shape
    p = patch_size
    grid = images.reshape(b, c, height // p, p, width // p, p)          # (B, C, h, s1, w, s2)
    grid = grid.permute(0, 2, 4, 5, 1, 3)                               # (B, h, w, s2, C, s1)
    return grid.reshape(b, (height // p) * (width // p), -1)


@wrong("patches", ("patch_order", says("(c s2 s1)")))
def patches_channels_first_columns(images, patch_size):
    b, c, height, width = images.shape
    p = patch_size
    blocks = images.unfold(2, p, p).unfold(3, p, p)                     # (B, C, h, w, s1, s2)
    blocks = blocks.permute(0, 2, 3, 1, 5, 4)                           # (B, h, w, C, s2, s1)
    return blocks.reshape(b, -1, c * p * p)
