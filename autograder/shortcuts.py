"""Shortcuts an exercise forbids, and the two ways the checker finds them.

1. **At run time** (:class:`Tripwire`, in the process that runs the answer): while the
   answer runs, the forbidden functions are replaced by raisers *and* a profiler
   (``sys.setprofile``) watches every call, so a reference captured before the check
   (``sm = torch.softmax``) or a call into ``vitref`` is seen too.
2. **In the source** (:func:`scan_source` on the notebook text, :func:`scan_object` on a live
   object): an AST scan of the answer and of the top-level helpers it uses, plus a walk over
   the globals its code refers to.

Nothing here imports ``vitref``.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import sys
import textwrap
import types
from dataclasses import dataclass, field

# --------------------------------------------------------------------------- the forbidden list


@dataclass(frozen=True)
class Forbidden:
    key: str
    what: str                      # how the message names it
    why: str                       # what the exercise wants instead
    attrs: frozenset               # attribute names flagged in the source (torch.softmax -> "softmax")
    c_names: frozenset             # names of C functions flagged at run time
    py_funcs: tuple = ()           # "module:qualname" Python functions flagged at run time
    patches: tuple = ()            # "module:qualname" attributes replaced by raisers while the answer runs


FORBIDDEN: dict[str, Forbidden] = {}


def _forbid(*args, **kwargs):
    f = Forbidden(*args, **kwargs)
    FORBIDDEN[f.key] = f


_forbid(
    "softmax", "a library softmax (torch.softmax, F.softmax, Tensor.softmax, nn.Softmax)",
    "this exercise asks you to write softmax yourself from exp, max and sum",
    attrs=frozenset({"softmax", "log_softmax", "_softmax", "_log_softmax", "Softmax", "LogSoftmax", "softmin",
                     "Softmin", "special_softmax"}),
    c_names=frozenset({"softmax", "_softmax", "log_softmax", "_log_softmax", "softmin", "special_softmax",
                       "special_log_softmax"}),
    py_funcs=("torch.nn.functional:softmax", "torch.nn.functional:log_softmax", "torch.nn.functional:softmin",
              "torch.nn.modules.activation:Softmax.forward", "scipy.special:softmax", "scipy.special:log_softmax"),
    patches=("torch:softmax", "torch:log_softmax", "torch:_softmax", "torch.nn.functional:softmax",
             "torch.nn.functional:log_softmax", "torch:Tensor.softmax", "torch:Tensor.log_softmax",
             "torch.special:softmax", "torch.special:log_softmax"),
)
_forbid(
    "attention", "PyTorch's built-in attention (F.scaled_dot_product_attention, nn.MultiheadAttention)",
    "this exercise asks you to compute the attention scores, softmax and weighted sum yourself",
    attrs=frozenset({"scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward",
                     "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
                     "TransformerDecoder"}),
    c_names=frozenset({"scaled_dot_product_attention", "_scaled_dot_product_attention_math",
                       "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                       "_scaled_dot_product_flash_attention_for_cpu", "_fused_sdp_choice",
                       "_native_multi_head_attention"}),
    py_funcs=("torch.nn.functional:multi_head_attention_forward",
              "torch.nn.modules.activation:MultiheadAttention.forward"),
    patches=("torch.nn.functional:scaled_dot_product_attention", "torch.nn.functional:multi_head_attention_forward"),
)
_forbid(
    "layer_norm", "PyTorch's LayerNorm (nn.LayerNorm, F.layer_norm)",
    "this exercise asks you to compute the mean, the variance and the normalisation yourself",
    attrs=frozenset({"LayerNorm", "layer_norm", "native_layer_norm"}),
    c_names=frozenset({"layer_norm", "native_layer_norm"}),
    py_funcs=("torch.nn.functional:layer_norm", "torch.nn.modules.normalization:LayerNorm.forward"),
    patches=("torch:layer_norm", "torch:native_layer_norm", "torch.nn.functional:layer_norm"),
)
_forbid(
    "cross_entropy", "PyTorch's cross-entropy (F.cross_entropy, nn.CrossEntropyLoss, F.nll_loss)",
    "this exercise asks you to write the log-softmax, the pick of the target class and the mean yourself",
    attrs=frozenset({"cross_entropy", "CrossEntropyLoss", "nll_loss", "NLLLoss", "cross_entropy_loss"}),
    c_names=frozenset({"cross_entropy_loss", "nll_loss", "nll_loss_nd", "nll_loss2d"}),
    py_funcs=("torch.nn.functional:cross_entropy", "torch.nn.functional:nll_loss",
              "torch.nn.modules.loss:CrossEntropyLoss.forward", "torch.nn.modules.loss:NLLLoss.forward"),
    patches=("torch.nn.functional:cross_entropy", "torch.nn.functional:nll_loss"),
)
_forbid(
    "embedding", "PyTorch's embedding lookup (F.embedding, nn.Embedding)",
    "this exercise asks you to do the lookup yourself: a one-hot matrix times W (or indexing W)",
    attrs=frozenset({"embedding", "Embedding"}),
    c_names=frozenset({"embedding"}),
    py_funcs=("torch.nn.functional:embedding", "torch.nn.modules.sparse:Embedding.forward"),
    patches=("torch.nn.functional:embedding",),
)

VITREF_MESSAGE = ("uses vitref, the course's reference implementation: answers must be your own code "
                  "(vitref is not available when your notebook is graded)")
CHECKER_MESSAGE = "uses the autograder itself: answers must not touch the checker"


def describe(key: str) -> str:
    if key == "vitref":
        return VITREF_MESSAGE
    if key == "autograder":
        return CHECKER_MESSAGE
    if key == "profiler":
        return "switched off the checker's call monitor (sys.setprofile): answers must not tamper with the checker"
    f = FORBIDDEN[key]
    return f"uses {f.what}: {f.why}"


# --------------------------------------------------------------------------- resolving names


def _resolve(spec: str, import_missing: bool = False):
    """``"module:attr.path"`` -> (owner, attr name, object) or None (module not loaded)."""
    module_name, _, qualname = spec.partition(":")
    module = sys.modules.get(module_name)
    if module is None:
        if not import_missing:
            return None
        try:
            module = importlib.import_module(module_name)
        except Exception:
            return None
    owner, parts = module, qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    obj = inspect.getattr_static(owner, parts[-1], None) if isinstance(owner, type) else getattr(owner, parts[-1], None)
    if obj is None:
        return None
    return owner, parts[-1], obj


def _code_of(obj):
    obj = getattr(obj, "__func__", obj)
    return getattr(obj, "__code__", None)


_VITREF_DIR: list = []


def vitref_dir() -> str | None:
    """Folder of the vitref package (found without importing it); None when absent."""
    if not _VITREF_DIR:
        path = None
        module = sys.modules.get("vitref")
        try:
            if module is not None and getattr(module, "__file__", None):
                path = os.path.dirname(os.path.abspath(module.__file__))
            else:
                spec = importlib.util.find_spec("vitref")
                if spec is not None and spec.origin:
                    path = os.path.dirname(os.path.abspath(spec.origin))
        except Exception:
            path = None
        _VITREF_DIR.append(path + os.sep if path else None)
    return _VITREF_DIR[0]


AUTOGRADER_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


# --------------------------------------------------------------------------- run time


class ForbiddenCall(RuntimeError):
    """Raised by the stand-ins of forbidden functions while an answer is being checked."""


class Tripwire:
    """Context manager: while active, forbidden functions raise and every call is watched.

    ``hits`` collects the keys of :data:`FORBIDDEN` (and ``"vitref"``) the answer used.
    """

    def __init__(self, keys=()):
        self.keys = tuple(keys)
        self.hits: list[str] = []
        self._saved: list = []
        self._previous_profile = None
        self._codes: dict = {}
        self._c_names: dict = {}
        self._vitref = vitref_dir()

    def _hit(self, key: str):
        if key not in self.hits:
            self.hits.append(key)

    def _raiser(self, key: str, name: str):
        tripwire = self

        def forbidden(*args, **kwargs):
            tripwire._hit(key)
            raise ForbiddenCall(f"{name} is not allowed in this exercise ({FORBIDDEN[key].why})")

        forbidden.__name__ = name
        return forbidden

    def _profile(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            key = self._codes.get(code)
            if key is not None:
                self._hit(key)
            elif self._vitref is not None and code.co_filename.startswith(self._vitref):
                self._hit("vitref")
        elif event == "c_call":
            key = self._c_names.get(getattr(arg, "__name__", None))
            if key is not None:
                owner = getattr(arg, "__self__", None)
                module = getattr(arg, "__module__", None) or ""
                owner_module = getattr(owner, "__name__", "") if isinstance(owner, types.ModuleType) else ""
                torch_owned = (owner is None or module.startswith("torch") or owner_module.startswith("torch")
                               or type(owner).__module__.startswith("torch"))
                if torch_owned:
                    self._hit(key)

    def __enter__(self):
        for key in self.keys:
            f = FORBIDDEN[key]
            for spec in f.py_funcs:
                resolved = _resolve(spec)
                if resolved is not None and _code_of(resolved[2]) is not None:
                    self._codes[_code_of(resolved[2])] = key
            for name in f.c_names:
                self._c_names[name] = key
            for spec in f.patches:
                resolved = _resolve(spec)
                if resolved is None:
                    continue
                owner, attr, original = resolved
                try:
                    setattr(owner, attr, self._raiser(key, spec.replace(":", ".")))
                except (TypeError, AttributeError):
                    continue
                self._saved.append((owner, attr, original))
        self._previous_profile = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, exc_type, exc, tb):
        current = sys.getprofile()
        sys.setprofile(self._previous_profile)
        # Python drops a profiler that raised (e.g. at the recursion limit): only a call that
        # returned normally without our profiler has switched it off on purpose.
        if exc_type is None and current is not self._profile and getattr(current, "__self__", None) is not self:
            self._hit("profiler")
        for owner, attr, original in reversed(self._saved):
            setattr(owner, attr, original)
        self._saved.clear()
        return False


# --------------------------------------------------------------------------- source scans


@dataclass
class Hit:
    key: str
    where: str      # "line 4: torch.softmax(x, -1)" or "the global name sm"

    def message(self, answer_name: str) -> str:
        return f"{answer_name} {describe(self.key)} ({self.where})"


def _attr_table(keys):
    table = {}
    for key in keys:
        for attr in FORBIDDEN[key].attrs:
            table.setdefault(attr, key)
    return table


TENSOR_METHODS = frozenset({"softmax", "log_softmax", "softmin"})   # x.softmax(...) needs no torch prefix
LIBRARY_ROOTS = frozenset({"torch", "F", "nn", "functional", "scipy", "special", "sp", "sps"})


def _chain(node) -> list[str]:
    """``torch.nn.functional.softmax`` -> ["torch", "nn", "functional", "softmax"]."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return parts[::-1]


