"""The probe: runs a student's answer on the given inputs, in the student's process.

It returns plain data only (dicts, lists, numpy arrays, numbers, strings), so the result
can cross a process boundary as raw arrays + JSON (:mod:`autograder.student.wire`) and be
judged elsewhere. It holds no reference code and no secret: the inputs come from the source in force
(:mod:`autograder.questions.inputs`; in the grading sandbox, the arrays the grader sent).
Nothing it reports is trusted for a score except the numbers, which the grader recomputes:
outputs, input gradients and parameter gradients are arrays, and every property (float64
kept, parameters trained, biases present) is decided by the grader from those arrays
(CONTRIBUTING.md, "The wire format: each field and who decides it").

Output values are accepted only when their type is exactly ``torch.Tensor``,
``numpy.ndarray`` or a plain number; a subclass (whose ``__eq__`` or ``allclose`` might lie)
is rejected before any of its methods is called.
"""
from __future__ import annotations

import os
import sys
import traceback

import numpy as np

from ..questions import inputs
from ..questions.errors import CaseFailure
from .ban import ForbiddenCall

AUTOGRADER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _library():
    """torch's own methods, taken when this module loads (before any cell of the notebook runs): the
    probe calls these, never a method the student's class (or a cell) may have overridden or replaced
    (``named_parameters`` listing another tensor, ``get_submodule`` hiding an ``nn.Linear``, ``train``
    unfreezing a parameter when the probe sets eval mode)."""
    try:
        import torch
        from torch import nn
    except ImportError:             # a grading install without torch: nothing to probe with
        return None
    return {"named_parameters": nn.Module.named_parameters, "get_submodule": nn.Module.get_submodule,
            "train": nn.Module.train, "double": nn.Module.double, "Linear": nn.Linear,
            "ConvNd": nn.modules.conv._ConvNd, "Module": nn.Module,
            "requires_grad": torch._C.TensorBase.__dict__["requires_grad"].__get__,
            "grad": torch.autograd.grad}


_TORCH = _library()

MAX_MESSAGE = 400


class BadOutput(Exception):
    """The answer returned something the checker will not read (wrong type, subclass...)."""


# --------------------------------------------------------------------------- conversions

_NUMBER_TYPES = (bool, int, float, np.bool_, np.integer, np.floating)


def to_array(value, name: str) -> np.ndarray:
    """A copy of ``value`` as a numpy array, refusing anything but real tensors/arrays/numbers."""
    import torch

    kind = type(value)
    if kind is torch.Tensor:
        with torch.no_grad():
            tensor = torch.Tensor.detach(value)
            if tensor.is_complex():
                raise BadOutput(f"{name} is a complex tensor; expected real numbers")
            if tensor.device.type != "cpu":
                tensor = tensor.cpu()
            if tensor.dtype == torch.bool:
                return np.array(tensor.numpy(), dtype=bool, copy=True)
            if not tensor.dtype.is_floating_point:
                return np.array(tensor.numpy(), dtype=np.int64, copy=True)
            return np.array(tensor.to(torch.float64).numpy(), dtype=np.float64, copy=True)
    if kind is np.ndarray:
        if value.dtype.kind == "b":
            return np.array(value, dtype=bool, copy=True)
        if value.dtype.kind in "iu":
            return np.array(value, dtype=np.int64, copy=True)
        if value.dtype.kind == "f":
            return np.array(value, dtype=np.float64, copy=True)
        raise BadOutput(f"{name} is a numpy array of dtype {value.dtype}; expected numbers")
    if kind in (bool, int, float) or (kind.__module__ == "numpy" and issubclass(kind, _NUMBER_TYPES)):
        return np.array(float(value), dtype=np.float64)
    if isinstance(value, torch.Tensor):
        raise BadOutput(f"{name} is a {kind.__name__}, a subclass of torch.Tensor; return a plain torch.Tensor "
                        f"(the checker does not trust subclasses, whose comparisons may be overridden)")
    if isinstance(value, np.ndarray):
        raise BadOutput(f"{name} is a {kind.__name__}, a subclass of numpy.ndarray; return a plain array "
                        f"(the checker does not trust subclasses, whose comparisons may be overridden)")
    if value is None:
        raise BadOutput(f"{name} is None: did you forget a return statement?")
    if kind in (tuple, list):
        raise BadOutput(f"{name} is a {kind.__name__} of {len(value)} items; expected a single tensor")
    raise BadOutput(f"{name} is a {kind.__module__}.{kind.__qualname__}; expected a torch.Tensor or numpy array")


