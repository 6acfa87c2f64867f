"""What the student's process may no longer do once its first cell runs, enforced in the process.

The grade is decided outside this process from values (CONTRIBUTING.md, "The wire format"), but what
the probe reports about a module (its parameters, which of them are trainable, the kind of layer that
holds each) is read here, by code that shares the interpreter with the student's. So before the first
cell runs, :func:`lockdown`:

* installs an **audit hook** (:pep:`578`; nothing can remove one) that refuses, with a
  ``PermissionError`` that says why:

  - starting another program (``subprocess``, ``os.system``, ``os.exec*``, ``posix_spawn``, ``pty``):
    always. The grading sandbox also makes ``execve`` fail in the kernel (seccomp, see
    :mod:`autograder.student.zygote`); this hook gives the reason in words;
  - from the student's code (code not loaded from the Python runtime, the virtual environment or the
    grader's bundle): ``ctypes``, the garbage collector's object lists (``gc.get_objects``,
    ``get_referrers``, ``get_referents``; ``gc.collect`` stays), frames (``sys._getframe``,
    ``inspect.currentframe``/``stack``, ``traceback.walk_stack``/``walk_tb``, ``tb_frame``,
    ``gi_frame``, ``cr_frame``, ``ag_frame``, ``sys._current_frames``), tracing and profiling
    hooks, new code objects (``CodeType``, ``code.replace``), ``marshal``, ``compile`` under a
    library's file name, rewriting a library function's ``__code__``/``__defaults__``, moving into
    ``/proc``, installing a signal handler (a handler is called with the frame running when the
    signal comes: the grader's), signing a result (:func:`sign`), and importing CPython's test
    modules or a second copy of ``gc``, ``signal``, ``ctypes``, ``marshal``. (A process's memory,
    ``/proc/self/mem``, is closed by the kernel: the sandbox makes the process not dumpable);
* removes the grader's modules from ``sys.modules`` (:func:`hide`), so no name, alias or import
  reaches the probe;
* makes the grader's classes immutable (``ProbeCase.build = ...`` is a ``TypeError``) and, on CPython
  3.11, takes them out of their bases' lists of subclasses (``object.__subclasses__()`` does not list them).

:func:`seal` snapshots what the probes rely on (the grader's module and class namespaces, the
closures of their functions, ``builtins``, the torch and numpy classes and modules the probe calls);
the payload checks it when a probe's process starts and before it sends the probe's result, and a
change there fails the question ("the notebook changed ..."): a route this module does not know of
still has to change something the seal sees.

What stays possible is said in book/for_instructors.md ("What the sandbox enforces"). This module defines no class:
a class is reachable through ``object.__subclasses__()``, and its methods' ``__globals__`` would lead to
the hook's state.
"""
from __future__ import annotations

import os
import sys
from typing import Callable

REFUSED = "is not allowed while your notebook is graded"
PROGRAM_EVENTS = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "pty.spawn",
                  "os.startfile", "os.forkpty")
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
GC_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
FUNCTION_DUNDERS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
NO_IMPORT = frozenset({"_testcapi", "_testinternalcapi", "_testbuffer", "_testmultiphase", "_testsinglephase",
                       "_testclinic", "_testimportmultiple", "_xxsubinterpreters", "_xxinterpchannels",
                       "_xxtestfuzz", "gc", "_signal", "signal", "ctypes", "_ctypes", "marshal", "_imp", "sys",
                       "builtins", "_thread", "_hashlib"})
SIGNAL_EVENT = "autograder.guard.signal"
SIGN_EVENT = "autograder.guard.sign"
VAULT_EVENTS = (SIGNAL_EVENT, SIGN_EVENT)
WATCHED_EVENTS = frozenset({*GC_EVENTS, *VAULT_EVENTS, "sys._getframe", "sys._current_frames", "sys.settrace",
                            "sys.setprofile", "code.__new__", "compile", "marshal.loads", "marshal.load", "import",
                            "os.chdir", "object.__getattr__", "object.__setattr__"})
