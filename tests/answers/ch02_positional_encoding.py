"""Answer banks of Chapter 2 (positional encoding): q1, apply_rope.

Variants, realistic right answers and realistic wrong answers, each with how the check must
name it (the schema: tests/answers/bank.py; the test: tests/test_answer_banks.py). Written by
hand as students write them, not with the catalogue's builders; the building blocks they use are the
course's solutions (each question's @solution) or the code the notebooks give (given.py).
"""
import math

import numpy as np
import torch
from einops import rearrange

from .bank import right, says, solution, solution_value, variant, wrong, wrong_list, wrong_rows


# ###################################################################################################
# the solutions, as the answer cells of the solutions notebook write them
# (tests/test_answer_banks.py::test_each_solution_is_the_notebooks_answer holds them equal)
@solution("q1")
def getPositionEncoding(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in np.arange(int(d / 2)):
            # Q1. Fill in the three lines: denominator, P[k, 2*i] and P[k, 2*i+1].
            ### BEGIN SOLUTION
            denominator = np.power(n, 2 * i / d)
            P[k, 2 * i] = np.sin(k / denominator)
            P[k, 2 * i + 1] = np.cos(k / denominator)
            ### END SOLUTION
    return P


table_entry = solution_value("concept_sinusoid_value", 0.48)


@solution("apply_rope")
def apply_rope(x, base=10000):
    """x (..., T, D), D even -> x with the features (2i, 2i+1) of token t rotated by the angle t * base^(-2i/D)."""
    T, D = x.shape[-2], x.shape[-1]
    ### BEGIN SOLUTION
    positions = torch.arange(T, dtype=x.dtype, device=x.device)[:, None]        # (T, 1)
    pair = torch.arange(D // 2, dtype=x.dtype, device=x.device)[None, :]        # (1, D/2)
    angles = positions * base ** (-2 * pair / D)                                # (T, D/2)
    cos, sin = torch.cos(angles), torch.sin(angles)
    even, odd = x[..., 0::2], x[..., 1::2]                                      # (..., T, D/2) each
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., T, D/2, 2)
    return rotated.flatten(-2)                                                  # (..., T, D)
    ### END SOLUTION


# ####################################################################################################
# variants: other correct formulations
# ----------------------------------------------------------------- q1
@variant("q1")
def pe_vectorised(seq_len, d, n=10000):
    k = np.arange(seq_len)[:, None]
    i = np.arange(d // 2)[None, :]
    angles = k / n ** (2 * i / d)
    P = np.zeros((seq_len, d))
    P[:, 0::2] = np.sin(angles)
    P[:, 1::2] = np.cos(angles)
    return P


@variant("q1")
def pe_torch(seq_len, d, n=10000):
    position = torch.arange(seq_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(n) / d))
    pe = torch.zeros(seq_len, d)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


@variant("q1")
def pe_math(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in range(d // 2):
            P[k, 2 * i] = math.sin(k / n ** (2 * i / d))
            P[k, 2 * i + 1] = math.cos(k / n ** (2 * i / d))
    return P


# ####################################################################################################
# realistic answers (first set)
# =============================================================================== q1
@right("q1")
def pe_exp_log(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in np.arange(int(d / 2)):
            denominator = np.exp(2 * i / d * np.log(n))
            P[k, 2 * i] = np.sin(k / denominator)
            P[k, 2 * i + 1] = np.cos(k / denominator)
    return P


@right("q1")
def pe_outer(seq_len, d, n=10000):
    angles = np.outer(np.arange(seq_len), 1.0 / n ** (np.arange(0, d, 2) / d))
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(seq_len, d)


@right("q1")
def pe_torch_float64(seq_len, d, n=10000):
    k = torch.arange(seq_len, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d, 2, dtype=torch.float64)
    P = torch.zeros(seq_len, d, dtype=torch.float64)
    P[:, 0::2] = torch.sin(k / n ** (two_i / d))
    P[:, 1::2] = torch.cos(k / n ** (two_i / d))
    return P


def _pe_loops(angle, sin_col=lambda i: 2 * i, cos_col=lambda i: 2 * i + 1, first=np.sin, second=np.cos,
              start=0):
    def getPositionEncoding(seq_len, d, n=10000):
        P = np.zeros((seq_len, d))
        for k in range(start, seq_len + start):
            for i in range(d // 2):
                P[k - start, sin_col(i)] = first(angle(k, i, d, n, seq_len))
                P[k - start, cos_col(i)] = second(angle(k, i, d, n, seq_len))
        return P
    return getPositionEncoding


wrong_rows([
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** (2 * i / d), first=np.cos, second=np.sin), "sin_cos_swapped"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** (2 * i / d), start=1), "positions_from_one"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / 100 ** (2 * i / d)), "n_hardcoded_100"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / 10000 ** (2 * i / d)), "n_hardcoded"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** (i / d)), "exponent_i_over_d"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** (2 * i / d), cos_col=lambda i: i + 1, sin_col=lambda i: i),
     "index_i"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** 2 * i / d), "precedence_position"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** (2 * i / L)), "exponent_seq_len"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** (2 * i // d)), "integer_division"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k * n ** (2 * i / d)), "multiplied"),
])


