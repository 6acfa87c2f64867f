"""The grader's static scan of a submission's source (it never runs student code).

* :func:`scan_source` (notebook cells) and :func:`scan_object` (a live answer, for the
  in-notebook ``check()``): the forbidden library functions an answer refers to, by name,
  in its own code and in the top-level helpers it uses, and references to ``vitref`` or the
  checker. A hit is a zero for that answer, with the line quoted.
* :func:`flags` (:func:`suspicious`: as text): constructs with no place in an exercise answer
  that could get around the checks and that no run-time enforcement decides (``exec``/``eval``,
  imports of code the scan never read, ``sys.modules``, frames and functions' internals, the
  garbage collector's object walkers, ``ctypes``, torch's dispatcher...; :data:`FLAG_KINDS`
  says why each one holds). Each holds the submission's scores for the instructor's review.
  What the run decides is not a flag: a forbidden function reached by a computed name
  (``getattr(nn, activation)``) is disabled in the student's process whatever its name.

What is forbidden per exercise is :data:`autograder.questions.forbidden.FORBIDDEN`.
"""
from __future__ import annotations

import ast
import functools
import inspect
import io
import re
import sys
import textwrap
import tokenize
import types
from dataclasses import dataclass
from typing import Iterator

from ..questions.forbidden import FORBIDDEN, expand
from ..student.cells import bound_names

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


# A notebook's given cells are the same in every student's copy: each distinct cell is parsed and walked
# once per grading job, whichever scan asks (nothing in this module changes a tree). Long cells are
# parsed each time, so the cache stays small.
_CACHED_CELL_CHARS = 20_000


@functools.lru_cache(maxsize=2048)
def _parse_cached(cell: str) -> ast.Module | None:
    try:
        return ast.parse(cell)
    except (SyntaxError, ValueError, RecursionError):
        return None


def parsed_cell(cell: str) -> ast.Module | None:
    """The tree of ``cell``, or None when it does not parse: the one the scans use (cached, see
    above), so that the grader parses each cell of a submission once. Never change it."""
    if len(cell) <= _CACHED_CELL_CHARS:
        return _parse_cached(cell)
    try:
        return ast.parse(cell)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _parse(cell: str) -> ast.Module:
    """``ast.parse(cell)``, shared between the scans (see above); a cell that does not parse is parsed
    again, so that it raises what ``ast.parse`` raises."""
    tree = parsed_cell(cell)
    return tree if tree is not None else ast.parse(cell)


def _walk(node) -> tuple:
    """``ast.walk(node)``'s nodes, listed once per node (kept on it: a cell's statements are scanned for
    every question and, through :func:`_parse`, for every student)."""
    nodes = getattr(node, "_walk", None)
    if nodes is None:
        nodes = node._walk = tuple(ast.walk(node))
    return nodes


@dataclass
class Hit:
    key: str
    where: str      # "line 4: torch.softmax(x, -1)" or "the global name sm"

    def message(self, answer_name: str) -> str:
        return f"{answer_name} {describe(self.key)} ({self.where})"


def _attr_table(keys):
    table = {}
    for key in expand(keys):
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
        for node in _walk(tree):
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


def _scan_nodes(nodes, keys, source_lines=None, offset=0, label="", roots=frozenset(), others=frozenset(),
                own_methods=frozenset()):
    """Forbidden library attributes, vitref and autograder references in the given AST nodes.

    ``roots``: extra names of library modules; ``others``: names of the student's own modules,
    whose attributes (``helpers.softmax``) are not library calls; ``own_methods``: the methods the
    student's classes define, so that ``self.log_softmax(x)`` calls the student's method, not
    the tensor method of that name."""
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
        for node in _walk(root):
            constant = _constant_getattr(node)
            if constant is not None and constant.attr in attrs:
                node = constant          # getattr(torch.nn, "MultiheadAttention") is torch.nn.MultiheadAttention
            if isinstance(node, ast.Attribute) and node.attr in attrs:
                chain = _chain(node)
                if chain and chain[0] in others:
                    continue
                if len(chain) == 2 and chain[0] in ("self", "cls") and node.attr in own_methods:
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