def library_aliases(trees) -> tuple[set[str], set[str]]:
    """Names bound by imports to torch/scipy modules (``import torch.nn.functional as fn``), and
    names bound to other modules (``import helpers as S``: ``S.softmax`` is the student's)."""
    library, other = set(), set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    bound = (alias.asname or alias.name).split(".")[0]
                    (library if alias.name.split(".")[0] in ("torch", "scipy") else other).add(bound)
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if not alias.name[:1].islower():
                        continue                          # classes, not modules
                    bound = alias.asname or alias.name
                    (library if (node.module or "").split(".")[0] in ("torch", "scipy") else other).add(bound)
    return library, other - library


def _scan_nodes(nodes, keys, source_lines=None, offset=0, label="", roots=frozenset(), others=frozenset()):
    """Forbidden library attributes, vitref and autograder references in the given AST nodes.

    ``roots``: extra names of library modules; ``others``: names of the student's own modules,
    whose attributes (``helpers.softmax``) are not library calls."""
    attrs = _attr_table(keys)
    roots = (LIBRARY_ROOTS | set(roots)) - set(others)
    hits: list[Hit] = []

    def where(node):
        line = getattr(node, "lineno", 0)
        text = ""
        if source_lines and 0 < line <= len(source_lines):
            text = ": " + source_lines[line - 1].strip()[:80]
        return f"{label}line {line + offset}{text}"

    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.Attribute) and node.attr in attrs:
                chain = _chain(node)
                if chain and chain[0] in others:
                    continue
                if node.attr in TENSOR_METHODS or (chain and (chain[0] in roots or
                                                               {"torch", "nn", "functional"} & set(chain[:-1]))):
                    hits.append(Hit(attrs[node.attr], where(node)))
            elif isinstance(node, ast.Name) and node.id in ("vitref", "autograder"):
                hits.append(Hit(node.id, where(node)))
            elif isinstance(node, ast.Attribute) and node.attr == "vitref":
                hits.append(Hit("vitref", where(node)))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for module in modules:
                    top = module.split(".")[0]
                    if top in ("vitref", "autograder"):
                        hits.append(Hit(top, where(node)))
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("torch", "scipy"):
                    for alias in node.names:
                        if alias.name in attrs:
                            hits.append(Hit(attrs[alias.name], where(node)))
    return hits