WATCHED_PREFIXES = PROGRAM_EVENTS + ("ctypes.",)


def trusted_dirs(extra=()) -> tuple[str, ...]:
    """Folders whose files are library code (not the student's): the Python runtime, the virtual
    environment and ``extra`` (the grader's bundle)."""
    import sysconfig

    dirs = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, *extra) if p}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(os.path.realpath(path))
    return tuple(sorted(d.rstrip(os.sep) + os.sep for d in dirs))


def lockdown(trusted: tuple[str, ...], key: bytes = b"") -> None:
    """Install the audit hook, the signal vault and the signing vault (see the module docstring),
    then make the grader's classes immutable. Once per process (a fork inherits it). ``key``: the
    run's secret for :func:`sign` (only the hook keeps it)."""
    import _signal
    import gc
    import marshal  # noqa: F401 - loaded now, so that importing it later is a second copy (refused)
    import signal as signal_module

    root = sys._getframe(2)        # the payload's frame (lockdown <- payload._lock <- payload)
    sys.addaudithook(_audit_hook(trusted, bytes(key), root))
    _vault_signal(signal_module, _signal)
    gc.set_debug = _refuser("gc.set_debug (DEBUG_SAVEALL keeps every collected object)")
    if not _still_prepared():       # else prepare() froze them, and no module or class was added since
        _PREPARED.clear()
        _freeze_classes()
    _disarm_ctypes()


# The hook is built by the factories below, each returning closures over what it captured when
# lockdown ran. Inside the hook only those closures and C functions and methods of built-in types
# run: a Python function the student could have replaced would run with the hook's frame below it,
# and a builtin the student rebinds (``builtins.str = ...``) is not the one captured here.

def _refusal():
    """The function that raises the hook's PermissionError, with the reason."""
    denied, suffix = PermissionError, " " + REFUSED + " (the grading sandbox refuses it)"

    def refuse(what: str):
        raise denied(what + suffix)
    return refuse


def _frame_tests(trusted: tuple[str, ...], root):
    """Who is asking: ``(is_student, caller, student_direct, student_on_stack, compiled_from_library)``,
    closures that read frames from ``sys._getframe`` up to ``root`` (the payload's frame)."""
    import signal as signal_module

    getframe, str_type, exact_type, any_of = sys._getframe, str, type, any
    skipped = (os.path.abspath(__file__), os.path.abspath(signal_module.__file__))
    traversals, kept = ("/../", "/./"), ("<cell", "<frozen ")

    def is_student(filename) -> bool:
        if exact_type(filename) is not str_type:
            return True
        if filename.startswith("<frozen "):
            return False
        return not filename.startswith(trusted) or any_of([t in filename for t in traversals])

    def generated(frame) -> bool:
        """Code a library generated with exec under a name like "<string>" (the student's cells are
        "<cell N>"): the frame below it decides."""
        name = frame.f_code.co_filename
        return name.startswith("<") and not name.startswith(kept)

    def caller(depth: int):
        """The frame of the code that raised the event, skipping this module, signal.py and generated code."""
        frame = getframe(depth)
        while frame is not None and (frame.f_code.co_filename in skipped or generated(frame)):
            frame = frame.f_back
        return frame

    def hands_out_frames(frame) -> bool:      # library functions that give frames to whoever calls them
        code, name = frame.f_code, frame.f_code.co_filename
        return name.endswith("/inspect.py") or (name.endswith("/traceback.py")
                                                and code.co_name in ("walk_stack", "walk_tb"))

    def student_direct(frame) -> bool:
        """Whether the code asking is the student's (for inspect.currentframe & co., whoever called them)."""
        while frame is not None and hands_out_frames(frame):
            frame = frame.f_back
            while frame is not None and generated(frame):
                frame = frame.f_back
        return frame is None or is_student(frame.f_code.co_filename)

    def student_on_stack(frame) -> bool:
        """Whether a frame of the student's code is between the event and the payload, or no payload is
        below at all (a thread the notebook started)."""
        while frame is not None and frame is not root:
            if is_student(frame.f_code.co_filename):
                return True
            frame = frame.f_back
        return frame is None

    def compiled_from_library(frame) -> bool:
        """marshal.loads called by importlib for a .pyc of the runtime or the environment."""
        if frame is None or frame.f_code.co_name != "_compile_bytecode":
            return False
        names = frame.f_locals
        return not is_student(names.get("bytecode_path") or names.get("source_path"))

    return is_student, caller, student_direct, student_on_stack, compiled_from_library


