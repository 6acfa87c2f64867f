"""The references and the catalogue of known mistakes of ch02_positional_encoding (grader side)."""
from __future__ import annotations


import numpy as np
import torch

import vitref

from ..model import Mistake
from ._entry import add
from ._changes import table_mistakes
from ._symptoms import PROPERTIES, RECIPE_SAYS, TABLE


def _reference():
    def getPositionEncoding(seq_len, d, n=10000):
        return vitref.sinusoidal_encoding(seq_len, d, n)
    return [getPositionEncoding]


def _table(angle_fn, sin_first=True, halves=False, start=0):
    """A wrong table built like the loops of the skeleton: ``angle_fn(k, i, d, n, column)``."""
    def build(parts):
        def getPositionEncoding(seq_len, d, n=10000):
            P = np.zeros((seq_len, d))
            for k in range(start, seq_len + start):
                for i in np.arange(int(d / 2)):
                    even_col, odd_col = (i, i + d // 2) if halves else (2 * i, 2 * i + 1)
                    a_even = angle_fn(k, i, d, n, 2 * i)
                    a_odd = angle_fn(k, i, d, n, 2 * i + 1)
                    with np.errstate(divide="ignore", invalid="ignore"):
                        P[k - start, even_col] = np.sin(a_even) if sin_first else np.cos(a_even)
                        P[k - start, odd_col] = np.cos(a_odd) if sin_first else np.sin(a_odd)
            return P
        return getPositionEncoding
    return build


def _transposed(parts):
    good = _table(lambda k, i, d, n, col: k / np.power(n, 2 * i / d))(parts)

    def getPositionEncoding(seq_len, d, n=10000):
        return good(seq_len, d, n).T
    return getPositionEncoding


def _loop_table(entries):
    """A wrong table written as the skeleton's two loops, each pair ``i`` of row ``k`` setting the
    ``(column, value)`` pairs ``entries(k, i, d, n, seq_len)`` gives, in that order."""
    def build(parts):
        def getPositionEncoding(seq_len, d, n=10000):
            P = np.zeros((seq_len, d))
            for k in range(seq_len):
                for i in np.arange(int(d / 2)):
                    for column, value in entries(k, i, d, n, seq_len):
                        P[k, column] = value
            return P
        return getPositionEncoding
    return build


def _sin_cos(k, denominator, even, odd, second=np.cos):
    return [(even, np.sin(k / denominator)), (odd, second(k / denominator))]


_sin_only = _loop_table(lambda k, i, d, n, L: _sin_cos(k, np.power(n, 2 * i / d), 2 * i, 2 * i + 1, np.sin))
_index_i = _loop_table(lambda k, i, d, n, L: _sin_cos(k, np.power(n, 2 * i / d), i, i + 1))
_exponent_seq_len = _loop_table(lambda k, i, d, n, L: _sin_cos(k, np.power(n, 2 * i / L), 2 * i, 2 * i + 1))
_sin_before_division = _loop_table(lambda k, i, d, n, L: [(2 * i, np.sin(k) / np.power(n, 2 * i / d)),
                                                          (2 * i + 1, np.cos(k) / np.power(n, 2 * i / d))])


def _precedence(k, i, d, n, col):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.float64(k) / (np.float64(n) ** 2 * i / d)


Q1_MISTAKES = [
    Mistake("sin_cos_swapped", "sine and cosine swapped",
            "Even columns 2i hold the sine, odd columns 2i+1 the cosine (P[k, 0] = sin(k) = 0 for k = 0).",
            _table(lambda k, i, d, n, col: k / np.power(n, 2 * i / d), sin_first=False)),
    Mistake("exponent_i_over_d", "exponent i/d instead of 2i/d",
            "The denominator is n^(2i/d): the pair index i is doubled.",
            _table(lambda k, i, d, n, col: k / np.power(n, i / d))),
    Mistake("exponent_column_index", "exponent from the column index (2i+1 for the cosine)",
            "Both columns of pair i share one frequency: use 2i/d for the sine and for the cosine.",
            _table(lambda k, i, d, n, col: k / np.power(n, col / d))),
    Mistake("exponent_doubled_twice", "exponent 4i/d: i doubled twice",
            "i already counts pairs; the exponent is 2*i/d, not 2*(2*i)/d.",
            _table(lambda k, i, d, n, col: k / np.power(n, 2 * (2 * i) / d))),
    Mistake("n_hardcoded", "n fixed at 10000",
            "Use the argument n in the denominator (the slides' table uses n = 100).",
            _table(lambda k, i, d, n, col: k / np.power(10000, 2 * i / d))),
    Mistake("multiplied", "position multiplied by the denominator",
            "The angle is k divided by n^(2i/d), not multiplied.",
            _table(lambda k, i, d, n, col: k * np.power(n, 2 * i / d))),
    Mistake("precedence", "n**2*i/d instead of n**(2*i/d)",
            "Operator precedence: n**2*i/d means (n**2)*i/d; write np.power(n, 2*i/d) or n**(2*i/d).",
            _table(_precedence)),
    Mistake("precedence_power", "n**(2*i)/d instead of n**(2*i/d)",
            "The whole fraction 2i/d is the exponent: np.power(n, 2*i/d).",
            _table(lambda k, i, d, n, col: k / (np.power(float(n), 2 * i) / d))),
    Mistake("halves", "sines in the first half of the columns, cosines in the second",
            "Interleave: column 2i gets the sine and column 2i+1 the cosine of the same angle.",
            _table(lambda k, i, d, n, col: k / np.power(n, 2 * i / d), halves=True)),
    Mistake("positions_from_one", "positions counted from 1",
            "Row k is position k, starting at 0 (the first row is sin(0) = 0, cos(0) = 1).",
            _table(lambda k, i, d, n, col: k / np.power(n, 2 * i / d), start=1)),
    Mistake("integer_division", "exponent 2*i//d: integer division",
            "2*i//d is 0 for every pair (2i < d), so all columns get the same frequency; use 2*i/d.",
            _table(lambda k, i, d, n, col: k / np.power(n, 2 * i // d))),
    Mistake("sin_only", "sine in both columns of a pair",
            "Column 2i+1 holds the cosine of the same angle: P[k, 2*i+1] = cos(k / denominator).",
            _sin_only),
    Mistake("index_i", "columns indexed i and i+1 instead of 2i and 2i+1",
            "Pair i fills columns 2*i (sine) and 2*i+1 (cosine); with P[k, i] the pairs overwrite each other.",
            _index_i),
    Mistake("n_hardcoded_100", "n fixed at 100 (the slides' example)",
            "The slides' table uses n = 100 for the example only: use the argument n (10000 by default).",
            _table(lambda k, i, d, n, col: k / np.power(100, 2 * i / d))),
    Mistake("exponent_seq_len", "exponent 2i/seq_len instead of 2i/d",
            "The exponent divides by the model dimension d, not by the number of positions.",
            _exponent_seq_len),
    Mistake("sin_before_division", "sin(k) / denominator instead of sin(k / denominator)",
            "Divide the position first, then take the sine: np.sin(k / denominator).",
            _sin_before_division),
    Mistake("precedence_position", "k / n**2*i/d: the position divided by n**2 only",
            "Operator precedence: k / n**2*i/d means ((k / n**2) * i) / d; write k / n**(2*i/d).",
            _table(lambda k, i, d, n, col: k / float(n) ** 2 * i / d)),
    Mistake("transposed", "table transposed, (d, seq_len)",
            "Return one row per position: shape (seq_len, d).",
            _transposed),
]

# the table's counterfactuals, less the forms an entry above names: n_hardcoded(_100), exponent_i_over_d,
# exponent_doubled_twice, exponent_seq_len, positions_from_one, sin_only
_NAMED_TABLES = ("(n = 10000)", "(n = 100)", "(2i/(2d) in the exponent)", "(2i/(d/2) in the exponent)",
                 "(2i/seq_len in the exponent)", "(rows start at position 1)", "(sines only)")

add('q1', references=_reference,
    catalogue=[*Q1_MISTAKES, *table_mistakes("table", _NAMED_TABLES), *TABLE, *PROPERTIES, *RECIPE_SAYS])


# --------------------------------------------------------------------------- apply_rope (rotary position embedding)

def _rope(halves=False, sine_sign=1, exponent=2, start=0, write_halves=False, tiled=False, positions_axis=-2):
    """A wrong apply_rope written as a student writes it: ``halves`` pairs feature i with i + D/2,
    ``sine_sign=-1`` rotates the other way, ``exponent`` 1 gives base^(-i/D), ``start`` 1 counts
    positions from 1, ``write_halves`` reads the neighbouring pairs but writes them back as two
    halves, ``tiled`` gives feature j the angle of pair j mod D/2, ``positions_axis`` counts the
    positions along another axis."""
    def build(parts):
        def apply_rope(x, base=10000):
            seq_len, width = x.shape[positions_axis], x.shape[-1]
            positions = torch.arange(start, seq_len + start, dtype=torch.float64)[:, None]      # (T, 1)
            pair = torch.arange(width // 2, dtype=torch.float64)[None, :]                        # (1, D/2)
            angles = positions * float(base) ** (-exponent * pair / width)                       # (T, D/2)
            if tiled:        # feature 2i gets the angle of pair (2i mod D/2), feature 2i+1 of (2i+1 mod D/2)
                angles = angles.repeat(1, 2).reshape(seq_len, width // 2, 2)                      # (T, D/2, 2)
                return _rotate_pairs(x, angles[..., 0], angles[..., 1], sine_sign)
            cos, sin = torch.cos(angles).to(x.dtype), sine_sign * torch.sin(angles).to(x.dtype)
            first, second = ((x[..., :width // 2], x[..., width // 2:]) if halves
                             else (x[..., 0::2], x[..., 1::2]))
            new_first, new_second = first * cos - second * sin, first * sin + second * cos
            if halves or write_halves:
                return torch.cat((new_first, new_second), dim=-1)
            return torch.stack((new_first, new_second), dim=-1).flatten(-2)                      # (..., T, D)
        return apply_rope
    return build


def _rotate_pairs(x, even_angles, odd_angles, sine_sign=1):
    """GPT-J's rotate-every-two, out = x cos + rot(x) sin, with its own angle for every feature:
    (T, D/2) each for the even and the odd features."""
    even, odd = x[..., 0::2], x[..., 1::2]                                                        # (..., T, D/2)
    new_even = even * torch.cos(even_angles).to(x.dtype) - odd * sine_sign * torch.sin(even_angles).to(x.dtype)
    new_odd = odd * torch.cos(odd_angles).to(x.dtype) + even * sine_sign * torch.sin(odd_angles).to(x.dtype)
    return torch.stack((new_even, new_odd), dim=-1).flatten(-2)                                  # (..., T, D)


ROPE_MISTAKES = [
    Mistake("rope_halves", "features paired as (i, i + D/2), the rotate-half layout of GPT-NeoX",
            "This exercise follows RoFormer: pair i is the neighbouring features (2i, 2i+1), x[..., 0::2] and "
            "x[..., 1::2]. Pairing feature i with i + D/2 (rotate_half, GPT-NeoX and Hugging Face's LLaMA) is a "
            "different convention: as good for a model trained with it, but it rotates other pairs of numbers.",
            _rope(halves=True),
            ask="Which two features of a token does your code rotate together: neighbours, or features half the "
                "width apart?"),
    Mistake("rope_sine_sign", "each pair rotated the other way (the sign of the sine swapped)",
            "Rotate by +angle: new x_2i = x_2i cos - x_2i+1 sin and new x_2i+1 = x_2i sin + x_2i+1 cos.",
            _rope(sine_sign=-1),
            ask="Which way does your code turn each pair: where does the minus sign of the rotation go?"),
    Mistake("rope_exponent", "the angle's exponent is not 2i/D: t * base^(-i/D) or t * base^(-4i/D)",
            "Pair i turns at the frequency base^(-2i/D): i counts pairs (features 2i and 2i+1), so the exponent "
            "is 2i/D, neither i/D nor 2(2i)/D (the feature index doubled again).",
            _rope(exponent=1), also=(_rope(exponent=4),),
            ask="Pair i covers features 2i and 2i+1: which exponent of the base gives its frequency, and is the i "
                "in your exponent the index of a pair or of a feature?"),
    Mistake("rope_positions_from_one", "positions counted from 1",
            "Token t sits at position t from 0: the first token's angle is 0 and it is left as it is.",
            _rope(start=1),
            ask="What does your function do to the first token, at position 0?"),
    Mistake("rope_written_as_halves", "the rotated pairs written back as two halves, not in their places",
            "Read and write the same places: the rotated pair i goes back to features 2i and 2i+1 (stack the two "
            "rotated parts on a last axis and flatten it), not all first numbers then all second numbers.",
            _rope(write_halves=True),
            ask="After your code rotates pair i, at which two positions of the output do its two numbers land?"),
    Mistake("rope_angles_tiled", "the angles tiled across the width ([a0, a1, ..., a0, a1, ...]) instead of one "
            "per pair ([a0, a0, a1, a1, ...])",
            "Features 2i and 2i+1 are one pair and turn by the same angle: repeat each angle twice in a row "
            "(repeat_interleave(2, dim=-1)), not the whole row of angles twice (repeat).",
            _rope(tiled=True),
            ask="Which angle does your code give feature 1: the same as feature 0's, since they form one pair?"),
    Mistake("rope_positions_wrong_axis", "the positions counted along axis 1 instead of the token axis (-2)",
            "The tokens are the second-to-last axis of (..., T, D): take T from x.shape[-2], which is right for "
            "(T, D), (B, T, D) and (B, H, T, D) alike.",
            _rope(positions_axis=1),
            ask="For queries of shape (B, H, T, D), which axis does your code take the number of positions from?"),
]

add('apply_rope', references=lambda: [vitref.apply_rope],
    catalogue=[*ROPE_MISTAKES, *PROPERTIES, *RECIPE_SAYS])