def _constant_getattr(node):
    """``getattr(obj, "name")`` (or ``getattr(obj, "name", default)``) as the attribute access
    ``obj.name`` it is, else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str) and node.args[1].value.isidentifier()):
        attribute = ast.Attribute(value=node.args[0], attr=node.args[1].value, ctx=ast.Load())
        return ast.copy_location(attribute, node)
    return None


def _used_names(node) -> set[str]:
    """The notebook's global names that the top-level statement ``node`` may read: every name
    read at the top level or in a class body (which looks names up in the globals), and in a
    function only the names that are not its own: a parameter or local variable ``logits`` is
    not the notebook's global ``logits`` (following it led an honest cross_entropy to the ViT
    demo ``logits, attentions = model(x)``, and through it to the attention's softmax)."""
    every = {sub.id for sub in _walk(node) if isinstance(sub, ast.Name)}
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
    definitions, roots, others, own_methods = _notebook_index(tuple(cells))
    if answer_name not in definitions:
        return []
    hits, seen, todo = [], set(), [answer_name]
    while todo:
        name = todo.pop()
        if name in seen or name not in definitions:
            continue
        seen.add(name)
        node, lines, index = definitions[name]
        hits.extend(_scan_nodes([node], keys, lines, label=f"cell {index + 1}, ", roots=roots, others=others,
                                own_methods=own_methods))
        todo.extend(_used_names(node) - seen)
    return _dedupe(hits)


@functools.lru_cache(maxsize=8)
def _notebook_index(cells: tuple[str, ...]) -> tuple[dict[str, tuple], frozenset, frozenset, frozenset]:
    """What :func:`scan_source` needs of a notebook, whichever question it scans for (parsed once
    per notebook, not once per question; nothing here changes the trees): the last top-level
    definition of each name ``(node, lines, cell index)``, the library roots and other aliases
    (:func:`library_aliases`, plus modules assigned from torch or scipy), the methods its classes define."""
    definitions: dict[str, tuple] = {}
    trees = []
    for index, cell in enumerate(cells):
        try:
            tree = _parse(cell)
        except SyntaxError:
            continue
        trees.append(tree)
        lines = cell.splitlines()
        for node in tree.body:
            for name in bound_names(node):
                definitions[name] = (node, lines, index)
    roots, others = library_aliases(trees)
    assigned = _Aliases(trees)
    roots |= {name for name in assigned.modules if assigned.paths[name][0] in ("torch", "scipy")}
    return definitions, frozenset(roots), frozenset(others), _methods_defined(trees)


def _methods_defined(trees) -> frozenset[str]:
    """The names of the methods the notebook's classes define (``def log_softmax(self, x)``)."""
    return frozenset(item.name for tree in trees for node in _walk(tree) if isinstance(node, ast.ClassDef)
                     for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)))


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
    for key in expand(keys):
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
    own_methods = {f.__name__ for f in _functions_of(answer)}

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
                                    others=others, own_methods=frozenset(own_methods)))
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
            hit = _name_hit(name, value, func.__qualname__, forbidden)
            if hit is not None:
                hits.append(hit)
            elif level < depth:
                module = getattr(value, "__module__", "") or ""
                if isinstance(module, str) and module.split(".")[0] in ("torch", "numpy", "einops", "builtins"):
                    continue
                helpers = _functions_of(value) if isinstance(value, (type, types.FunctionType)) else []
                if isinstance(value, type):
                    own_methods.update(f.__name__ for f in helpers)
                for helper in helpers:
                    visit(helper, level + 1)

    for func in _functions_of(answer):
        visit(func, 0)
    return _dedupe(hits)


def _name_hit(name: str, value, where: str, forbidden: dict) -> Hit | None:
    """What a name a function uses is, when it is vitref, the checker or a forbidden library function."""
    if _is_vitref(value):
        what = (f"the module {value.__name__}" if isinstance(value, types.ModuleType)
                else f"{getattr(value, '__module__', 'vitref')}.{getattr(value, '__qualname__', name)}")
        return Hit("vitref", f"the name {name} in {where} is {what}")
    if _is_checker(value):
        return Hit("autograder", f"the name {name} in {where}")
    key = forbidden.get(id(value), forbidden.get(id(getattr(value, "__func__", value))))
    if key is not None:
        module, qualname = getattr(value, '__module__', None) or 'torch', getattr(value, '__name__', name)
        return Hit(key, f"the name {name} in {where} is {module}.{qualname}")
    return None


# --------------------------------------------------------------------------- flags (held for review)