def _vault_handlers(tests, secret: bytes, refuse) -> dict:
    """The hook's answers to the two vault events: installing a signal handler, signing a result."""
    import _hashlib
    import _signal
    import _thread

    _, _, student_direct, student_on_stack, _ = tests
    getframe, main_thread, sign_code = sys._getframe, _thread.get_ident(), sign.__code__
    set_handler = _signal.signal        # the original: only the hook holds it from now on
    hmac_digest, bytes_type, list_type, int_type = _hashlib.hmac_digest, bytes, list, int
    exact_type, is_instance = type, isinstance

    def on_signal(event, frame, args, ident):
        if student_direct(frame):
            refuse("installing a signal handler")
        handler = args[1]
        set_handler(args[0], int_type(handler) if is_instance(handler, int_type) else handler)

    def on_sign(event, frame, args, ident):
        # only for the probe's own result: asked by guard.sign, on the payload's thread, with the
        # payload's frame below and no frame of the student's code in between
        asker = getframe(2)        # (0 is this function, 1 the hook; 2 called sys.audit)
        if ident != main_thread or asker.f_code is not sign_code or student_on_stack(frame) \
                or exact_type(args[0]) is not bytes_type or exact_type(args[1]) is not list_type:
            refuse("signing a result")
        args[1].append(hmac_digest(secret, args[0], "sha256").hex())

    return {SIGNAL_EVENT: on_signal, SIGN_EVENT: on_sign}


def _reach_handlers(tests, refuse) -> tuple[dict, Callable]:
    """The hook's answers to the events that reach frames, objects, code or other programs' files, and
    the answer to every ``ctypes.*`` event."""
    import types

    is_student, _, student_direct, student_on_stack, compiled_from_library = tests
    str_type, bytes_type, function_type, exact_type, length = str, bytes, types.FunctionType, type, len

    def on_memory(event, frame, args, ident):          # ctypes.*, gc's object lists, sys._current_frames
        if student_on_stack(frame):
            refuse(event)

    def on_frames(event, frame, args, ident):
        if student_direct(frame):
            refuse(("reading " + args[1] if event == "object.__getattr__" else event)
                   + " (a way to the checker's frames)")

    def on_code(event, frame, args, ident):
        if student_direct(frame):
            refuse("making a code object")

    def on_compile(event, frame, args, ident):
        name = args[1] if length(args) > 1 else None
        if exact_type(name) is bytes_type:
            name = name.decode("utf-8", "replace")
        if exact_type(name) is str_type and not is_student(name) and student_direct(frame):
            refuse("compiling code under a library's file name")

    def on_marshal(event, frame, args, ident):
        if not compiled_from_library(frame) and student_direct(frame):
            refuse("marshal")

    def on_chdir(event, frame, args, ident):
        path = args[0]
        if exact_type(path) is bytes_type:
            path = path.decode("utf-8", "replace")
        if exact_type(path) is not str_type or path.startswith("/proc") or path.startswith("/sys"):
            refuse("changing the working folder there")

    def on_import(event, frame, args, ident):
        if args[0] in NO_IMPORT:
            refuse("importing " + str_type(args[0]) + " again")

    def on_setattr(event, frame, args, ident):
        function = args[0]
        if exact_type(function) is function_type and not is_student(function.__code__.co_filename):
            refuse("changing " + args[1] + " of a library function")

    return {**dict.fromkeys((*GC_EVENTS, "sys._current_frames"), on_memory),
            **dict.fromkeys(("sys._getframe", "object.__getattr__", "sys.settrace", "sys.setprofile"), on_frames),
            "code.__new__": on_code, "compile": on_compile, "marshal.loads": on_marshal,
            "marshal.load": on_marshal, "os.chdir": on_chdir, "import": on_import,
            "object.__setattr__": on_setattr}, on_memory