def _bound_names(node) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    names = []
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Name):
                    names.append(sub.id)
    return names


def _used_names(node) -> set[str]:
    return {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}


def scan_source(cells: list[str], answer_name: str, keys=()) -> list[Hit]:
    """Scan notebook/script source for shortcuts used by ``answer_name``.

    ``cells`` are code cells in order (plain Python; magics already translated). The answer's
    last top-level definition is scanned, then the last definitions of the top-level names
    it uses, and so on (helpers, aliases such as ``sm = torch.softmax``).
    """
    definitions: dict[str, tuple] = {}
    trees = []
    for index, cell in enumerate(cells):
        try:
            tree = ast.parse(cell)
        except SyntaxError:
            continue
        trees.append(tree)
        lines = cell.splitlines()
        for node in tree.body:
            for name in _bound_names(node):
                definitions[name] = (node, lines, index)
    if answer_name not in definitions:
        return []
    roots, others = library_aliases(trees)
    hits, seen, todo = [], set(), [answer_name]
    while todo:
        name = todo.pop()
        if name in seen or name not in definitions:
            continue
        seen.add(name)
        node, lines, index = definitions[name]
        hits.extend(_scan_nodes([node], keys, lines, label=f"cell {index + 1}, ", roots=roots, others=others))
        todo.extend(_used_names(node) - seen)
    return _dedupe(hits)


