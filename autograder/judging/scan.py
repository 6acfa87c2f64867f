"""The grader's static scan of a submission's source (it never runs student code).

* :func:`scan_source` (notebook cells) and :func:`scan_object` (a live answer, for the
  in-notebook ``check()``): the forbidden library functions an answer refers to, by name,
  in its own code and in the top-level helpers it uses, and references to ``vitref`` or the
  checker. A hit is a zero for that answer, with the line quoted.
* :func:`suspicious`: constructs with no place in an exercise answer that could be used to
  get around the checks (computed attribute names, ``exec``/``eval``, the profiler, the
  garbage collector, ``ctypes``, ``sys.modules``, torch's dispatcher...). They do not change
  a score (the ban in the student's process and the grader's own computation decide it);
  they are reported to the instructor in the feedback and the class report.

What is forbidden per exercise is :data:`autograder.student.forbidden.FORBIDDEN`.
"""
from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import types
from dataclasses import dataclass

from ..student.forbidden import FORBIDDEN

VITREF_MESSAGE = ("uses vitref, the course's reference implementation: answers must be your own code "
                  "(vitref is not available when your notebook is graded)")
CHECKER_MESSAGE = "uses the autograder itself: answers must not touch the checker"


def describe(key: str) -> str:
    if key == "vitref":
        return VITREF_MESSAGE
    if key == "autograder":
        return CHECKER_MESSAGE
    f = FORBIDDEN[key]
    return f"uses {f.what}: {f.why}"


# --------------------------------------------------------------------------- resolving names


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
    library: set[str] = set()
    other: set[str] = set()
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
    """The notebook's global names that the top-level statement ``node`` may read: every name
    read at the top level or in a class body (which looks names up in the globals), and in a
    function only the names that are not its own: a parameter or local variable ``logits`` is
    not the notebook's global ``logits`` (following it led an honest cross_entropy to the ViT
    demo ``logits, attentions = model(x)``, and through it to the attention's softmax)."""
    every = {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}
    try:
        import symtable
        table = symtable.symtable(ast.unparse(node), "<cell>", "exec")
    except (SyntaxError, ValueError, RecursionError, AttributeError, TypeError):
        return every
    names: set[str] = set()
    todo = [table]
    while todo:
        scope = todo.pop()
        for symbol in scope.get_symbols():
            if not symbol.is_referenced():
                continue
            if scope.get_type() != "function" or symbol.is_global():
                names.add(symbol.get_name())
        todo.extend(scope.get_children())
    return names & every


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


_NAMESPACES = ("torch", "torch.nn.functional", "torch.nn", "torch.special", "torch.Tensor", "torch.sparse",
               "torch.nn.modules.activation", "torch.nn.modules.normalization", "torch.nn.modules.loss")


def _forbidden_objects(keys) -> dict:
    """id -> key for the library objects the exercises ``keys`` forbid (``torch.softmax``,
    ``F.softmax``, ``nn.Softmax``, ``Tensor.softmax``...), as found in loaded modules."""
    table = {}
    for key in keys:
        f = FORBIDDEN[key]
        owners = []
        for name in _NAMESPACES:
            module_name, _, attr = name.rpartition(".") if name == "torch.Tensor" else (name, "", "")
            module = sys.modules.get(module_name)
            owner = getattr(module, attr, None) if attr else module
            if owner is not None:
                owners.append(owner)
        for owner in owners:
            for attr in f.attrs:
                obj = getattr(owner, attr, None)
                if obj is not None:
                    table[id(obj)] = key
                    table[id(getattr(obj, "__func__", obj))] = key
        for spec in f.python:
            module_name, _, qualname = spec.partition(":")
            obj = sys.modules.get(module_name)
            for part in qualname.split("."):
                obj = getattr(obj, part, None) if obj is not None else None
            if obj is not None:
                table[id(obj)] = key
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
                module, qualname = getattr(value, '__module__', None) or 'torch', getattr(value, '__name__', name)
                hits.append(Hit(key, f"the name {name} in {func.__qualname__} is {module}.{qualname}"))
            elif level < depth:
                module = getattr(value, "__module__", "") or ""
                if isinstance(module, str) and module.split(".")[0] in ("torch", "numpy", "einops", "builtins"):
                    continue
                for helper in _functions_of(value) if isinstance(value, (type, types.FunctionType)) else ():
                    visit(helper, level + 1)

    for func in _functions_of(answer):
        visit(func, 0)
    return _dedupe(hits)