def _audit_hook(trusted: tuple[str, ...], secret: bytes, root):
    """The audit hook (see the module docstring): a first test that settles nearly every event, then
    the answer of :func:`_vault_handlers` or :func:`_reach_handlers` for the event."""
    import _thread

    refuse = _refusal()
    tests = _frame_tests(trusted, root)
    caller = tests[1]
    handlers, on_ctypes = _reach_handlers(tests, refuse)
    handlers.update(_vault_handlers(tests, secret, refuse))
    get_ident, busy = _thread.get_ident, set()

    def hook(event, args) -> None:
        # the first test settles nearly every event (builtins.id, exec, open...): the hook runs for all
        if event not in WATCHED_EVENTS and not event.startswith(WATCHED_PREFIXES):
            return
        ident = get_ident()
        if ident in busy:
            return
        if event.startswith(PROGRAM_EVENTS):
            refuse("starting another program (" + event + ")")
        if (event == "object.__getattr__" and args[1] not in FRAME_ATTRIBUTES) \
                or (event == "object.__setattr__" and args[1] not in FUNCTION_DUNDERS):
            return
        busy.add(ident)
        try:
            answer = on_ctypes if event.startswith("ctypes.") else handlers.get(event)
            if answer is not None:
                answer(event, caller(2), args, ident)
        finally:
            busy.discard(ident)

    return hook


def sign(data: bytes) -> str:
    """The run's MAC of ``data`` (hex), computed by the audit hook with the key only it holds; refused
    (PermissionError) when any frame of the student's code is on the stack: the student's code can
    neither sign a frame of its own nor have the probe sign one."""
    out: list = []
    sys.audit(SIGN_EVENT, bytes(data), out)
    if not out:
        raise PermissionError("no signing key in this process (lockdown was not called)")
    return out[0]


def _refuser(what: str):
    namespace = {"__builtins__": {}, "PermissionError": PermissionError, "what": what}
    source = "def refused(*args, **kwargs):\n    raise PermissionError(what + ' " + REFUSED + "')\n"
    exec(compile(source, __file__, "exec"), namespace)  # noqa: S102 - globals: only its message
    return namespace["refused"]


def _vault_signal(signal_module, raw) -> None:
    """``signal.signal`` and ``_signal.signal`` become a function that asks the audit hook to install
    the handler: the hook installs it for library code (a DataLoader's SIGCHLD handler, the cell
    runner's alarm) and refuses the student's. The function itself holds no reference to the
    original, so there is nothing to take from it."""
    namespace = {"__builtins__": {}, "audit": sys.audit, "getsignal": raw.getsignal, "event": SIGNAL_EVENT,
                 "int": int}
    source = ("def signal(signalnum, handler):\n"
              "    previous = getsignal(int(signalnum))\n"
              "    audit(event, int(signalnum), handler)\n"
              "    return previous\n")
    # compiled under this file's name, so the hook knows the caller of signal.signal is the one that counts
    exec(compile(source, __file__, "exec"), namespace)  # noqa: S102 - globals: only these names
    vaulted = namespace["signal"]
    vaulted.__module__ = "signal"
    raw.signal = vaulted
    signal_module.signal = vaulted


def hide() -> None:
    """Take the grader's modules out of ``sys.modules`` and off the ``autograder`` package (the
    stub the notebook imports stays): no name, alias or import statement reaches them. Nothing of
    the grader may import lazily after this (the import blocker refuses ``autograder.*``: the
    sandbox tests would fail)."""
    package = sys.modules.get("autograder")
    for name in [n for n in sys.modules if n.startswith("autograder.")]:
        del sys.modules[name]
    if package is not None:
        for attr in ("student", "questions"):
            package.__dict__.pop(attr, None)