def shape_of(value) -> str:
    import torch
    if type(value) in (torch.Tensor, np.ndarray):
        return "(" + ", ".join(str(int(s)) for s in value.shape) + ")"
    return type(value).__name__


FLOAT64_NUDGE = 1 + 3 * 2.0 ** -27


def float64_input(array) -> np.ndarray:
    """A float64 case's input (``rec.tensor(..., dtype="float64")``), on both sides: the drawn
    values (float32 numbers) times ``1 + 3 * 2**-27``, exactly (a product of 24 and 28
    significant bits fits float64's 53). The inputs then hold digits float32 cannot: an
    answer that goes through float32 anywhere loses them (~1e-8 relative), which the judge
    sees in the values (a float32 round trip of float32 numbers would be exact)."""
    return np.asarray(array, dtype=np.float64) * FLOAT64_NUDGE


# --------------------------------------------------------------------------- exceptions


def _library_dirs():
    dirs = [AUTOGRADER_DIR, os.path.dirname(os.__file__) + os.sep]
    for module_name in ("torch", "numpy", "einops"):
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, "__file__", None):
            dirs.append(os.path.dirname(os.path.dirname(os.path.abspath(module.__file__))) + os.sep)
    return tuple(dirs)


def describe_exception(error: BaseException) -> dict:
    """``{"type", "message", "where"}``; ``where`` is the innermost line of the student's code."""
    message = str(error).strip().replace("\n", " ")
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + "..."
    where = ""
    library = _library_dirs()
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        filename = os.path.abspath(frame.filename) if not frame.filename.startswith("<") else frame.filename
        if filename.startswith(library) or filename.startswith("<frozen"):
            continue
        line = (frame.line or "").strip()
        where = f"line {frame.lineno} in {frame.name}" + (f": {line[:120]}" if line else "")
        break
    return {"type": type(error).__name__, "message": message, "where": where}


# --------------------------------------------------------------------------- the recorder


