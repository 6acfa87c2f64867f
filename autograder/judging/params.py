"""Matching a student's module parameters to a reference module's (grader side).

The probe writes known values into every parameter of the student's module (by position
and shape, see :func:`autograder.questions.inputs.param_values`). To compute what the *correct* module
would output with those same weights, the judge loads them into the reference module. Names
and layouts differ between correct answers, so the match is done in stages:

* attention projections are recognised by name (``query``/``key``/``value``, ``W_Q``,
  ``q_proj``, fused ``qkv``/``key_value``...) and normalised to one matrix per role; a fused
  ``qkv`` weight may be laid out ``(qkv h d)`` (timm, vitref), ``(h d qkv)`` or ``(h qkv d)``;
* the other parameters are matched by name, else in order (skipping student parameters the
  reference lacks), else by unique shape; a missing bias counts as zero;
* raw ``nn.Parameter`` matrices used as ``x @ W`` are transposed when their shape says so.

Every way that fits gives one *candidate*; the answer is correct if one candidate matches.
"""
from __future__ import annotations

import itertools
import re
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
from einops import rearrange

from ..questions import inputs
from .messages import describe_shape

_ROLE = {
    "q": r"w_?q|q|query|queries|to_?q|q_?proj|proj_?q|q_?linear|linear_?q|fc_?q|q_?layer|wq|w_query|q_net",
    "k": r"w_?k|k|key|keys|to_?k|k_?proj|proj_?k|k_?linear|linear_?k|fc_?k|k_?layer|wk|w_key|k_net",
    "v": r"w_?v|v|value|values|to_?v|v_?proj|proj_?v|v_?linear|linear_?v|fc_?v|v_?layer|wv|w_value|v_net",
    "qkv": r"w_?qkv|qkv|to_?qkv|qkv_?proj|in_?proj|c_?attn|qkv_?linear|qkv_?layer|wqkv|query_key_value",
    "kv": r"w_?kv|kv|to_?kv|kv_?proj|key_?value|keys_?values|kv_?linear|kv_?layer|wkv|to_key_value",
}
_ROLE_RE = {role: re.compile(rf"^({pattern})$", re.IGNORECASE) for role, pattern in _ROLE.items()}

QKV_LAYOUTS = ("qkv h d", "h d qkv", "h qkv d")
KV_LAYOUTS = ("kv h d", "h d kv", "h kv d")


class AlignmentError(Exception):
    """The student's parameters cannot be matched to the reference's."""


@dataclass
class P:
    name: str
    shape: tuple
    owner: str              # "linear", "conv" or the owning module's class name
    value: np.ndarray | None = None

    @property
    def leaf(self) -> str:
        return self.name.rpartition(".")[2]

    @property
    def is_bias(self) -> bool:
        return self.leaf == "bias"

    @property
    def raw(self) -> bool:
        return self.owner not in ("linear", "conv")


@dataclass
class Group:
    """Attention input projections of one module: role -> {"weight": P, "bias": P|None}."""

    parent: str
    roles: dict = field(default_factory=dict)   # "q"/"k"/"v"/"qkv"/"kv" -> {"weight": P, "bias": P}
    position: int = 0


def _role_of(p: P):
    """(parent, role, member) when ``p`` is an attention projection, else None."""
    path, _, leaf = p.name.rpartition(".")
    if not p.raw:
        parent, _, token = path.rpartition(".")
        member = leaf
    else:
        parent, token, member = path, leaf, "weight"
        if len(p.shape) != 2:
            return None
    if member not in ("weight", "bias"):
        return None
    for role, regex in _ROLE_RE.items():
        if regex.match(token):
            return parent, role, member
    return None


_VALID_GROUPS = ({"q", "k", "v"}, {"qkv"}, {"q", "kv"})


def split_units(params: list[P]):
    """(plain parameters, attention groups) of a module, groups in order of first appearance."""
    tagged: dict[str, dict] = {}
    role_of = {}
    for index, p in enumerate(params):
        info = _role_of(p)
        if info is None:
            continue
        parent, role, member = info
        tagged.setdefault(parent, {}).setdefault(role, {})[member] = (index, p)
        role_of[index] = parent
    groups, grouped = [], set()
    for parent, roles in tagged.items():
        if set(roles) not in _VALID_GROUPS or any("weight" not in members for members in roles.values()):
            continue
        group = Group(parent, {role: {"weight": m["weight"][1], "bias": m.get("bias", (None, None))[1]}
                               for role, m in roles.items()},
                      position=min(i for m in roles.values() for i, _ in m.values()))
        groups.append(group)
        grouped |= {i for m in roles.values() for i, _ in m.values()}
    groups.sort(key=lambda g: g.position)
    plain = [p for i, p in enumerate(params) if i not in grouped]
    return plain, groups


# --------------------------------------------------------------------------- group matrices


def _oriented(p: P, value: np.ndarray, out_features: int | None, transpose_square: bool) -> np.ndarray:
    """A raw matrix as Linear's (out, in): transpose when the shape (or the candidate) says so."""
    if not p.raw:
        return value
    if out_features is not None and value.shape[0] != out_features and value.shape[1] == out_features:
        return value.T
    if value.shape[0] == value.shape[1] and transpose_square:
        return value.T
    return value