# ctypes' functions that read or write memory at an address, and the addresses they are made from:
# calling a foreign function raises no audit event, so they are taken away (numpy.ctypeslib.ctypes is the
# same module). Creating a pointer from an address (from_address, from_buffer) and loading a library
# stay refused by the hook; what the grader itself needs of ctypes it took when its modules loaded.
_CTYPES_RAW = ("memmove", "memset", "string_at", "wstring_at", "cast", "_cast", "_string_at", "_wstring_at",
               "pythonapi", "pydll", "cdll", "CDLL", "PyDLL", "LibraryLoader")
_CTYPES_ADDRESSES = ("_memmove_addr", "_memset_addr", "_string_at_addr", "_wstring_at_addr", "_cast_addr")


def _disarm_ctypes() -> None:
    import _ctypes
    import ctypes

    refused = _refuser("ctypes")
    for module in (ctypes, _ctypes):
        space = vars(module)
        for name in _CTYPES_RAW:
            if name in space:
                setattr(module, name, refused)
        for name in _CTYPES_ADDRESSES:
            space.pop(name, None)


def _type_flags_offset():
    """The byte offset of ``tp_flags`` in a type object (found, not assumed), or None."""
    import ctypes

    class Probe:
        pass

    flags = Probe.__flags__
    for offset in range(8, 512, ctypes.sizeof(ctypes.c_ulong)):
        if ctypes.c_ulong.from_address(id(Probe) + offset).value == flags:
            return offset
    return None


IMMUTABLE_TYPE = 1 << 8     # Py_TPFLAGS_IMMUTABLETYPE (CPython 3.10+): setattr on the class raises TypeError


def _freeze_classes() -> None:
    """Mark every class of the grader's bundle immutable (CPython 3.10+ only; elsewhere the seal's
    check is what remains)."""
    if sys.implementation.name != "cpython" or sys.version_info < (3, 10):
        return
    import ctypes

    offset = _type_flags_offset()
    if offset is None:
        return
    for cls in grader_classes():
        slot = ctypes.c_ulong.from_address(id(cls) + offset)
        slot.value |= IMMUTABLE_TYPE
    _unlist(grader_classes())


def _subclass_registry_offset():
    """CPython 3.11 only: the byte offset of ``tp_subclasses`` in a type object, found from
    ``tp_base`` and checked against ``tp_bases`` and ``tp_mro`` (which follow it at known
    distances); None elsewhere or when a check fails."""
    import ctypes

    if sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11):
        return None
    pointer = ctypes.sizeof(ctypes.c_void_p)

    class Base:
        pass

    class Child(Base):
        pass

    def slot(cls, offset):
        return ctypes.c_void_p.from_address(id(cls) + offset).value

    base = next((o for o in range(0, 640, pointer) if slot(Child, o) == id(Base)), None)
    if base is None or slot(Child, base + 10 * pointer) != id(Child.__bases__) \
            or slot(Child, base + 11 * pointer) != id(Child.__mro__):
        return None
    registry = ctypes.cast(slot(Base, base + 13 * pointer), ctypes.py_object).value
    if not isinstance(registry, dict) or registry.get(id(Child)) is None or registry[id(Child)]() is not Child:
        return None
    return base + 13 * pointer


def _unlist(classes) -> None:
    """Take the grader's classes out of their bases' lists of subclasses, so that
    ``object.__subclasses__()`` (and any base's) no longer leads to them, nor through their methods'
    ``__globals__`` to the grader's modules. The classes stay alive (the modules hold them); their
    bases are built-in or the grader's own immutable classes, so no change of a base has to reach
    them. Where the layout is not CPython 3.11's, nothing is done and the seal is what remains."""
    import ctypes

    offset = _subclass_registry_offset()
    if offset is None:
        return
    for cls in classes:
        for base in cls.__bases__:
            address = ctypes.c_void_p.from_address(id(base) + offset).value
            if address:
                registry = ctypes.cast(address, ctypes.py_object).value
                if isinstance(registry, dict):
                    registry.pop(id(cls), None)


