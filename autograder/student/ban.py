"""Removing what an exercise forbids from the student's process, before the answer runs.

:func:`install` disables, for the keys of :data:`autograder.questions.forbidden.FORBIDDEN`:

* the ATen operators, at PyTorch's dispatcher: a kernel that raises :class:`ForbiddenCall`
  is registered for the CPU, autograd, sparse and composite keys. Every Python route to the
  operator ends there (``torch.softmax``, ``F.softmax``, ``Tensor.softmax``, ``nn.Softmax``,
  ``torch.ops.aten._softmax``, ``torch._C._VariableFunctions``, a name computed with
  ``getattr``, code run by ``exec``, a reference taken before the check...);
* the Python functions that compute the same thing without that operator
  (``F.multi_head_attention_forward``...), replaced by raisers;
* torch's Python references and decompositions of those operators (``torch._refs``,
  ``torch._decomp``), which would compute them from smaller operators.

In the grading sandbox (``reversible=False``) the registration handle is leaked on purpose:
nothing in the process refers to it, so student code cannot find it to undo the ban, and
the original kernels are no longer reachable. The student may still register a kernel of
their own for the operator: that is writing the function, which is what the exercise asks.
What remains possible (walking the garbage collector for the originals of the Python
functions, reading torch's source files and executing them) is flagged by the grader's
static scan of the notebook (:mod:`autograder.judging.scan`).
"""
from __future__ import annotations

import sys

from ..questions.forbidden import FORBIDDEN, expand

# Every key an operator's kernel can live at: a kernel left at any one of them is a way to
# the library function (a nested tensor reaches NestedTensorCPU, a GPU tensor CUDA...).
_BACKENDS = ("CPU", "CUDA", "HIP", "MPS", "XPU", "Meta")
_KEYS = (_BACKENDS + tuple(f"Autograd{b}" for b in _BACKENDS)
         + tuple(f"{kind}{b}" for kind in ("Sparse", "SparseCsr", "NestedTensor", "Quantized")
                 for b in ("CPU", "CUDA"))
         + ("MkldnnCPU", "AutogradNestedTensor"))
# The alias keys stand for every runtime key without a kernel of its own. An operator is
# covered by the alias family it is implemented with (the raiser replaces that kernel); one
# with neither gets the explicit family. Registering both families and then removing them
# leaves PyTorch's dispatch table stale (a later backward warns "an autograd kernel was not
# registered"), which matters for `check()`, whose ban is undone in the student's kernel.
_IMPLICIT_ALIASES = ("CompositeImplicitAutograd", "CompositeImplicitAutogradNestedTensor")
_EXPLICIT_ALIASES = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def _dispatch_keys(op: str, namespace: str = "aten") -> tuple[str, ...]:
    import torch

    try:
        implicit = torch._C._dispatch_has_kernel_for_dispatch_key(f"{namespace}::{op}", "CompositeImplicitAutograd")
    except RuntimeError:
        implicit = False
    return _KEYS + (_IMPLICIT_ALIASES if implicit else _EXPLICIT_ALIASES)
_SCRUB_MODULES = ("torch._refs", "torch._refs.nn.functional", "torch._refs.special", "torch._refs.linalg",
                  "torch._decomp.decompositions", "torch._decomp.decompositions_for_rng")


def _keeper():
    """A function that leaks one reference to an object (Py_IncRef), taken when this module loads:
    the sandbox disarms ctypes' raw functions before the first cell (autograder.student.guard)."""
    import ctypes

    incref, as_object = ctypes.pythonapi.Py_IncRef, ctypes.py_object
    return lambda obj: incref(as_object(obj))


_KEEP_ALIVE = _keeper()


class ForbiddenCall(RuntimeError):
    """Raised instead of a forbidden function while an answer is checked."""


def _raiser(key: str, name: str):
    entry = FORBIDDEN[key]

    def forbidden(*args, **kwargs):
        raise ForbiddenCall(f"{name}, part of {entry.what}, is not allowed here: {entry.why}")

    forbidden.__name__ = name.rpartition(".")[2]
    return forbidden


def _all_op_names() -> list[str]:
    """Every operator name the dispatcher has now (one call costs milliseconds: made once per ban)."""
    import torch

    try:
        return list(torch._C._dispatch_get_all_op_names())
    except (AttributeError, RuntimeError):
        return []


def _overloads(ops, names: list[str]) -> list[str]:
    """The operators named in ``ops`` with every overload among the dispatcher's ``names``
    (``_softmax`` -> ``_softmax``, ``_softmax.out``): an overload left out would compute the same
    thing. An operator outside ``aten`` is named with its namespace (``quantized::softmax``)."""
    def qualified(op: str) -> str:
        return op if "::" in op else f"aten::{op}"

    bases = {qualified(op).partition(".")[0] for op in ops}
    found = list(dict.fromkeys(qualified(op) for op in ops))
    for name in names:
        if name.partition(".")[0] in bases and name not in found:
            found.append(name)
    return [name[len("aten::"):] if name.startswith("aten::") else name for name in found]


