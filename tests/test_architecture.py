"""The trust boundary of grading is the package layout: what runs beside student code
(``autograder/student``, ``autograder/questions``: the sandbox bundle) imports nothing from
the grader's side or ``vitref``; and no module-level import cycles anywhere in autograder."""
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


def test_no_module_level_import_cycles():
    graph = {module_name(p): {m for m in imports(p, top_level_only=True) if m.startswith("autograder")}
             for p in PACKAGE.rglob("*.py")}
    names = set(graph)
    # "from .x import y" names a module "pkg.x.y" that may be an attribute: keep real modules
    graph = {m: {d if d in names else d.rpartition(".")[0] for d in deps} & names - {m}
             for m, deps in graph.items()}
    # a package's __init__ importing its own submodules is not a cycle of concern
    for m in graph:
        graph[m] = {d for d in graph[m] if not (d.startswith(m + ".") and m + ".__init__" not in names)}
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for dep in graph.get(node, ()):
            if dep.startswith(node + "."):
                continue                         # a package importing its submodules
            if state.get(dep) == 1 and not node.startswith(dep + "."):
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, cycles