#: What each kind of flag means, for the instructor. A flag is a construct with no place in an
#: exercise answer that could be used to get around the checks; every one of them holds the
#: submission's questions for review (see :func:`flags`).
#:
#: What a flag does NOT need to hold, because it is decided while the notebook runs: calling a
#: forbidden library function, by any name or route (disabled at PyTorch's dispatcher and in
#: Python before the first cell, :mod:`autograder.student.ban`: ``getattr(nn, activation)``,
#: ``getattr(F, name)``, a ``hasattr`` guard, patching torch's modules can reach nothing the ban
#: left), forging what the probe sends (the grader recomputes every reference), starting a
#: program (the sandbox's exec ban), freeing memory (``gc.collect()``), asking a package's version
#: (``importlib.metadata``), an exception's ``sys.exc_info()``. Why each kind below still holds:
#:
#: * ``ctypes``: native code reads and writes the process's memory (the ban's kernels, the
#:   interpreter's state), below anything Python or PyTorch can refuse; the sandbox's audit hook
#:   refuses ctypes' own calls, not cffi's nor the local ``check()``'s, and no answer needs it.
#: * ``getattr``: a computed name on a module whose members are themselves flagged (builtins'
#:   ``exec``, ``sys``, ``gc``, ``importlib``, ``inspect``, ``types``, ``pickle``...) hides that
#:   member from this scan; on torch, ``nn``, ``F``, numpy or einops it is not a flag (the ban).
#: * ``getattr-forbidden``: ``getattr(module, "softmax")`` spells a forbidden function as a
#:   string: a zero for the questions that forbid it (:func:`scan_source`), held for the others
#:   since no answer writes it that way (``hasattr``, which returns a bool, is not a flag).
#: * ``module-dict``: a module's namespace as a dictionary reaches its members by computed keys
#:   (``__builtins__["exec"]``, as ``getattr`` above).
#: * ``exec``: code built at run time is code this scan never read: a copy of torch's source (read
#:   from its files) executed again computes the forbidden operation from allowed operators,
#:   which neither the ban nor the sandbox can tell from the student's own code.
#: * ``sys.modules``: deleting or replacing an entry makes the next import load a fresh copy of a
#:   torch module, without the ban's replacements (the same route as ``exec``).
#: * ``gc``: only the functions that hand out objects (``get_objects``, ``get_referrers``,
#:   ``get_referents``, ``garbage``): they reach the originals the ban replaced (through closures
#:   and references no name leads to); the audit hook refuses the first two, not the others.
#: * ``frames``: frames, tracers and functions' internals (``__globals__``, ``__closure__``,
#:   ``__code__``) reach objects no name leads to (the ban's originals, the probe's state); the
#:   audit hook refuses the frame routes it knows, not functions' internals.
#: * ``autograder``: the checker beyond ``check``/``grade`` has no place in an answer; what the
#:   student's process sends is recomputed by the grader, so this is a signal, never a route.
#: * ``dispatcher``, ``torch-internals``: PyTorch's registration and private namespaces can bring
#:   back a kernel under another name or run a decomposition the ban did not scrub.
#: * ``importlib``: importing by a computed name, reloading, loaders, ``runpy``, ``sys.meta_path``
#:   and changes of ``sys.path`` (the only way to import a file the notebook wrote: nothing on the
#:   sandbox's import path is writable) run code this scan never read, as ``exec`` does.
#: * ``hidden-code``: serialized or encoded code (marshal, pickle, base64, code objects) is code
#:   this scan never read, as ``exec``.
#: * ``signal``: a handler of its own can outlive the cell's alarm (the host's hard deadline still
#:   stops the process: only time is lost), and no answer needs it.
#: * ``embedded-data``, ``scan-failed``: data the process could read instead of computing; a
#:   notebook the scan could not read.
FLAG_KINDS = {
    "ctypes": "calls native code directly (ctypes/cffi)",
    "getattr": "looks up or sets an attribute of a module by a computed name, on a module some of whose members "
               "are flagged (builtins, sys, gc, importlib, inspect, types, pickle...: getattr/setattr/delattr, "
               "operator.attrgetter)",
    "getattr-forbidden": "looks up a forbidden library function by its name as a string",
    "module-dict": "reads a module's namespace as a dictionary (vars(module), module.__dict__, "
                   "__getattribute__, __builtins__)",
    "exec": "runs code built at run time (exec, eval, compile)",
    "sys.modules": "reads or changes sys.modules",
    "gc": "hands out objects through the garbage collector (gc.get_objects, get_referrers, get_referents, garbage)",
    "frames": "walks the call stack or reads functions' internals (frames, tracebacks' frames, tracers, "
              "__globals__, __closure__, __code__, __subclasses__)",
    "autograder": "imports or changes the checker (autograder.*) beyond calling autograder.check/grade",
    "dispatcher": "uses PyTorch's operator registration or dispatch (torch.library, torch._C._dispatch_*, "
                  "torch.ops.load_library, torch function/dispatch modes)",
    "torch-internals": "uses torch's internals (torch._C, torch._refs, torch._decomp, torch._prims, "
                       "torch._higher_order_ops)",
    "importlib": "imports modules by a computed name or changes the import system (importlib, __import__, "
                 "sys.meta_path, sys.path)",
    "hidden-code": "loads serialized or encoded code (marshal, pickle.loads, base64 decoding, "
                   "types.CodeType/FunctionType)",
    "signal": "changes signal handling (signal)",
    "embedded-data": "embeds a large amount of data in its source (string, bytes or number literals wherever "
                     "they stand, comments full of numbers: e.g. weights trained elsewhere or a copy of a data set)",
    "scan-failed": "could not be scanned (the grader's static scan raised an error on it): what the scan "
                   "would have found is unknown, so an instructor reads it",
}