def _dedupe(hits):
    out, seen = [], set()
    for hit in hits:
        if (hit.key, hit.where) not in seen:
            seen.add((hit.key, hit.where))
            out.append(hit)
    return out


def _parse_source(source: str):
    """Parse a (possibly partial) source snippet; lambdas come with their surrounding line."""
    try:
        return ast.parse(source)
    except SyntaxError:
        # e.g. "    key=lambda x: ...," taken from inside a call: keep the lambda part only
        start = source.find("lambda")
        if start < 0:
            raise
        snippet = source[start:]
        for end in range(len(snippet), 0, -1):
            try:
                return ast.parse(snippet[:end])
            except SyntaxError:
                continue
        raise


def _functions_of(obj):
    """The Python functions that make up an answer: itself, or a class's methods (own bases too)."""
    if isinstance(obj, type):
        funcs = []
        for klass in obj.__mro__:
            if klass.__module__.split(".")[0] in ("torch", "builtins", "einops", "typing", "abc"):
                continue
            for value in vars(klass).values():
                value = getattr(value, "__func__", value)
                if isinstance(value, property):
                    value = value.fget
                if isinstance(value, types.FunctionType):
                    funcs.append(value)
        return funcs
    obj = getattr(obj, "__func__", obj)
    if isinstance(obj, functools_partial_type()):
        return _functions_of(obj.func)
    if isinstance(obj, types.FunctionType):
        return [obj]
    return []