def group_matrices(group: Group, values: dict, heads: int, layout: int, transpose_square: bool,
                   out_features: int | None = None) -> dict:
    """role ("q","k","v") -> (W (out, in), b (out,) or None) in the canonical ``(h d)`` order."""
    result = {}
    for role, members in group.roles.items():
        w_p, b_p = members["weight"], members["bias"]
        w = values[w_p.name]
        b = values[b_p.name] if b_p is not None else None
        if role in ("q", "k", "v"):
            result[role] = (_oriented(w_p, w, out_features, transpose_square), b)
            continue
        parts = 3 if role == "qkv" else 2
        names = ("q", "k", "v") if role == "qkv" else ("k", "v")
        if w_p.raw and w.shape[1] % parts == 0 and w.shape[0] % parts != 0:
            w = w.T                                     # x @ W_qkv with W (in, 3E)
        total = w.shape[0]
        if total % parts:
            raise AlignmentError(f"{w_p.name} has {total} rows, not a multiple of {parts}")
        per_role = total // parts
        h = heads if heads and per_role % heads == 0 else 1
        pattern = (QKV_LAYOUTS if role == "qkv" else KV_LAYOUTS)[layout]
        token = "qkv" if role == "qkv" else "kv"
        w_split = rearrange(w, f"({pattern}) i -> {token} (h d) i", h=h, **{token: parts})
        b_split = rearrange(b, f"({pattern}) -> {token} (h d)", h=h, **{token: parts}) if b is not None else None
        for j, name in enumerate(names):
            result[name] = (w_split[j], b_split[j] if b_split is not None else None)
    return result


def write_group(group: Group, matrices: dict, out: dict):
    """Write canonical role matrices into a (target) group's parameter names."""
    for role, members in group.roles.items():
        w_p, b_p = members["weight"], members["bias"]
        names = {"qkv": ("q", "k", "v"), "kv": ("k", "v")}.get(role, (role,))
        weights = [matrices[n][0] for n in names]
        biases = [matrices[n][1] for n in names]
        weight = np.concatenate(weights, axis=0)
        if tuple(weight.shape) != tuple(w_p.shape):
            raise AlignmentError(f"{w_p.name}: expected shape {tuple(w_p.shape)}, the student's matrices give "
                                 f"{tuple(weight.shape)}")
        out[w_p.name] = weight
        if b_p is not None:
            bias = np.concatenate([b if b is not None else np.zeros(w.shape[0]) for b, w in zip(biases, weights)])
            out[b_p.name] = bias
        elif any(b is not None and np.any(b != 0) for b in biases):
            raise AlignmentError(f"{w_p.name} has no bias but the student's projection has one")


# --------------------------------------------------------------------------- plain parameters


def _squeezed(shape) -> tuple:
    return tuple(int(n) for n in shape if n != 1)


def _compatible(t: P, s: P) -> bool:
    if tuple(t.shape) != tuple(s.shape):
        transposed = s.raw and len(s.shape) == 2 and tuple(s.shape[::-1]) == tuple(t.shape)
        # (1, N+1, D) vs (N+1, D), (1, 1, D) vs (D,): the same table with extra unit axes
        if not transposed and _squeezed(s.shape) != _squeezed(t.shape):
            return False
    if t.is_bias != s.is_bias and (t.leaf in ("weight", "bias") and s.leaf in ("weight", "bias")):
        return False
    return True


def _match_by_name(targets, students):
    by_name = {s.name: s for s in students}
    mapping = []
    for t in targets:
        s = by_name.get(t.name)
        if s is None:
            if t.is_bias:
                mapping.append(None)
                continue
            return None
        if not _compatible(t, s):
            return None
        mapping.append(s)
    return mapping


def _kind(p: P) -> str:
    owner = p.owner.lower()
    if "norm" in owner:
        return "norm"
    return owner if owner in ("linear", "conv") else "other"


def _match_by_kind(targets, students):
    """In order within each kind of owner (norms, linear layers, convolutions, the rest), so
    modules registered in a different order still line up."""
    mapping = [None] * len(targets)
    for kind in {_kind(t) for t in targets}:
        t_index = [i for i, t in enumerate(targets) if _kind(t) == kind]
        sub = _match_in_order([targets[i] for i in t_index], [s for s in students if _kind(s) == kind])
        if sub is None:
            return None
        for i, s in zip(t_index, sub):
            mapping[i] = s
    return mapping


def _match_in_order(targets, students):
    mapping, j = [], 0
    for t in targets:
        if t.is_bias:
            if j < len(students) and _compatible(t, students[j]) and students[j].leaf != "weight":
                mapping.append(students[j])
                j += 1
            else:
                mapping.append(None)
            continue
        while j < len(students) and not _compatible(t, students[j]):
            j += 1
        if j == len(students):
            return None
        mapping.append(students[j])
        j += 1
    return mapping