@wrong("q1", "halves")
def pe_halves(seq_len, d, n=10000):
    angles = np.arange(seq_len)[:, None] / n ** (2 * np.arange(d // 2) / d)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


@wrong("q1", "exponent_doubled_twice")
def pe_arange_step_two(seq_len, d, n=10000):
    i = np.arange(0, d, 2)                    # already 2i
    angles = np.arange(seq_len)[:, None] / n ** (2 * i / d)
    P = np.zeros((seq_len, d))
    P[:, 0::2], P[:, 1::2] = np.sin(angles), np.cos(angles)
    return P


@wrong("q1", "sin_before_division")
def pe_sin_k(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in np.arange(int(d / 2)):
            denominator = np.power(n, 2 * i / d)
            P[k, 2 * i] = np.sin(k) / denominator
            P[k, 2 * i + 1] = np.cos(k) / denominator
    return P


@wrong("q1", says("the first pair (columns 0 and 1)"))
def pe_pairs_from_one(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in range(d // 2):
            P[k, 2 * i] = np.sin(k / n ** (2 * (i + 1) / d))
            P[k, 2 * i + 1] = np.cos(k / n ** (2 * (i + 1) / d))
    return P


@wrong("q1", says("the sine and the cosine of one angle"))
def pe_cos_squared(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in range(d // 2):
            P[k, 2 * i] = np.sin(k / n ** (2 * i / d))
            P[k, 2 * i + 1] = np.cos(k / n ** (2 * i / d)) ** 2
    return P


@wrong("q1", ("table_positions_shifted", says("rows start at position 2")))
def pe_positions_from_two(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(1, seq_len + 1):
        for i in np.arange(int(d / 2)):
            denominator = np.power(n, 2 * i / d)
            P[k - 1, 2 * i] = np.sin((k + 1) / denominator)
            P[k - 1, 2 * i + 1] = np.cos((k + 1) / denominator)
    return P


# ####################################################################################################
# realistic answers, second set: first written for a parallel implementation of these checks
#
# =============================================================================== 02 q1
@right("q1")
def pe_cos_as_shifted_sin(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in np.arange(int(d / 2)):
            angle = k / n ** (2 * i / d)
            P[k, 2 * i] = np.sin(angle)
            P[k, 2 * i + 1] = np.sin(angle + np.pi / 2)
    return P


def _pe(angle, first=np.sin, second=np.cos, start=0):
    def getPositionEncoding(seq_len, d, n=10000):
        P = np.zeros((seq_len, d))
        for k in range(seq_len):
            for i in np.arange(int(d / 2)):
                a = angle(k + start, i, d, n)
                P[k, 2 * i] = first(a)
                P[k, 2 * i + 1] = second(a)
        return P
    return getPositionEncoding


wrong_list("q1", [
    (_pe(lambda k, i, d, n: k / n ** (2 * i / d), np.cos, np.sin), "sin_cos_swapped"),
    (_pe(lambda k, i, d, n: k / n ** (i / d)), "exponent_i_over_d"),
    (_pe(lambda k, i, d, n: k / 10000 ** (2 * i / d)), "n_hardcoded"),
    (_pe(lambda k, i, d, n: k / n ** 2 * i / d), "precedence_position"),
    (_pe(lambda k, i, d, n: k / n ** (2 * i / d), start=1), "positions_from_one"),
    (_pe(lambda k, i, d, n: k * n ** (2 * i / d)), "multiplied"),
    (_pe(lambda k, i, d, n: k / n ** (2 * i // d)), "integer_division"),
    (_pe(lambda k, i, d, n: k / n ** (2 * i / d), np.sin, np.sin), "sin_only"),
    # not catalogued: the property is named by the diagnosis
    (_pe(lambda k, i, d, n: k / n ** (2 * (i + 1) / d)), says("the first pair")),
    (_pe(lambda k, i, d, n: k / 100 ** (2 * i / d)), "n_hardcoded_100"),
    (_pe(lambda k, i, d, n: k / n ** (2 * i / d), np.sin, lambda a: np.cos(a) ** 2),
     says("the sine and the cosine of one angle")),
])


# ####################################################################################################
# the sinusoidal table with another base / width / length, or sines only (classes of the instructor's
# hidden collection): named by the counterfactual tables of the catalogue
@wrong("q1", ("table_other_base", says("n = 1000)")))
def pe_base_thousand(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in np.arange(int(d / 2)):
            denominator = np.power(1000, 2 * i / d)              # "the base": a value remembered from a blog
            P[k, 2 * i] = np.sin(k / denominator)
            P[k, 2 * i + 1] = np.cos(k / denominator)
    return P


@wrong("q1", ("table_other_width", says("2i/(d-1)")))
def pe_width_minus_one(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in np.arange(int(d / 2)):
            denominator = n ** (2 * i / (d - 1))                 # the last column index instead of d
            P[k, 2 * i] = math.sin(k / denominator)
            P[k, 2 * i + 1] = math.cos(k / denominator)
    return P


@wrong("q1", ("table_sines_only", says("cosines only")))
def pe_cosines_only(seq_len, d, n=10000):
    positions = np.arange(seq_len)[:, None]
    angles = positions / n ** (np.arange(0, d, 2) / d)
    P = np.zeros((seq_len, d))
    P[:, 0::2] = np.cos(angles)
    P[:, 1::2] = np.cos(angles)
    return P


@wrong("q1", ("table_positions_shifted", says("rows start at position 2")))
def pe_table_from_two_vectorised(seq_len, d, n=10000):
    positions = np.arange(2, seq_len + 2)[:, None]
    angles = positions / np.power(n, np.arange(0, d, 2) / d)
    P = np.empty((seq_len, d))
    P[:, 0::2], P[:, 1::2] = np.sin(angles), np.cos(angles)
    return P


# ####################################################################################################
# apply_rope: rotary position embedding (RoFormer's interleaved pairs)
# ----------------------------------------------------------------- other correct formulations
@variant("apply_rope")
def rope_complex(x, base=10000):
    """Each pair (2i, 2i+1) as the complex number x_2i + i x_2i+1, multiplied by e^(i angle)."""
    T, D = x.shape[-2], x.shape[-1]
    frequencies = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)           # (D/2,)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), frequencies)            # (T, D/2)
    turn = torch.polar(torch.ones_like(angles), angles)                                # (T, D/2) complex
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], D // 2, 2).contiguous())
    return torch.view_as_real(pairs * turn).flatten(-2).to(x.dtype)


@variant("apply_rope")
def rope_loops(x, base=10000):
    out = x.clone()
    T, D = x.shape[-2], x.shape[-1]
    for t in range(T):
        for i in range(D // 2):
            angle = t / base ** (2 * i / D)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            out[..., t, 2 * i] = a * c - b * s
            out[..., t, 2 * i + 1] = a * s + b * c
    return out


@variant("apply_rope")
def rope_rotation_matrices(x, base=10000):
    """One 2 x 2 rotation matrix per position and pair, applied with einsum."""
    T, D = x.shape[-2], x.shape[-1]
    theta = base ** (-2 * torch.arange(D // 2, dtype=torch.float64) / D)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * theta                    # (T, D/2)
    c, s = angles.cos(), angles.sin()
    R = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2).to(x.dtype)   # (T, D/2, 2, 2)
    pairs = x.reshape(*x.shape[:-1], D // 2, 2)                                       # (..., T, D/2, 2)
    return torch.einsum("tpij,...tpj->...tpi", R, pairs).reshape(x.shape)


@right("apply_rope")
def rope_rotate_every_two(x, base=10000):
    """GPT-J's layout: (-x_2i+1, x_2i) interleaved, cos and sin repeated per feature."""
    T, D = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2).double() / D))
    angles = torch.arange(T).double()[:, None] * inv_freq[None, :]                    # (T, D/2)
    cos = angles.cos().repeat_interleave(2, dim=-1).to(x.dtype)                        # (T, D)
    sin = angles.sin().repeat_interleave(2, dim=-1).to(x.dtype)
    x_rot = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    return x * cos + x_rot * sin


@right("apply_rope")
def rope_einops(x, base=10000):
    T, D = x.shape[-2:]
    pairs = rearrange(x, "... t (d two) -> ... t d two", two=2)
    angle = torch.arange(T, dtype=x.dtype)[:, None] * torch.pow(base, -torch.arange(0, D, 2, dtype=x.dtype) / D)
    a, b = pairs[..., 0], pairs[..., 1]
    out = torch.stack((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), dim=-1)
    return rearrange(out, "... t d two -> ... t (d two)")


# ----------------------------------------------------------------- wrong answers
@wrong("apply_rope", "rope_halves")
def rope_rotate_half(x, base=10000):
    """Hugging Face's LLaMA layout: feature i paired with i + D/2."""
    T, D = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)                # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)                                            # (T, D)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    rotated_half = torch.cat((-x2, x1), dim=-1)
    return x * emb.cos().to(x.dtype) + rotated_half * emb.sin().to(x.dtype)


@wrong("apply_rope", "rope_sine_sign")
def rope_clockwise(x, base=10000):
    T, D = x.shape[-2], x.shape[-1]
    angles = torch.arange(T, dtype=x.dtype)[:, None] * base ** (-2 * torch.arange(D // 2, dtype=x.dtype) / D)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * angles.cos() + odd * angles.sin()
    out[..., 1::2] = odd * angles.cos() - even * angles.sin()
    return out


@wrong("apply_rope", "rope_exponent")
def rope_exponent_pair_index(x, base=10000):
    T, D = x.shape[-2], x.shape[-1]
    i = torch.arange(D // 2, dtype=x.dtype)
    angles = torch.arange(T, dtype=x.dtype)[:, None] / base ** (i / D)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos()],
                       dim=-1).flatten(-2)


@wrong("apply_rope", "rope_positions_from_one")
def rope_positions_one_based(x, base=10000):
    T, D = x.shape[-2], x.shape[-1]
    positions = torch.arange(1, T + 1, dtype=x.dtype)[:, None]                     # the first token at 1
    angles = positions * base ** (-torch.arange(0, D, 2, dtype=x.dtype) / D)
    c, s = angles.cos(), angles.sin()
    out = x.clone()
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    out[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
    return out


@wrong("apply_rope", "rope_exponent")
def rope_feature_index_doubled(x, base=10000):
    T, D = x.shape[-2], x.shape[-1]
    feature = torch.arange(0, D, 2, dtype=x.dtype)                               # 0, 2, 4...: already 2i
    angles = torch.arange(T, dtype=x.dtype)[:, None] * base ** (-2 * feature / D)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos()],
                       dim=-1).flatten(-2)


@wrong("apply_rope", "rope_written_as_halves")
def rope_pairs_written_as_halves(x, base=10000):
    """Reads the interleaved pairs but writes the rotated ones back as two halves."""
    T, D = x.shape[-2], x.shape[-1]
    angles = torch.arange(T, dtype=x.dtype)[:, None] * base ** (-2 * torch.arange(D // 2, dtype=x.dtype) / D)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.cat([even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos()], dim=-1)


@wrong("apply_rope", "rope_angles_tiled")
def rope_cos_tiled(x, base=10000):
    """GPT-J's rotate-every-two with cos and sin tiled ([c0, c1, ..., c0, c1, ...]) instead of repeated per pair."""
    T, D = x.shape[-2], x.shape[-1]
    angles = torch.arange(T, dtype=x.dtype)[:, None] * base ** (-torch.arange(0, D, 2, dtype=x.dtype) / D)
    cos, sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)                # (T, D), in the wrong order
    x_rot = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    return x * cos + x_rot * sin


@wrong("apply_rope", says("float32"))
def rope_always_float32(x, base=10000):
    T, D = x.shape[-2], x.shape[-1]
    angles = torch.arange(T).float()[:, None] * base ** (-torch.arange(0, D, 2).float() / D)
    even, odd = x[..., 0::2].float(), x[..., 1::2].float()
    return torch.stack([even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos()],
                       dim=-1).flatten(-2)


@wrong("apply_rope", "rope_positions_wrong_axis")
def rope_positions_from_axis_one(x, base=10000):
    """Written for (B, T, D): the positions are read from axis 1, the heads' axis of (B, H, T, D)."""
    T, D = x.shape[1], x.shape[-1]
    angles = torch.arange(T, dtype=x.dtype)[:, None] * base ** (-2 * torch.arange(D // 2, dtype=x.dtype) / D)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos()],
                       dim=-1).flatten(-2)