#: The most data an honest notebook holds outside its code, counted over every literal wherever
#: it stands (assignments, call arguments, tuples, dicts, subscripts, f-strings, defaults...):
#: characters of string and bytes literals, digits of number literals (an integer's hexadecimal
#: digits, a float's or complex's repr) and characters of the comment words that write numbers
#: (:func:`_comment_data`: words with a digit, hexadecimal runs, unbroken runs too long for a
#: word; prose never counts), in all code cells together; and how many number literals (``-3``
#: is one, bools count too). The student's process can read all of that (its own source), so a
#: notebook could carry weights trained elsewhere (the 09_training FashionViT has about 10^5
#: parameters: 13,000 64-bit hexadecimal literals hold it in int8) or a copy of a data set in it.
#: Measured on the course's code (tests/test_scan_flags.py holds all of it to no flag): the
#: largest solution or exercise notebook holds 1,300 characters and 132 number literals, the
#: largest answer file of tests/answers 6,400 characters and 310 literals, the largest book
#: chapters 11,800 characters (07) and 526 literals (08).
MAX_LITERAL_CHARS = 20_000
MAX_LITERAL_NUMBERS = 2_000
MAX_NAME_CHARS = 20_000          # distinct identifiers, in characters (the course's notebooks: under 4,000)
MAX_COMMENT_CHARS = 40_000       # every comment's characters, prose included (an honest 24,000 stays under)


@dataclass(frozen=True)
class Flag:
    """One flagged construct: its kind (a key of :data:`FLAG_KINDS`), where it is (1-based cell
    and line) and the line itself."""

    kind: str
    cell: int
    line: int
    snippet: str

    @property
    def what(self) -> str:
        return FLAG_KINDS[self.kind]

    @property
    def where(self) -> str:
        return f"cell {self.cell}, line {self.line}" if self.cell else "the whole notebook"

    def text(self) -> str:
        return f"{self.what} ({self.where}: {self.snippet})"

    def held(self) -> dict:
        """The flag as a question's result records it (``held: [...]``)."""
        return {"flag": self.kind, "what": self.what, "line": self.where, "snippet": self.snippet}


_NATIVE = frozenset({"ctypes", "_ctypes", "cffi"})
_IMPORT_SYSTEM = frozenset({"importlib", "imp", "runpy", "zipimport", "pkgutil"})
_BUILTIN_EXEC = frozenset({"exec", "eval", "compile"})
_FRAME_ATTRS = frozenset({"_getframe", "_current_frames", "f_back", "f_globals", "f_locals", "f_builtins",
                          "tb_frame", "tb_next", "gi_frame", "cr_frame", "ag_frame", "__globals__",
                          "__closure__", "__code__", "__subclasses__", "settrace", "setprofile",
                          "gettrace", "getprofile"})
_FRAME_PATHS = {("sys", "monitoring"), ("inspect", "currentframe"),
                ("inspect", "stack"), ("inspect", "trace"), ("inspect", "getouterframes"),
                ("inspect", "getinnerframes"), ("inspect", "getframeinfo"), ("traceback", "walk_stack"),
                ("traceback", "walk_tb")}
_HIDDEN_PATHS = {("pickle", "loads"), ("pickle", "Unpickler"), ("types", "CodeType"), ("types", "FunctionType"),
                 ("base64", "b64decode"), ("base64", "b32decode"), ("base64", "b16decode"),
                 ("base64", "b85decode"), ("base64", "a85decode"), ("base64", "decodebytes"),
                 ("codecs", "decode")}
_TORCH_DISPATCH = frozenset({"library", "overrides", "cpp_extension", "_python_dispatch", "_library",
                             "_custom_ops", "_custom_op"})
_TORCH_INTERNAL = frozenset({"_C", "_refs", "_decomp", "_prims", "_prims_common", "_higher_order_ops", "_ops",
                             "_subclasses", "_meta_registrations", "_VF"})
_CHECKER_CALLS = frozenset({"check", "grade"})
_GC_OBJECTS = frozenset({"get_objects", "get_referrers", "get_referents", "garbage"})
#: Modules some member of which is a flag (:func:`_path_kind`): a computed attribute name on one
#: of them (``getattr(builtins, name)``) may be that member. torch, nn, F, numpy, einops... are
#: not here: what they hold that an exercise forbids is disabled at run time whatever its name.
_ROUTE_MODULES = (_NATIVE | _IMPORT_SYSTEM | {"builtins", "sys", "gc", "inspect", "types", "marshal", "pickle",
                                              "base64", "codecs", "traceback", "threading", "signal",
                                              "autograder", "operator"})