def functools_partial_type():
    import functools
    return functools.partial


def _code_names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _forbidden_objects(keys) -> dict:
    table = {}
    for key in keys:
        f = FORBIDDEN[key]
        for spec in f.patches + f.py_funcs:
            resolved = _resolve(spec)
            if resolved is not None:
                obj = resolved[2]
                table[id(obj)] = key
                table[id(getattr(obj, "__func__", obj))] = key
                owner = resolved[0]
                if isinstance(owner, type) and owner.__module__.startswith("torch.nn"):
                    table[id(owner)] = key   # nn.Softmax, nn.MultiheadAttention, nn.LayerNorm ...
    return table


def _is_vitref(obj) -> bool:
    if isinstance(obj, types.ModuleType):
        return obj.__name__.split(".")[0] == "vitref"
    module = getattr(obj, "__module__", None) or ""
    if isinstance(module, str) and module.split(".")[0] == "vitref":
        return True
    if isinstance(obj, type):
        return any((k.__module__ or "").split(".")[0] == "vitref" for k in obj.__mro__)
    return False


def _is_checker(obj) -> bool:
    if isinstance(obj, types.ModuleType):
        return obj.__name__.split(".")[0] == "autograder"
    return False


def scan_object(answer, answer_name: str, keys=(), depth: int = 3) -> list[Hit]:
    """Scan a live answer (function or class) and the user-defined helpers it refers to."""
    hits: list[Hit] = []
    forbidden = _forbidden_objects(keys)
    if _is_vitref(answer):
        return [Hit("vitref", f"{answer_name} is {getattr(answer, '__module__', 'vitref')}."
                              f"{getattr(answer, '__qualname__', answer_name)} itself")]
    seen: set[int] = set()

    def visit(func, level):
        if id(func) in seen:
            return
        seen.add(id(func))
        others = {name for name, value in func.__globals__.items()
                  if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] not in ("torch", "scipy")}
        try:
            source = textwrap.dedent(inspect.getsource(func))
            tree = _parse_source(source)
            if func.__name__ == "<lambda>":
                lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)]
                tree = ast.Module(body=[ast.Expr(n) for n in lambdas], type_ignores=[]) if lambdas else tree
            hits.extend(_scan_nodes([tree], keys, source.splitlines(), label=f"{func.__qualname__}, ",
                                    others=others))
        except (OSError, TypeError, SyntaxError, IndentationError):
            pass
        names = _code_names(func.__code__)
        scope = dict(func.__globals__)
        for cell_name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
            try:
                scope[cell_name] = cell.cell_contents
                names.add(cell_name)
            except ValueError:
                pass
        for name in sorted(names):
            if name not in scope:
                continue
            value = scope[name]
            if _is_vitref(value):
                what = (f"the module {value.__name__}" if isinstance(value, types.ModuleType)
                        else f"{getattr(value, '__module__', 'vitref')}.{getattr(value, '__qualname__', name)}")
                hits.append(Hit("vitref", f"the name {name} in {func.__qualname__} is {what}"))
            elif _is_checker(value):
                hits.append(Hit("autograder", f"the name {name} in {func.__qualname__}"))
            elif id(value) in forbidden or id(getattr(value, "__func__", value)) in forbidden:
                key = forbidden.get(id(value), forbidden.get(id(getattr(value, "__func__", value))))
                hits.append(Hit(key, f"the name {name} in {func.__qualname__} is "
                                     f"{getattr(value, '__module__', None) or 'torch'}.{getattr(value, '__name__', name)}"))
            elif level < depth:
                module = getattr(value, "__module__", "") or ""
                if isinstance(module, str) and module.split(".")[0] in ("torch", "numpy", "einops", "builtins"):
                    continue
                for helper in _functions_of(value) if isinstance(value, (type, types.FunctionType)) else ():
                    visit(helper, level + 1)

    for func in _functions_of(answer):
        visit(func, 0)
    return _dedupe(hits)