def _match_by_shape(targets, students):
    mapping, used = [], set()
    for t in targets:
        options = [s for s in students if _compatible(t, s) and tuple(s.shape) == tuple(t.shape)]
        if len(options) != 1 or options[0].name in used:
            if t.is_bias and not options:
                mapping.append(None)
                continue
            return None
        used.add(options[0].name)
        mapping.append(options[0])
    return mapping


def _plain_value(t: P, s: P | None, values: dict, transpose_square: bool) -> np.ndarray:
    if s is None:
        return np.zeros(t.shape)
    value = values[s.name]
    if tuple(value.shape) != tuple(t.shape):
        value = value.reshape(t.shape) if _squeezed(value.shape) == _squeezed(t.shape) else value.T
    elif s.raw and len(s.shape) == 2 and s.shape[0] == s.shape[1] and transpose_square and t.owner == "linear":
        value = value.T
    return value


# --------------------------------------------------------------------------- candidates


def student_params(record: dict, seed: int, module_index: int, verify: bool = True) -> tuple[list[P], dict]:
    """The student's parameters (names, shapes) and the values the probe wrote into them.

    Values are regenerated here from names and shapes, never read back from the student's
    process; ``verify`` compares them with what the probe reported (a mismatch means the
    notebook interfered with the checker's random numbers or changed the weights).
    """
    params, values = [], {}
    for i, (name, shape, owner) in enumerate(record["params"]):
        value = _param_values(tuple(shape), seed, module_index, i, name)
        params.append(P(name, tuple(shape), owner))
        values[name] = value
        if verify:
            reported = record.get("values", {}).get(str(i))
            if reported is None or reported.shape != value.shape or not np.array_equal(
                    reported.astype(np.float32), value.astype(np.float32)):
                raise TamperError(f"the parameter {name} did not hold the value the checker wrote into it "
                                  f"(was it re-initialised, or the random number generator patched?)")
    return params, values


_VALUES: OrderedDict = OrderedDict()


def _param_values(shape: tuple, seed: int, module_index: int, index: int, name: str) -> np.ndarray:
    """:func:`inputs.param_values` in float64, remembered for the inputs in force (each run of a
    notebook draws its own pool; the judge regenerates the same values for every reference)."""
    key = (inputs.current().cache_key(), shape, seed, module_index, index, name)
    if key not in _VALUES:
        _VALUES[key] = inputs.param_values(shape, seed, module_index, index, name).astype(np.float64)
        if len(_VALUES) > 4096:
            _VALUES.popitem(last=False)
    return _VALUES[key].copy()


class TamperError(Exception):
    pass


def describe_params(params: list[P], dims: dict | None = None) -> str:
    return ", ".join(f"{p.name} {describe_shape(p.shape, dims or {})}" for p in params) or "no parameters"


def candidate_state_dicts(target_params: list[P], student: list[P], values: dict, heads: int | None,
                          head_width: int | None = None, limit: int = 18, layouts: int | None = None):
    """Yield state dicts (name -> array) for the target module built from the student's values.

    ``layouts``: how many of the fused layouts (:data:`QKV_LAYOUTS`, :data:`KV_LAYOUTS`, the
    canonical one first) a fused projection may have: ``1`` where the exercise fixes the
    layout (a case's ``params["fused_layouts"]``), all of them by default."""
    t_plain, t_groups = split_units(target_params)
    s_plain, s_groups = split_units(student)
    if len(t_groups) != len(s_groups):
        raise AlignmentError(f"the reference has {len(t_groups)} attention projection group(s), your module "
                             f"{len(s_groups)}")
    mappings = []
    for strategy in (_match_by_name, _match_in_order, _match_by_kind, _match_by_shape):
        mapping = strategy(t_plain, s_plain)
        if mapping is not None and mapping not in mappings:
            mappings.append(mapping)
    if not mappings:
        raise AlignmentError("the parameters do not match the reference's")
    has_fused = any(set(g.roles) & {"qkv", "kv"} for g in s_groups)
    has_square_raw = any(p.raw and len(p.shape) == 2 and p.shape[0] == p.shape[1] for p in student)
    allowed = len(QKV_LAYOUTS) if layouts is None else max(1, min(int(layouts), len(QKV_LAYOUTS)))
    layout_range = range(allowed) if has_fused else range(1)
    transposes = (False, True) if has_square_raw else (False,)
    count = 0
    last_error = None
    for mapping, layout, transpose in itertools.product(mappings, layout_range, transposes):
        try:
            state = {}
            for t, s in zip(t_plain, mapping):
                state[t.name] = _plain_value(t, s, values, transpose)
            for tg, sg in zip(t_groups, s_groups):
                out_features = None
                w = next(iter(tg.roles.values()))["weight"]
                if "q" in tg.roles:
                    out_features = tg.roles["q"]["weight"].shape[0]
                h = heads
                if head_width is not None and out_features is not None and out_features != head_width:
                    h = 1
                matrices = group_matrices(sg, values, h or 1, layout, transpose, out_features)
                write_group(tg, matrices, state)
                del w
        except AlignmentError as error:
            last_error = error
            continue
        yield state
        count += 1
        if count >= limit:
            return
    if count == 0:
        raise last_error or AlignmentError("the parameters do not match the reference's")