#: ``from <module> import *`` binds names this scan does not see: one member standing for them.
_STAR_MEMBER = {"gc": "get_objects", "sys": "modules", "inspect": "currentframe", "types": "CodeType",
                "pickle": "loads", "base64": "b64decode", "codecs": "decode", "traceback": "walk_stack",
                "threading": "settrace", "builtins": "exec", "importlib": "import_module", "marshal": "loads"}
_PATH_CHANGES = frozenset({"append", "insert", "extend", "__setitem__", "__iadd__", "remove", "pop", "clear"})
_ALL_FORBIDDEN_ATTRS = frozenset().union(*(f.attrs for f in FORBIDDEN.values()))


def _path_kind(path: list[str]) -> str | None:
    """The flag kind of a fully resolved dotted name (``["torch", "_C", "_dispatch_library"]``)."""
    if not path:
        return None
    top, pair = path[0], tuple(path[:2])
    if top in _NATIVE or "ctypeslib" in path or (len(path) > 1 and "ctypes" in path[1:]):
        return "ctypes"         # also numpy.ctypeslib and an array's .ctypes: ctypes by another name
    if top == "gc":
        return "gc" if len(path) > 1 and path[1] in _GC_OBJECTS else None     # gc.collect() frees memory
    if tuple(path) in {("importlib",), ("importlib", "util"), ("importlib", "util", "find_spec")}:
        return None          # whether a module is installed (the book's set-up cells ask it)
    if pair == ("importlib", "metadata"):
        return None          # a package's version or metadata: reads no code
    if top in _IMPORT_SYSTEM or pair in {("sys", "meta_path"), ("sys", "path_hooks"),
                                         ("sys", "path_importer_cache"), ("builtins", "__import__")}:
        return "importlib"
    if top == "marshal" or pair in _HIDDEN_PATHS:
        return "hidden-code"
    if top in ("signal", "_signal"):
        return "signal"
    if pair == ("sys", "modules"):
        return "sys.modules"
    if pair in _FRAME_PATHS or pair in {("threading", "settrace"), ("threading", "setprofile")}:
        return "frames"
    if top == "builtins" and len(path) > 1 and path[1] in _BUILTIN_EXEC:
        return "exec"
    if top == "autograder" and len(path) > 1 and not (len(path) == 2 and path[1] in _CHECKER_CALLS):
        return "autograder"
    if top == "torch":
        rest = path[1:]
        if (any(p in _TORCH_DISPATCH for p in rest) or any(p.startswith("_dispatch") for p in rest)
                or tuple(rest[:2]) in {("ops", "load_library"), ("ops", "import_module")}):
            return "dispatcher"
        if any(p in _TORCH_INTERNAL for p in rest):
            return "torch-internals"
    last = path[-1]
    if last.startswith("_dispatch_") or last in ("__torch_dispatch__", "__torch_function__"):
        return "dispatcher"
    if len(path) > 1 and last in _FRAME_ATTRS:
        return "frames"
    if len(path) > 1 and last in ("__dict__", "__getattribute__", "__builtins__"):
        return None          # decided by the caller: only on modules (an object's __dict__ is fine)
    return None