def grader_modules() -> list:
    return [m for n, m in list(sys.modules.items()) if (n == "autograder" or n.startswith("autograder.")) and m]


def grader_classes() -> list:
    """The classes of the grader's modules, and of the sandbox's runner (``__main__`` when it is the
    bundle's zygote)."""
    out = []
    modules = grader_modules()
    main = sys.modules.get("__main__")
    if main is not None and str(getattr(main, "__file__", "")).startswith(_BUNDLE):
        modules.append(main)
    for module in modules:
        for value in list(vars(module).values()):
            if isinstance(value, type) and getattr(value, "__module__", "") == module.__name__:
                out.append(value)
    return out


# What shapes the facts the probe reports (the modules it reads parameters with, what encodes the result
# before it is signed). Not the clocks, os, signal or select: changing those can only cost the notebook time
# or its results (the host keeps the time; a frame changed after signing fails its MAC).
SEALED_MODULES = ("builtins", "torch.autograd", "torch.autograd.grad_mode", "torch.nn",
                  "torch.nn.modules.module", "torch.nn.parameter", "torch._tensor",
                  "numpy", "json", "json.encoder", "zipfile", "io", "struct", "numpy.lib.npyio", "numpy.lib.format")
SEALED_CLASSES = (("torch", "Tensor"), ("torch.nn", "Module"), ("torch.nn", "Parameter"), ("torch.nn", "Linear"),
                  ("torch.nn.modules.conv", "_ConvNd"), ("torch.autograd.grad_mode", "no_grad"),
                  ("torch.autograd.grad_mode", "enable_grad"), ("json", "JSONEncoder"), ("zipfile", "ZipFile"))


def seal():
    """A function that lists what changed (``["probe.ProbeCase.build", ...]``, empty when nothing
    did) since this call, among what the probes rely on: the grader's modules and classes (their
    namespaces, their functions' closures and defaults), ``builtins`` and the modules and classes
    of :data:`SEALED_MODULES`/:data:`SEALED_CLASSES`. Call it before :func:`hide`. Only what was
    there is compared: what a library adds later (a lazily imported name) is not a change.
    Where :func:`prepare` ran in this process's parent and nothing changed since, its snapshot is
    the one taken."""
    expected, cells, tags = _prepared_snapshot() or _snapshot()
    return _verifier(expected, cells, _filled, tags)


_PREPARED: dict = {}        # what prepare() made, inherited by every process forked afterwards


def prepare() -> None:
    """Once, in the warm process the student processes are forked from (the sandbox's zygote), before
    any student's code exists there: make the grader's classes immutable and take :func:`seal`'s
    snapshot, so that each student process inherits both instead of making them again. (A fresh fork
    that walks the thousands of objects of the snapshot copies every page that holds one, for their
    reference counts: about 10 ms a run, and again in each probe's fork.)"""
    _freeze_classes()
    _PREPARED.update(snapshot=_snapshot(), modules=_version_tags([sys.modules]))


def _unchanged(tags) -> bool:
    return tags is not None and [_read_tag(reader) for reader in tags[0]] == tags[1]


def _still_prepared() -> bool:
    """Whether :func:`prepare` ran in this process (or its parent) and neither ``sys.modules`` nor a
    namespace of its snapshot changed since (by the dicts' version tags)."""
    return "snapshot" in _PREPARED and _unchanged(_PREPARED["modules"]) and _unchanged(_PREPARED["snapshot"][2])


def _prepared_snapshot():
    """:func:`prepare`'s snapshot where it still holds (:func:`lockdown` kept it and no namespace it
    watches changed since), else None."""
    snapshot = _PREPARED.get("snapshot")
    return snapshot if snapshot is not None and _unchanged(snapshot[2]) else None