class ProbeCase:
    """What ``run_case`` talks to in the student's process (one per case)."""

    mode = "probe"

    def __init__(self, recorder: "ProbeRecorder", case, index: int):
        self.recorder, self.case, self.index = recorder, case, index
        self.outputs: dict = {}
        self.modules: list = []
        self.notes: dict = {}       # descriptive facts a judge may use only to refuse (see note())
        self.built: list = []            # the modules of self.modules, in order (for parameter gradients)
        self.built_params: list = []     # per module: (index, name, tensor, trainable) as built
        self.error = None

    # inputs -------------------------------------------------------------
    def tensor(self, array: np.ndarray, dtype: str | None = None, requires_grad: bool = False):
        """The torch tensor the answer receives: float32 for float data, or float64 when
        ``dtype="float64"`` (:func:`float64_input`: the answer must then keep float64); ``requires_grad`` for the
        gradient checks."""
        import torch
        tensor = torch.from_numpy(np.array(array, copy=True))
        if dtype == "float64" and tensor.is_floating_point():
            tensor = torch.from_numpy(float64_input(array))
        if requires_grad:
            tensor.requires_grad_(True)
        return tensor

    def seed(self, value: int) -> None:
        """Seed torch's generator (dropout masks) the same way on both sides."""
        import torch
        torch.manual_seed(int(value))

    def grads(self, out, upstream, inputs: dict, module=None, params: bool = False):
        """Backpropagate ``sum(out * upstream)``: record the gradient of each tensor of
        ``inputs`` as output ``grad_<name>``, and, with ``params``, the gradient of every
        parameter of the modules built in this case that requires one and is reached, as an
        array in its module's record (``modules[i]["grads"][str(parameter index)]``). A frozen
        or detached parameter sends nothing; the grader compares the arrays with the
        reference's gradients (``module`` is accepted for the recipes' sake)."""
        import torch
        if type(out) is not torch.Tensor:
            raise BadOutput(f"the output is a {type(out).__name__}; the gradient check needs a torch.Tensor")
        if not out.requires_grad:
            raise CaseFailure("the output does not depend differentiably on the input: no gradient flows back "
                              "from it")
        named = []
        if params:
            lib = _TORCH
            for m, built in enumerate(self.built):
                now = [param for _, param in lib["named_parameters"](built)]
                for i, name, param, trainable in self.built_params[m]:
                    if i >= len(now) or now[i] is not param:
                        raise CaseFailure(f"the parameter {name} was replaced after the module was built: "
                                          f"training would update a parameter the next call no longer uses")
                    if trainable:       # as it was built: a parameter unfrozen later was frozen in training
                        named.append((m, i, param))
        wrt = list(inputs.values()) + [param for _, _, param in named]
        with torch.enable_grad():
            found = _TORCH["grad"]((out * upstream.to(out.dtype)).sum(), wrt, allow_unused=True)
        for (name, tensor), grad in zip(inputs.items(), found):
            self.output(f"grad_{name}", grad if grad is not None else torch.zeros_like(tensor))
        for (m, i, _), grad in zip(named, found[len(inputs):]):
            if grad is not None:
                self.modules[m].setdefault("grads", {})[str(i)] = to_array(grad, f"the gradient of parameter {i}")

    # calling the answer --------------------------------------------------
    def call(self, fn, *args, **kwargs):
        if not callable(fn):
            raise CaseFailure(f"{getattr(fn, '__name__', type(fn).__name__)} is not callable")
        return fn(*args, **kwargs)

    def build(self, cls, *args, heads: int | None = None, head_width: int | None = None,
              train: bool = False, dtype: str | None = None, **kwargs):
        """Instantiate the student's module, set its parameters to the checker's values."""
        import torch

        if not isinstance(cls, type):
            raise CaseFailure(f"{self.recorder.question.answer_name} should be a class (an nn.Module subclass), "
                              f"got {type(cls).__name__}")
        module = self.call(cls, *args, **kwargs)
        lib = _TORCH
        if not isinstance(module, lib["Module"]):
            raise CaseFailure(f"{cls.__name__}(...) is not an nn.Module")
        lib["train"](module, bool(train))
        index = len(self.modules)
        seed = int(self.case.params.get("seed", 0))
        record = {"params": [], "values": {}, "class": type(module).__name__}
        params = []         # (index, tensor, trainable): as built, what grads() differentiates against
        with torch.no_grad():
            for i, (name, param) in enumerate(lib["named_parameters"](module)):
                values = inputs.param_values(tuple(param.shape), seed, index, i, name)
                param.copy_(torch.from_numpy(values).to(param.dtype))
                owner_name = name.rpartition(".")[0]
                try:
                    owner = lib["get_submodule"](module, owner_name) if owner_name else module
                except AttributeError:
                    owner = module
                if isinstance(owner, lib["Linear"]):
                    owner_kind = "linear"
                elif isinstance(owner, lib["ConvNd"]):
                    owner_kind = "conv"
                else:
                    owner_kind = type(owner).__name__
                record["params"].append([name, [int(s) for s in param.shape], owner_kind])
                record["values"][str(i)] = to_array(param.detach().clone(), name)
                params.append((i, name, param, bool(lib["requires_grad"](param))))
        record["param_names_before"] = [p[0] for p in record["params"]]
        self.modules.append(record)
        self.built.append(module)
        self.built_params.append(params)
        if dtype == "float64":
            lib["double"](module)
        return module

    # results -------------------------------------------------------------
    def output(self, name: str, value):
        self.outputs[name] = to_array(value, name)
        return self.outputs[name]

    def note(self, key: str, value) -> None:
        """A descriptive fact about the answer (plain data), sent as ``notes[key]``. The grader
        may use a note only to refuse an answer or to word its message, never to grant a point
        (CONTRIBUTING.md, "The wire format"): 09_training's submodule classes and head count."""
        self.notes[key] = value

    def unpack(self, value, names: tuple, what: str):
        """``value`` must be a tuple/list of ``len(names)`` items: returns them."""
        if type(value) not in (tuple, list) or len(value) != len(names):
            got = (f"a {type(value).__name__} of {len(value)} items" if type(value) in (tuple, list)
                   else f"a {type(value).__name__} of shape {shape_of(value)}"
                   if hasattr(value, "shape") else f"{type(value).__name__}")
            raise CaseFailure(f"{what} should return a tuple ({', '.join(names)}), got {got}")
        return tuple(value)

    def check_new_params(self, module):
        """After a forward: parameters created during forward mean layers built in forward()."""
        index = next((i for i, built in enumerate(self.built) if built is module), None)
        if index is None:
            return
        before = set(self.modules[index]["param_names_before"])
        after = [name for name, _ in _TORCH["named_parameters"](module)]
        new = [name for name in after if name not in before]
        if new:
            raise CaseFailure(f"your forward() creates new parameters ({', '.join(new[:3])}): they get new random "
                              f"weights on every call")

    def to_data(self) -> dict:
        data = {"outputs": self.outputs, "modules": self.modules, "error": self.error}
        if self.notes:
            data["notes"] = self.notes
        return data