class _Aliases:
    """The notebook's names for modules: bound by imports (``import torch.nn.functional as F``,
    ``from torch import nn``) or assigned (``m = torch.ao.nn.quantizable``), with what they name."""

    def __init__(self, trees):
        self.paths: dict[str, list[str]] = {}
        self.modules: set[str] = set()
        assigns = []
        for tree in trees:
            for node in _walk(tree):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname:
                            self.paths[alias.asname] = alias.name.split(".")
                            self.modules.add(alias.asname)
                        else:
                            top = alias.name.split(".")[0]
                            self.paths[top] = [top]
                            self.modules.add(top)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    for alias in node.names:
                        if alias.name == "*":
                            continue
                        bound = alias.asname or alias.name
                        self.paths[bound] = node.module.split(".") + [alias.name]
                        if alias.name[:1].islower() or alias.name[:1] == "_":
                            self.modules.add(bound)
                elif (isinstance(node, ast.Assign) and len(node.targets) == 1
                      and isinstance(node.targets[0], ast.Name)):
                    assigns.append(node)
        for _ in range(3):                   # m = torch.nn; f = m.functional
            for node in assigns:
                path = self.resolve(node.value)
                if path and path[0] in self.modules_top() and node.targets[0].id not in self.paths:
                    self.paths[node.targets[0].id] = path
                    self.modules.add(node.targets[0].id)

    def modules_top(self) -> set[str]:
        return {self.paths[name][0] for name in self.modules if self.paths.get(name)}

    def resolve(self, node) -> list[str] | None:
        """The dotted name an expression stands for (``F.softmax`` -> torch.nn.functional.softmax),
        through ``sys.modules["x"]``, ``__import__("x")`` and ``importlib.import_module("x")``."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            base = self.paths.get(node.id, [node.id])
        elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
              and isinstance(node.slice.value, str) and self.resolve(node.value) == ["sys", "modules"]):
            base = node.slice.value.split(".")
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and self.resolve(node.func) in (["__import__"], ["builtins", "__import__"],
                                              ["importlib", "import_module"])):
            base = node.args[0].value.split(".")
        else:
            return None
        return base + parts[::-1]

    def is_module(self, node) -> bool:
        """Whether ``node`` names a module (or something reached through one): ``torch.nn``,
        ``F``, ``sys.modules["torch"]``; never ``self`` or a local object."""
        path = self.resolve(node)
        if not path:
            return False
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name):
            return root.id in self.modules
        return True                        # sys.modules[...], __import__(...), import_module(...)


def _bound_by_notebook(trees) -> set[str]:
    """Names the notebook defines itself (a student's own ``compile`` is not the builtin)."""
    names: set[str] = set()
    for tree in trees:
        for node in _walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def _string_value(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def scan_failure(error: BaseException) -> Flag:
    """The flag of a notebook the scan could not read: a scan that fails must hold the grade for
    review (fail closed), never let it through as "nothing found"."""
    return Flag("scan-failed", 0, 0, f"{type(error).__name__}: {str(error)[:160]}")


def flags_or_hold(cells: list[str]) -> list[Flag]:
    """:func:`flags`, or one ``scan-failed`` flag when the scan itself raises."""
    try:
        return flags(cells)
    except Exception as error:  # noqa: BLE001 - any failure of the scan holds the submission for review
        return [scan_failure(error)]


def _parsed_cells(cells: list[str]) -> list[tuple[int, ast.Module, list[str]]]:
    """``(index, tree, lines)`` of every cell that parses (one that does not is left out)."""
    parsed = []
    for index, cell in enumerate(cells):
        try:
            parsed.append((index, _parse(cell), cell.splitlines()))
        except (SyntaxError, ValueError, RecursionError):
            continue
    return parsed


def flags(cells: list[str]) -> list[Flag]:
    """Every construct of the notebook's ``cells`` that has no place in an answer and could get
    around the checks (:data:`FLAG_KINDS`), with its cell, line and text. The course's own
    cells (the set-up cell's ``"google.colab" in sys.modules``, ``import autograder``, the
    test cells' ``autograder.check``/``grade``) and honest code (``model.eval()``,
    ``setattr(self, name, ...)``) are not flags: the tests hold every solution and right answer
    of the course to no flag at all."""
    parsed = _parsed_cells(cells)
    trees = [tree for _, tree, _ in parsed]
    aliases = _Aliases(trees)
    own = _bound_by_notebook(trees) - set(aliases.paths)
    found: list[Flag] = []
    seen: set = set()
    for index, tree, lines in parsed:
        # "name in sys.modules" only asks whether a module is loaded (the set-up cell does it)
        membership = {id(c) for n in _walk(tree) if isinstance(n, ast.Compare)
                      and all(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops) for c in n.comparators}
        for node in _walk(tree):
            if id(node) in membership:
                continue
            line = getattr(node, "lineno", 0)
            for kind in _node_kinds(node, aliases, own):
                if kind and (kind, index, line) not in seen:
                    seen.add((kind, index, line))
                    text = lines[line - 1].strip()[:100] if 0 < line <= len(lines) else ""
                    found.append(Flag(kind, index + 1, line, text))
    _embedded_data(cells, parsed, found)
    return found


def _node_kinds(node, aliases: _Aliases, own: set) -> Iterator[str | None]:
    """The flag kinds one node of the tree raises (None: none), in the order they are reported."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield _path_kind(alias.name.split("."))
    elif isinstance(node, ast.ImportFrom):
        yield from _import_from_kinds(node)
    elif isinstance(node, ast.Attribute):
        yield from _attribute_kinds(node, aliases)
    elif isinstance(node, ast.Name):
        yield _name_kind(node, aliases, own)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in (
            "__torch_dispatch__", "__torch_function__"):
        yield "dispatcher"
    if isinstance(node, (ast.Assign, ast.AugAssign)):          # sys.path = [...], sys.path += [...]
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for assigned in targets:
            written = assigned.value if isinstance(assigned, ast.Subscript) else assigned
            if aliases.resolve(written) == ["sys", "path"]:
                yield "importlib"
    if isinstance(node, ast.Call):
        yield from _call_kinds(node, aliases, own)


def _import_from_kinds(node: ast.ImportFrom) -> Iterator[str | None]:
    module = (node.module or "").split(".")
    if node.level:
        return
    yield _path_kind(module)
    for alias in node.names:
        yield _path_kind(module + [alias.name])
        if alias.name == "*" and module[0] in _STAR_MEMBER:
            yield _path_kind(module + [_STAR_MEMBER[module[0]]])
        if alias.name in ("__import__",) or (module == ["builtins"] and alias.name in _BUILTIN_EXEC):
            yield "exec" if alias.name in _BUILTIN_EXEC else "importlib"


def _attribute_kinds(node: ast.Attribute, aliases: _Aliases) -> Iterator[str | None]:
    path = aliases.resolve(node)
    if path:
        yield _path_kind(path)
    if node.attr in ("__dict__", "__builtins__") and aliases.is_module(node.value):
        yield "module-dict"
    if node.attr == "__getattribute__":
        yield "module-dict"
    if path and path[0] == "autograder" and isinstance(node.ctx, (ast.Store, ast.Del)):
        yield "autograder"
    if node.attr in _FRAME_ATTRS or node.attr.startswith("_dispatch_") or node.attr in (
            "__torch_dispatch__", "__torch_function__"):
        yield "frames" if node.attr in _FRAME_ATTRS else "dispatcher"


def _name_kind(node: ast.Name, aliases: _Aliases, own: set) -> str | None:
    if node.id in own:
        return None
    if node.id in _BUILTIN_EXEC:
        return "exec"
    if node.id == "__import__":
        return "importlib"
    if node.id == "__builtins__":
        return "module-dict"
    if node.id in aliases.paths and isinstance(node.ctx, ast.Load):
        return _path_kind(aliases.paths[node.id])
    return None


def _call_kinds(node: ast.Call, aliases: _Aliases, own: set) -> Iterator[str | None]:
    func = aliases.resolve(node.func) or []
    name = node.func.id if isinstance(node.func, ast.Name) else None
    if func[:2] == ["sys", "path"] and len(func) == 3 and func[2] in _PATH_CHANGES:
        yield "importlib"                  # sys.path.insert(0, "."): import a file it wrote
    elif func == ["site", "addsitedir"]:
        yield "importlib"
    # hasattr returns a bool: whatever it looks up, nothing is reached through it
    if name in ("getattr", "setattr", "delattr") and name not in own and len(node.args) >= 2:
        yield from _getattr_kinds(name, node, aliases)
    elif name == "vars" and name not in own and node.args and aliases.is_module(node.args[0]):
        yield "module-dict"
    elif func in (["operator", "attrgetter"], ["operator", "methodcaller"]):
        texts = [_string_value(a) for a in node.args]
        if any(t is None for t in texts) or any(
                part in _ALL_FORBIDDEN_ATTRS for t in texts for part in (t or "").split(".")):
            yield "getattr"


def _getattr_kinds(name: str, node: ast.Call, aliases: _Aliases) -> Iterator[str | None]:
    """``getattr``/``setattr``/``delattr`` on a module or ``builtins``."""
    obj, attr = node.args[0], _string_value(node.args[1])
    if not (aliases.is_module(obj) or aliases.resolve(obj) == ["builtins"]):
        return
    path = aliases.resolve(obj) or []
    if attr is None:
        if path and path[0] in _ROUTE_MODULES:
            yield "getattr"
        return
    target = path + [attr]
    yield _path_kind(target)
    if attr in _ALL_FORBIDDEN_ATTRS:
        yield "getattr-forbidden"
    if name in ("setattr", "delattr") and target[0] == "autograder":
        yield "autograder"


def _embedded_data(cells: list[str], parsed, found: list) -> None:
    """One ``embedded-data`` flag when the notebook's literals and comments hold more data than
    an answer needs (:data:`MAX_LITERAL_CHARS`, :data:`MAX_LITERAL_NUMBERS`), at the line that
    holds the most."""
    chars, numbers, per_line = _data_in(cells, parsed)
    names, prose = _names_and_prose(parsed)
    if chars > MAX_LITERAL_CHARS or numbers > MAX_LITERAL_NUMBERS or names > MAX_NAME_CHARS \
            or prose > MAX_COMMENT_CHARS:
        index, line = max(per_line, key=per_line.__getitem__) if per_line else (parsed[0][0], 1)
        lines = cells[index].splitlines()
        text = lines[line - 1].strip()[:100] if 0 < line <= len(lines) else ""
        found.append(Flag("embedded-data", index + 1, line, text))


def _names_and_prose(parsed) -> tuple[int, int]:
    """(characters of the notebook's distinct identifiers, characters of all its comments): weights can
    ride in names (``w_3fa9c2...``) or in letters-only comment words as well as in literals. An answer
    names a few hundred things and comments in prose; these limits are many times that."""
    names: set[str] = set()
    prose = 0
    for _index, tree, lines in parsed:
        for node in _walk(tree):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name)
        prose += sum(len(line) - line.index("#") for line in lines if "#" in line)
    return sum(len(name) for name in names), prose


def embedded_data(cells: list[str]) -> tuple[int, int]:
    """(characters of data, number literals) the notebook's ``cells`` hold, as the
    ``embedded-data`` flag counts them (what its limits are measured against)."""
    parsed = _parsed_cells(cells)
    chars, numbers, _per_line = _data_in(cells, parsed)
    return chars, numbers


def _data_in(cells: list[str], parsed) -> tuple[int, int, dict]:
    """(characters of data, number literals, characters of data per (cell index, line)) of the
    notebook's literals and comments. A cell that does not parse counts whole (its text is
    still readable by the other cells)."""
    chars = numbers = 0
    per_line: dict[tuple[int, int], int] = {}

    def count(size: int, index: int, line: int) -> None:
        nonlocal chars
        chars += size
        per_line[(index, line)] = per_line.get((index, line), 0) + size

    parsed_cells = {index for index, _tree, _lines in parsed}
    for index, cell in enumerate(cells):
        if index not in parsed_cells:
            count(len(cell), index, 1)
    for index, tree, lines in parsed:
        for line_number, size in _comments("\n".join(lines)):
            count(size, index, line_number)
        for node in _walk(tree):
            data = _literal_data(node)
            if data is not None:
                numbers += not isinstance(getattr(node, "value", None), (str, bytes))
                count(data, index, getattr(node, "lineno", 0))
    return chars, numbers, per_line


def _literal_data(node) -> int | None:
    """The characters of data a literal ``node`` holds (None: not a literal that holds data): a
    string's or bytes' length, an integer's hexadecimal digits (from its bit length: no
    conversion of a huge integer), a float's or complex's repr, 1 for a bool."""
    if not isinstance(node, ast.Constant):
        return None
    value = node.value
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, bool):
        return 1
    if isinstance(value, int):
        return max(1, (abs(value).bit_length() + 3) // 4)
    if isinstance(value, (float, complex)):
        return len(repr(value))
    return None


def _comments(source: str) -> list[tuple[int, int]]:
    """(line, characters of data) of each comment of ``source`` (a cell that parsed) that writes
    numbers (:func:`_comment_data`)."""
    try:
        found = [(token.start[0], _comment_data(token.string))
                 for token in tokenize.generate_tokens(io.StringIO(source).readline) if token.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError, ValueError):
        return [(1, len(source))]
    return [(line, size) for line, size in found if size]


_DATA_WORD = re.compile(r"\d|^[0-9A-Fa-f]{8,}$")
_LONGEST_WORD = 24                 # a longer unbroken run in a comment is not a word of prose (base64, ...)


def _comment_data(comment: str) -> int:
    """The characters of ``comment`` that write numbers: its words (split at white space) that
    hold a digit, are a hexadecimal run of 8 or more, or are longer than any word of prose
    (:data:`_LONGEST_WORD`). Prose counts for nothing however long: a notebook with 24,000
    characters of explanations in comments is not data."""
    return sum(len(word) for word in comment.lstrip("#").split()
               if len(word) > _LONGEST_WORD or _DATA_WORD.search(word))


def suspicious(cells: list[str]) -> list[str]:
    """The flags of :func:`flags` as one line each, for the instructor."""
    return [flag.text() for flag in flags(cells)]


def holds(question, found) -> tuple:
    """The flags among ``found`` (:func:`flags`) that hold ``question``'s score for review: all of
    them, for every question of the submission. A flag is where it is, not where it acts: a
    top-level ``ctypes`` call, a patch of torch or of the checker in any cell, a ``getattr`` by
    a computed name in a helper change what every answer computes or how it is checked, and
    following which cells an answer depends on cannot see through the very constructs that
    are flagged. The flags have no false positives on the course's own code (the tests hold
    every solution and right answer to none), so holding the whole submission costs an honest
    student nothing."""
    return tuple(f.held() if isinstance(f, Flag) else {"flag": str(f), "what": str(f), "line": "", "snippet": ""}
                 for f in found)


def held_reason(held) -> str:
    """``held for review: ctypes, cell 3, line 1; exec, cell 4, line 2`` (grades.csv's reason)."""
    parts = [", ".join(p for p in (h.get("flag", ""), h.get("line", "")) if p) for h in held]
    if len(parts) > 2:                   # the reason is short: the report and the result list them all
        parts = parts[:2] + [f"{len(parts) - 2} more"]
    return "held for review: " + "; ".join(parts) if parts else ""