# --------------------------------------------------------------------------- suspicious constructs

_SUSPICIOUS_CALLS = {
    "exec": "runs code built at run time (exec)",
    "eval": "runs code built at run time (eval)",
    "compile": "compiles code at run time (compile)",
    "__import__": "imports a module by a computed name (__import__)",
    "setprofile": "changes the profiler (sys.setprofile)",
    "settrace": "changes the tracer (sys.settrace)",
    "get_objects": "walks the garbage collector (gc.get_objects)",
    "get_referrers": "walks the garbage collector (gc.get_referrers)",
    "get_referents": "walks the garbage collector (gc.get_referents)",
    "import_module": "imports a module by a computed name (importlib.import_module)",
    "reload": "reloads a module (importlib.reload)",
    "b64decode": "decodes hidden code or data (base64)",
    "loads": None,   # marshal.loads / pickle.loads: flagged below only for those modules
    "register_at_fork": "hooks into process creation (os.register_at_fork)",
}
_SUSPICIOUS_MODULES = {
    "ctypes": "uses ctypes (raw memory and C calls)",
    "marshal": "loads compiled code (marshal)",
    "gc": "uses the garbage collector module (gc)",
    "importlib": "uses importlib",
    "inspect": None,
    "signal": "changes signal handling (signal)",
    "autograder": "refers to the checker (autograder) outside a check cell",
}
_SUSPICIOUS_ATTRS = {
    "modules": "reads or changes sys.modules",
    "_dispatch_library": "registers kernels in PyTorch's dispatcher",
    "Library": "registers kernels in PyTorch's dispatcher (torch.library)",
    "_refs": "uses torch's Python reference implementations (torch._refs)",
    "_decomp": "uses torch's decompositions (torch._decomp)",
    "__closure__": "reads function closures",
    "__globals__": "reads function globals",
    "__code__": "reads or replaces code objects",
    "f_back": "walks the call stack",
    "_getframe": "walks the call stack",
    "__subclasses__": "walks the class hierarchy",
}


def suspicious(cells: list[str], check_call_names=("check", "grade")) -> list[str]:
    """Constructs in the notebook that could get around the checks (see the module
    docstring): one line per kind, with its first place, for the instructor."""
    found: dict[str, str] = {}

    def note(what: str, index: int, node) -> None:
        if what and what not in found:
            found[what] = f"cell {index + 1}, line {getattr(node, 'lineno', 0)}"

    for index, cell in enumerate(cells):
        try:
            tree = ast.parse(cell)
        except SyntaxError:
            continue
        # "name in sys.modules" only asks whether a module is loaded (the set-up cells do it)
        membership = {id(c) for n in ast.walk(tree) if isinstance(n, ast.Compare)
                      and all(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops) for c in n.comparators}
        for node in ast.walk(tree):
            if id(node) in membership:
                continue
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in ("getattr", "setattr", "delattr") and len(node.args) >= 2 and not (
                        isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                    note(f"{name} with a computed attribute name", index, node)
                elif name == "loads" and isinstance(node.func, ast.Attribute) and _chain(node.func)[:1] in (
                        ["marshal"], ["pickle"]):
                    note("loads serialized code or objects (marshal/pickle.loads)", index, node)
                elif suspicious := _SUSPICIOUS_CALLS.get(name):
                    note(suspicious, index, node)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for module in modules:
                    top = module.split(".")[0]
                    if top == "autograder" and isinstance(node, ast.ImportFrom) and all(
                            a.name in check_call_names for a in node.names):
                        continue
                    if top == "autograder" and isinstance(node, ast.Import) and module == "autograder":
                        continue
                    note(_SUSPICIOUS_MODULES.get(top) or "", index, node)
            elif isinstance(node, ast.Attribute) and node.attr in _SUSPICIOUS_ATTRS:
                chain = _chain(node)
                if node.attr == "modules" and chain[:1] != ["sys"]:
                    continue
                note(_SUSPICIOUS_ATTRS[node.attr], index, node)
    return [f"{what} ({where})" for what, where in found.items()]