class ProbeRecorder:
    def __init__(self, question):
        self.question = question

    def run(self, answer) -> dict:
        q = self.question
        data = {"qid": q.id, "fatal": None, "cases": []}
        if q.kind == "class" and not isinstance(answer, type):
            data["fatal"] = (f"{q.answer_name} should be a class (an nn.Module subclass), "
                             f"got {_kind_name(answer)}")
            return data
        if q.kind == "function" and (isinstance(answer, type) or not callable(answer)):
            data["fatal"] = f"{q.answer_name} should be a function, got {_kind_name(answer)}"
            return data
        if q.kind == "value" and answer is None:
            data["fatal"] = (f"no answer yet: {q.answer_name} is still None; write your prediction in its "
                             f"place ({q.answer_name} = a number)")
            return data
        if q.kind == "value" and not is_plain_number(answer):
            data["fatal"] = (f"{q.answer_name} should be a number (for example {q.answer_name} = 3 or 0.5), "
                             f"got {_kind_name(answer)}")
            return data
        import torch
        grad_mode = torch.is_grad_enabled()
        for index, case in enumerate(q.cases):
            record = ProbeCase(self, case, index)
            try:
                q.run_case(answer, case, record)
            except ForbiddenCall as error:
                record.error = describe_exception(error)
                record.error["type"] = "ForbiddenCall"
            except (BadOutput, CaseFailure) as error:
                record.error = {"type": type(error).__name__, "message": str(error), "where": ""}
            except RecursionError as error:
                record.error = describe_exception(error)
            except (Exception, SystemExit) as error:  # noqa: BLE001 - the student's code may raise anything
                record.error = describe_exception(error)
            finally:
                torch.set_grad_enabled(grad_mode)
            data["cases"].append(record.to_data())
        return data


def is_plain_number(value) -> bool:
    """A plain int or float (or a numpy scalar of those kinds): what a ``kind="value"``
    question accepts. Not a bool, a string, a tensor, a callable or a subclass of int/float."""
    import numpy as np
    kind = type(value)
    if kind in (int, float):
        return True
    return kind.__module__ == "numpy" and issubclass(kind, (np.integer, np.floating))


def _kind_name(obj) -> str:
    if obj is None:
        return "None"
    if obj is Ellipsis:
        return "... (not filled in yet)"
    if isinstance(obj, type):
        return f"the class {obj.__name__}"
    if callable(obj):
        return f"the function {getattr(obj, '__name__', '?')}"
    return f"a {type(obj).__name__}"


class single_thread:
    """Run torch on one intra-op thread inside the block (the checks' tensors are tiny: extra
    threads only cost time, a lot of it on a busy machine), then restore the setting."""

    def __enter__(self):
        import torch
        self.threads = torch.get_num_threads()
        if self.threads != 1:
            torch.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        import torch
        if self.threads != 1:
            torch.set_num_threads(self.threads)
        return False


def probe(question, answer) -> dict:
    """Run ``question``'s cases on ``answer``; plain data out (see module docstring)."""
    with single_thread():
        return ProbeRecorder(question).run(answer)
