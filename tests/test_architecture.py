"""The trust boundary of grading is the package layout: what runs beside student code
(``autograder/student``, ``autograder/questions``: the sandbox bundle) imports nothing from
the grader's side or ``vitref``; and no import cycle anywhere in autograder/ or vitref/, counting
imports inside functions."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.hosts import sandbox

PACKAGE = Path(__file__).resolve().parents[1] / "autograder"
STUDENT_SIDE = ("autograder.student", "autograder.questions")
GRADER_SIDE = ("autograder.judging", "autograder.hosts", "autograder.batch", "autograder.instructor")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path, top_level_only: bool = False) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def modules(prefixes) -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if module_name(p).startswith(prefixes)]


@pytest.mark.parametrize("path", modules(STUDENT_SIDE), ids=module_name)
def test_student_side_imports_nothing_of_the_grader(path):
    bad = [m for m in imports(path)
           if m == "vitref" or m.startswith("vitref.") or m.startswith(GRADER_SIDE)
           or m in ("autograder", "autograder.__main__")]
    assert not bad, f"{module_name(path)} (runs beside student code) imports {bad}"


def test_the_sandbox_bundle_is_the_student_side_folders():
    files = sandbox.bundle_files()
    expected = sorted(str(p.relative_to(PACKAGE)) for p in modules(STUDENT_SIDE))
    assert files == expected
    assert not [f for f in files if f.startswith(("judging", "hosts", "batch", "instructor"))]


@pytest.mark.slow      # seconds of CPU: make test runs it, the fast loop does not
def test_the_bundle_imports_alone(tmp_path):
    """Every bundled module imports in a Python that sees only the bundle (and the libraries):
    nothing student-side depends on a file the sandbox does not hold; the judges are absent."""
    import sysconfig
    bundle = sandbox.make_bundle(tmp_path / "bundle")
    libraries = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    code = (   # -S: no site-packages hooks (the sandbox hides the course's editable-install hooks)
        "import importlib, sys\n"
        f"sys.path[:0] = {[str(bundle), *libraries]!r}\n"
        f"for name in {sandbox.bundle_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "import autograder.questions as q\n"
        "assert len(q.registry()) >= 22\n"
        "for name in ('autograder.judging', 'vitref'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        continue\n"
        "    raise SystemExit(name + ' is importable inside the bundle')\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


TREES = ("autograder", "vitref")


def tree_modules(root: Path = PACKAGE.parent) -> dict[str, Path]:
    """Every module of autograder/ and vitref/ under ``root``: dotted name -> file."""
    found = {}
    for tree in TREES:
        for path in sorted((root / tree).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path = PACKAGE.parent) -> dict[str, dict[str, int]]:
    """module -> {imported module of the trees: line of the first import}, from every import
    statement of the module, at module level and inside functions alike (a function-level
    import that only dodges a circle is still a circle). Relative imports are resolved, and
    ``from package import name`` counts as an import of ``package.name`` where that is a module."""
    files = tree_modules(root)
    graph: dict[str, dict[str, int]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in files else module
                           for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in files:          # "pkg.mod.attr" -> "pkg.mod"
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None when it is a DAG."""
    state: dict[str, int] = {}
    for start in sorted(graph):
        if start in state:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path, state[start] = [start], 1
        while stack:
            node, deps = stack[-1]
            dep = next(deps, None)
            if dep is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            elif dep not in state:
                state[dep] = 1
                path.append(dep)
                stack.append((dep, iter(sorted(graph.get(dep, {})))))
    return None


def describe_cycle(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    steps = "\n".join(f"  {a} -> {b}  (line {graph[a][b]} of {a})" for a, b in zip(cycle, cycle[1:]))
    return (f"import cycle: {' -> '.join(cycle)}\n{steps}\n"
            "Fix: move the piece both modules need into a lower module that imports neither, or pass it "
            "in as an argument; an import inside a function that only dodges the cycle still counts.")


def test_the_import_graph_is_a_dag():
    """autograder/ and vitref/, every import (module level and inside functions): no cycle."""
    graph = import_graph()
    assert len(graph) > 50 and any(graph.values())
    cycle = find_cycle(graph)
    assert cycle is None, describe_cycle(graph, cycle)


def test_the_cycle_check_finds_a_function_level_cycle(tmp_path):
    """The check reads imports inside functions, relative and ``from package import module``."""
    for tree in TREES:
        (tmp_path / tree / "inner").mkdir(parents=True)
        (tmp_path / tree / "__init__.py").write_text("")
        (tmp_path / tree / "inner" / "__init__.py").write_text("")
    (tmp_path / "autograder" / "a.py").write_text("from .inner import b\n")
    (tmp_path / "autograder" / "inner" / "b.py").write_text("def f():\n    from .. import a\n    return a\n")
    graph = import_graph(tmp_path)
    assert graph["autograder.a"] == {"autograder.inner.b": 1}
    assert graph["autograder.inner.b"] == {"autograder.a": 2}
    cycle = find_cycle(graph)
    assert cycle in (["autograder.a", "autograder.inner.b", "autograder.a"],
                     ["autograder.inner.b", "autograder.a", "autograder.inner.b"])
    message = describe_cycle(graph, cycle)
    assert "autograder.a -> autograder.inner.b" in message and "lower module" in message
    (tmp_path / "autograder" / "inner" / "b.py").write_text("import numpy\n")
    assert find_cycle(import_graph(tmp_path)) is None


def test_the_questions_import_nothing_of_the_student_side():
    """``autograder.student`` builds on ``autograder.questions`` (the recipes, their inputs and
    :class:`autograder.questions.errors.CaseFailure`), never the other way round."""
    graph = import_graph()
    back = {(a, b) for a, deps in graph.items() if a.startswith("autograder.questions")
            for b in deps if b.startswith("autograder.student")}
    assert not back, back