def _resolve(spec: str):
    module_name, _, qualname = spec.partition(":")
    owner = sys.modules.get(module_name)
    if owner is None:
        return None
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    return owner, parts[-1]


class Ban:
    """The registrations and replacements of one :func:`install` (undone by :meth:`undo`
    only when installed reversibly)."""

    def __init__(self):
        self.handles: list = []
        self.saved: list = []

    def undo(self) -> None:
        for handle in self.handles:
            handle.reset()
        self.handles.clear()
        for owner, attr, original in reversed(self.saved):
            setattr(owner, attr, original)
        self.saved.clear()


_WARM: dict = {}    # made by prepare() in the sandbox's zygote, for the bans made before a run's first cell


def prepare() -> None:
    """Once, in the sandbox's zygote: what :func:`install` would look up again in every run (each
    key's operators with their overloads among the dispatcher's, the decompositions by name). Used only
    by a run's first ban (``warm=True``), made before any of the student's code runs, when the
    dispatcher and the tables are still the zygote's."""
    names = _all_op_names()
    _WARM["overloads"] = {key: _overloads(entry.aten, names) for key, entry in FORBIDDEN.items()}
    _WARM["decompositions"] = [(table, _by_name(table)) for table in _decomposition_tables()]


def install(keys, reversible: bool = False, registered=(), warm: bool = False) -> Ban:
    """Disable what the exercises ``keys`` forbid (see the module docstring). ``registered``:
    keys whose operators this process has already disabled at the dispatcher, irreversibly
    (a probe's fork of a run started with that ban): only their Python functions are replaced
    again. ``warm``: nothing but the grader has run in this process since :func:`prepare`."""
    ban = Ban()
    keys = expand(keys)
    registered = set(expand(registered))
    if not keys:
        return ban
    import torch

    handles: dict = {}
    warm = warm and "overloads" in _WARM
    op_names = _all_op_names() if not warm and any(key not in registered or reversible for key in keys) else []
    for key in keys:
        if key in registered and not reversible:
            continue
        for op in (_WARM["overloads"][key] if warm else _overloads(FORBIDDEN[key].aten, op_names)):
            namespace, _, name = op.rpartition("::")
            namespace = namespace or "aten"
            if namespace not in handles:
                try:
                    handles[namespace] = torch._C._dispatch_library("IMPL", namespace, "")
                except RuntimeError:
                    continue        # a namespace this torch build does not have
            kernel = _raiser(key, f"torch operator {namespace}::{name}")
            for dispatch_key in _dispatch_keys(name, namespace):
                try:
                    handles[namespace].impl(name, dispatch_key, kernel, False)
                except RuntimeError:
                    pass            # no such operator or overload in this torch version
    if reversible:
        ban.handles = list(handles.values())
    else:
        for handle in handles.values():
            _KEEP_ALIVE(handle)                                  # keep the registrations alive...
    handles.clear()                                              # ...with no reference left to undo them
    for key in keys:
        entry = FORBIDDEN[key]
        for spec in entry.python:
            found = _resolve(spec)
            if found is None:
                continue
            owner, attr = found
            original = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
            if original is None:
                continue
            setattr(owner, attr, _raiser(key, spec.replace(":", ".")))
            if reversible:
                ban.saved.append((owner, attr, original))
        _scrub(key, entry.scrub, ban, reversible, warm)
    return ban


def _decomposition_tables() -> list[dict]:
    decomp = sys.modules.get("torch._decomp")
    if decomp is None:
        return []
    tables = [getattr(decomp, "decomposition_table", None), getattr(decomp, "meta_table", None)]
    tables += list((getattr(decomp, "global_decomposition_table", None) or {}).values())
    return [table for table in tables if isinstance(table, dict)]


def _by_name(table: dict) -> dict:
    """A decomposition table's operators by their packet's name."""
    out: dict = {}
    for op in list(table):
        out.setdefault(getattr(getattr(op, "_overloadpacket", op), "__name__", None), []).append(op)
    return out


def _scrub(key: str, names, ban: Ban, reversible: bool, warm: bool = False) -> None:
    names = set(names)
    if not names:
        return
    for module_name in _SCRUB_MODULES:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name in names:
            original = module.__dict__.get(name)
            if original is not None and callable(original):
                setattr(module, name, _raiser(key, f"{module_name}.{name}"))
                if reversible:
                    ban.saved.append((module, name, original))
    indexed = _WARM["decompositions"] if warm else [(table, _by_name(table)) for table in _decomposition_tables()]
    for table, by_name in indexed:
        for op in [op for name in names for op in by_name.get(name, ())]:
            if op in table:
                original = table[op]
                table[op] = _raiser(key, f"the decomposition of {op}")
                if reversible:
                    ban.saved.append((_TableSlot(table, op), "value", original))


class _TableSlot:
    """Lets :meth:`Ban.undo` restore a dict entry with setattr."""

    def __init__(self, table, op):
        self.__dict__["_table"], self.__dict__["_op"] = table, op

    def __setattr__(self, name, value):
        self._table[self._op] = value