def _snapshot():
    """(namespaces with their entries, closures with their contents, version tags) of what :func:`seal`
    watches."""
    namespaces = []
    # (the package ``autograder`` itself is left out: hide() takes its submodules off it, and it holds
    # only the test cells' no-op check/grade)
    ours = [m for m in grader_modules() if m.__name__ != "autograder"]
    for module in ours + [sys.modules.get(n) for n in SEALED_MODULES]:
        if module is not None:
            namespaces.append((module.__name__, vars(module)))
    classes = grader_classes()
    for module_name, name in SEALED_CLASSES:
        owner = sys.modules.get(module_name)
        cls = getattr(owner, name, None) if owner is not None else None
        if isinstance(cls, type):
            classes.append(cls)
    for cls in classes:
        namespaces.append((f"{cls.__module__}.{cls.__qualname__}", cls.__dict__))
    import types

    functions = []
    for _, space in namespaces:
        for value in list(space.values()):
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, types.FunctionType) and value.__code__.co_filename.startswith(_BUNDLE):
                functions.append(value)
    # the objects themselves, compared by identity (id() is an audited call: thousands of them per check
    # would each run the audit hook)
    expected = [(label, space, list(space.items())) for label, space in namespaces]
    # (a function without a closure cannot get one: a new __code__ must have as many free variables)
    cells = [(f, [c.cell_contents for c in f.__closure__ if _filled(c)]) for f in functions if f.__closure__]
    return expected, cells, _version_tags([space for _, space in namespaces])


# CPython 3.11 keeps in every dict a version tag (PEP 509) that changes whenever the dict does. Reading
# it touches only the dict's own header, not the objects in the dict, so a fresh fork reads it without
# copying the pages of those objects; elsewhere (None) every check compares the entries.
_DICT_TAG_OFFSET = 24       # PyDictObject: ob_refcnt, ob_type, ma_used, ma_version_tag


def _version_tags(spaces):
    """(readers, tags): a ctypes view of each namespace's version tag and its value now; None where the
    layout is not CPython 3.11's (checked on a dict of our own, not assumed)."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11):
        return None
    import ctypes
    import gc

    def reader(mapping):
        return ctypes.c_uint64.from_address(id(mapping) + _DICT_TAG_OFFSET)

    trial: dict = {}
    before = _read_tag(reader(trial))
    trial["changed"] = True
    if _read_tag(reader(trial)) == before or ctypes.c_ssize_t.from_address(id(trial) + 16).value != 1:
        return None
    dicts = []
    for space in spaces:
        if type(space) is not dict:     # a class's mappingproxy: the dict behind it
            inner = gc.get_referents(space)
            if len(inner) != 1 or not isinstance(inner[0], dict):   # (a ctypes class: a dict subclass)
                return None
            space = inner[0]
        dicts.append(space)
    readers = [reader(d) for d in dicts]
    return readers, [_read_tag(r) for r in readers]


def _tag_getter():
    import ctypes

    # the C type's own descriptor: a ``value`` the student's code puts on ctypes.c_uint64 is not read
    return vars(ctypes.c_uint64.__mro__[1])["value"].__get__


_read_tag = _tag_getter()


_BUNDLE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _verifier(expected, cells, filled, tags=None):
    missing = object()
    as_list, length, pairs = list, len, zip      # not looked up in builtins, which the student may change
    readers, before = tags if tags is not None else ((), None)
    read, mapped = _read_tag, map

    def changed() -> list:
        found = as_list()
        # a namespace whose version tag is as it was has not changed: its entries need no comparison
        if before is None or as_list(mapped(read, readers)) != before:
            for label, space, entries in expected:
                get = space.get
                for key, value in entries:
                    if get(key, missing) is not value:
                        found.append(label + "." + key)
        for function, values in cells:
            now = [c.cell_contents for c in (function.__closure__ or ()) if filled(c)]
            if length(now) != length(values) or any_differs(now, values):
                found.append(function.__module__ + "." + function.__qualname__ + " (its closure)")
        return found

    def any_differs(now, values) -> bool:
        for a, b in pairs(now, values):
            if a is not b:
                return True
        return False

    return changed
