"""The training question (``train_to_accuracy``, assignment 09): the grader's FashionViT, the
verdict and its mistakes.

No reference output is compared and nothing the student's model computed counts: the student's
process sent the returned model's parameters (its ``state_dict``, as numbers). Here, on the
grader's side, :func:`load_model` puts them into the grader's own copy of the exercise's given
:class:`FashionViT` (same architecture, same parameter names: tests/threats/test_trained_model.py holds
it to the notebook's given cell) and predicts held-out images that never entered the student's
process, drawn with the run's source (the grader's secret subset in a batch, the public one in a
student's own check), against labels drawn the same way (in a grading run the classes are
renumbered in a secret order, the same as in the training labels the student's process got:
:func:`autograder.judging.secret.class_order`). Anything but the given FashionViT with its given
sizes (other or extra parameters or buffers, other shapes or head count, other submodules,
non-finite values) is a zero with "the model is not the given FashionViT" and what differs,
found from the names and shapes before anything is built or run; the evaluation itself is
bounded (:func:`predictions`).

The time: in a graded run the host measured it, from handing over the training data to receiving
the result (``measured_seconds``, set by :mod:`autograder.hosts.driver`; the student's own
``train_seconds`` is then ignored); in a student's in-notebook check there is no host and the
probe's own measurement is used. The verdict names what went wrong:

* ``overtime``: train_vit ran longer than the seconds it was given;
* ``one_class``: (almost) every image put in the same class, or parameters that became NaN/inf:
  the sign of a run that diverged;
* ``learning_rate_too_large``: weights blown up far beyond what training leaves them (a learning
  rate such as 1);
* ``chance``: about one prediction in ten right, as without training;
* ``undertrained``: it learned, but not to the accuracy asked.

The reference (:func:`reference_train_vit`, the course's recipe on the given FashionViT) shows
that the target is reachable on one CPU in the time given (tests/test_training_question.py).
"""
from __future__ import annotations

import functools
import inspect
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from einops.layers.torch import Rearrange
from torch import nn

from ...questions import inputs as I
from ...questions.ch09_training import STATE_PREFIX, TIME_SLACK, overtime_after
from ..model import Mistake
from ._entry import add

FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530
CHANCE_BELOW = 0.20         # at most this accuracy: no learning (chance is 0.10)
ONE_CLASS_SHARE = 0.90      # at least this share of predictions in one class: collapsed
# above this root-mean-square of the weights, a learning rate far too large blew them up: the given model
# starts near 0.1 and the course's recipe keeps it there; AdamW moves each weight by about the learning
# rate per step, so a learning rate of 1 gives several units within a minute (measured: 3.8 after 60 steps)
LARGE_WEIGHTS_RMS = 1.0
EVAL_BATCH = 500
EVAL_SECONDS = 30.0         # the most wall-clock time the grader spends predicting the held-out images
NOT_GIVEN = "the model is not the given FashionViT"


# The exercise's given model, character for character the notebook's locked "given" cell (and
# tests/answers/given.py): the grader evaluates the student's parameters with this forward.
class FashionViT(nn.Module):
    """A small ViT for Fashion-MNIST: uint8 images (B, 1, 28, 28) -> logits (B, 10).

    Patch 7 (16 patches + the class token), pre-LN encoder blocks (PyTorch's own
    nn.TransformerEncoderLayer: the block of chapter 5), a final LayerNorm and a linear head
    on the class token. The images are standardised inside forward, so the model takes them
    as they are stored."""

    def __init__(self, patch_size=7, dim=64, depth=3, num_heads=4, mlp_dim=128, dropout=0.0):
        super().__init__()
        num_patches = (28 // patch_size) ** 2
        self.patch_embed = nn.Sequential(                                       # (B, 1, 28, 28) -> (B, N, dim)
            Rearrange("b c (gh p1) (gw p2) -> b (gh gw) (p1 p2 c)", p1=patch_size, p2=patch_size),
            nn.Linear(patch_size * patch_size, dim),
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, num_heads, mlp_dim, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, images):
        x = (images.float() / 255.0 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD    # (B, 1, 28, 28)
        tokens = self.patch_embed(x)                                              # (B, N, dim)
        cls = self.cls_token.expand(len(tokens), -1, -1)                          # (B, 1, dim)
        tokens = torch.cat([cls, tokens], dim=1) + self.pos_embed                 # (B, N + 1, dim)
        return self.head(self.norm(self.blocks(tokens))[:, 0])                   # (B, 10)


class Diverged(ValueError):
    """The parameters are the given FashionViT's but some are NaN or infinite."""


def _config(state: dict, num_heads) -> dict:
    """The constructor arguments of FashionViT that would give parameters of these shapes (the
    heads, which no shape shows, from the probe's note), read from the shapes alone (nothing is
    built), or ValueError when no FashionViT has them. Only to say how a model differs from the
    given one: no other configuration is accepted."""
    def shape(name):
        if name not in state:
            raise ValueError(f"it has no parameter {name!r}")
        return tuple(np.shape(state[name]))

    embed = shape("patch_embed.1.weight")
    if len(embed) != 2 or embed[0] < 1:
        raise ValueError(f"patch_embed.1.weight has shape {embed}, expected (dim, patch_size ** 2)")
    dim, patch = embed[0], math.isqrt(embed[1])
    if patch * patch != embed[1] or patch < 1 or 28 % patch:
        raise ValueError(f"patch_embed.1.weight has shape {embed}: {embed[1]} is not patch_size ** 2 for a "
                         f"patch size that divides 28")
    depth = 0
    while f"blocks.layers.{depth}.linear1.weight" in state:
        depth += 1
    if depth < 1:
        raise ValueError("it has no encoder block (blocks.layers.0.linear1.weight)")
    mlp = shape("blocks.layers.0.linear1.weight")[0]
    heads = int(num_heads) if isinstance(num_heads, (int, float)) and float(num_heads).is_integer() else \
        repr(num_heads)[:40]
    return {"patch_size": patch, "dim": dim, "depth": depth, "num_heads": heads, "mlp_dim": mlp}


#: The given FashionViT's constructor arguments (its defaults; ``dropout`` has no parameter):
#: the only configuration the grader accepts.
GIVEN = {name: p.default for name, p in inspect.signature(FashionViT).parameters.items() if name != "dropout"}


@functools.lru_cache(maxsize=1)
def _given() -> tuple[dict, list]:
    """The given FashionViT's state (name -> shape) and submodules ([name, class name]), from the
    grader's own default model (built once per process; its values are never used)."""
    model = FashionViT()
    return ({name: tuple(tensor.shape) for name, tensor in model.state_dict().items()},
            [[name, type(module).__name__] for name, module in model.named_modules()])


def _difference(state: dict, num_heads) -> str | None:
    """How the sent state (name -> array) and head count differ from the given FashionViT's,
    from names and shapes only (nothing is built, nothing converted), or None."""
    shapes, _modules = _given()
    missing = [name for name in shapes if name not in state]
    extra = [name for name in state if name not in shapes]
    wrong = [name for name in shapes if name in state and tuple(np.shape(state[name])) != shapes[name]]
    heads_differ = not (isinstance(num_heads, (int, float)) and num_heads == GIVEN["num_heads"])
    if not (missing or extra or wrong or heads_differ):
        return None
    parts = []
    if wrong:
        name = wrong[0]
        parts.append(f"{name} has shape {tuple(np.shape(state[name]))}, the given FashionViT's {shapes[name]}")
    parts += ([f"extra parameters or buffers {_names(extra)}"] if extra else []) + \
        ([f"missing {_names(missing)}"] if missing else [])
    if heads_differ:
        parts.append(f"its attention has {repr(num_heads)[:40]} heads (the probe's note num_heads), the given "
                     f"FashionViT's {GIVEN['num_heads']}")
    detail = "; ".join(parts[:2])
    try:
        config = _config(state, num_heads)
    except ValueError:
        return detail                        # no FashionViT of any configuration has these names and shapes
    differs = {key: value for key, value in config.items() if value != GIVEN[key]}
    return f"FashionViT({_args(differs)}) is not the given FashionViT({_args(GIVEN)}): {detail}" if differs \
        else detail


def _names(names: list) -> str:
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ", ".join(str(name)[:80] for name in names[:3]) + more


def load_model(student_case: dict) -> FashionViT:
    """The grader's FashionViT (the given configuration, the only one accepted) holding the
    parameters the student's process sent, or ValueError (``NOT_GIVEN`` and what differs) /
    :class:`Diverged` (non-finite values). The names, shapes, head count and submodules are
    compared with the given FashionViT's before anything is built or converted."""
    outputs = student_case.get("outputs") or {}
    notes = student_case.get("notes") or {}
    state = {name[len(STATE_PREFIX):]: value for name, value in outputs.items() if name.startswith(STATE_PREFIX)}
    if not state:
        raise ValueError(f"{NOT_GIVEN}: the checker received no parameters")
    differs = _difference(state, notes.get("num_heads"))
    if differs:
        raise ValueError(f"{NOT_GIVEN}: {differs}")
    for name, value in state.items():
        if np.asarray(value).dtype.kind not in "biuf":
            raise ValueError(f"{NOT_GIVEN}: {name} holds {np.asarray(value).dtype} values")
    modules = notes.get("modules")
    own = _given()[1]
    if modules != own:
        raise ValueError(f"{NOT_GIVEN}: {_first_module_difference(modules, own)}")
    model = FashionViT()                     # the given configuration; its initial values are all overwritten
    expected = model.state_dict()
    with torch.no_grad():
        for name, tensor in expected.items():
            values = torch.from_numpy(np.asarray(state[name], dtype=np.float64)).to(tensor.dtype)
            if tensor.is_floating_point() and not bool(torch.isfinite(values).all()):
                raise Diverged(f"{NOT_GIVEN} with finite parameters: {name} holds NaN or infinite values "
                               f"(the training run diverged)")
            tensor.copy_(values)
        model.load_state_dict(expected)
    return model.eval()


def _args(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def _first_module_difference(modules, own) -> str:
    if not isinstance(modules, list):
        return "the checker received no list of its submodules"
    for index, want in enumerate(own):
        got = modules[index] if index < len(modules) else None
        if got != want:
            where = want[0] or "the model itself"
            if got is None:
                return f"it has no submodule {where} ({want[1]})"
            got_where = (got[0] if isinstance(got, list) and got and got[0] else "the model itself")
            got_class = got[1] if isinstance(got, list) and len(got) > 1 else "?"
            return f"{got_where} is a {got_class}, FashionViT has a {want[1]} at {where}"
    extra = modules[len(own)]
    return f"it has an extra submodule {extra[0] if isinstance(extra, list) and extra else extra!r}"


class TooSlow(RuntimeError):
    """The grader's evaluation of a model ran past :data:`EVAL_SECONDS`."""


def predictions(model: nn.Module, images: np.ndarray) -> np.ndarray:
    """The classes ``model`` predicts for ``images`` uint8 (M, 1, 28, 28): int64 (M,).

    Bounded: the model is the given FashionViT (:func:`load_model` accepts no other shape, so the
    work is fixed: about 0.15 s for 2,000 images on one thread), evaluated without autograd in
    batches of :data:`EVAL_BATCH`, on one thread with subnormal numbers flushed to zero (tiny
    weights made the same forward 40 times slower), and the wall clock is read after every
    batch: past :data:`EVAL_SECONDS` it stops with :class:`TooSlow`."""
    chunks = []
    threads = torch.get_num_threads()
    start = time.monotonic()
    try:
        torch.set_num_threads(1)                 # the flush below holds for the calling thread only
        torch.set_flush_denormal(True)
        with torch.no_grad():
            for first in range(0, len(images), EVAL_BATCH):
                batch = torch.from_numpy(np.ascontiguousarray(images[first:first + EVAL_BATCH]))  # (b, 1, 28, 28)
                chunks.append(model(batch).argmax(dim=-1))                                       # (b,)
                if time.monotonic() - start > EVAL_SECONDS:
                    raise TooSlow(f"the checker's evaluation of the model stopped after {EVAL_SECONDS:g} s "
                                  f"({first + len(batch):,} of {len(images):,} images; the given FashionViT "
                                  f"takes well under a second): the grading machine is overloaded, ask your "
                                  f"instructor to grade it again")
    finally:
        torch.set_flush_denormal(False)          # the grader's default (float64 references keep subnormals)
        torch.set_num_threads(threads)
    return torch.cat(chunks).to(torch.int64).numpy()                                      # (M,)


def reference_train_vit(images, labels, seconds):
    """The course's recipe within ``seconds`` on the given FashionViT (patch 7, dim 64, 3 blocks,
    4 heads, MLP 128): AdamW 2e-3 with weight decay 0.05 on the matrices, 5% warm-up then cosine
    over the time budget, batch 128, label smoothing 0.1."""
    # inner import: vitref.training's package imports its training loop (about 135 ms, measured with -X importtime)
    from vitref.training.optim import param_groups, warmup_cosine

    start = time.monotonic()
    budget = 0.9 * float(seconds)                      # the rest: returning, sending the parameters
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    y = labels.long()                                                                # (N,)
    model = FashionViT()
    optimizer = torch.optim.AdamW(param_groups(model, 0.05), lr=2e-3)
    batch = 128
    while True:
        order = torch.randperm(len(y), generator=generator)
        for first in range(0, len(y) - batch + 1, batch):
            progress = (time.monotonic() - start) / budget
            if progress >= 1:
                return model.eval()
            for group in optimizer.param_groups:
                group["lr"] = warmup_cosine(progress, 2e-3, 0.05)
            index = order[first:first + batch]
            loss = F.cross_entropy(model(images[index]), y[index], label_smoothing=0.1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def _draw_stand_in(images, labels, seconds):
    """What the grader's input-drawing pass calls instead of training (only the inputs the
    recipe asks for matter there)."""
    return FashionViT()


def _held_out(case) -> tuple[np.ndarray, np.ndarray]:
    """The held-out images (with their noise) and labels, drawn on the grader's side."""
    p = case.params
    images = I.dataset("fashion-mnist", "test", p["test"], p["seed"] + 1, "images", noise=p["noise"])
    labels = I.dataset("fashion-mnist", "test", p["test"], p["seed"] + 1, "labels")
    return np.asarray(images), np.asarray(labels)


def _seconds(student_case: dict):
    """The training time: the host's measurement where a host ran the notebook (None: the host
    never handed over the training data), else the probe's own (a student's in-notebook check)."""
    if "measured_seconds" in student_case:
        value = student_case["measured_seconds"]
        return None if value is None else float(value)
    own = (student_case.get("outputs") or {}).get("train_seconds")
    return None if own is None else float(np.asarray(own, dtype=np.float64).reshape(-1)[0])


# the last few (student_case, source, scores): verdict, match and summary of one judgement share
# one evaluation (the same probe data, judged with the same inputs source in force)
_EVALUATED: list = []


def _scores(case, student_case) -> dict:
    source = I.current()
    for seen, seen_source, scores in _EVALUATED:
        if seen is student_case and seen_source is source:
            return scores
    scores = _evaluate(case, student_case)
    _EVALUATED[:] = [(student_case, source, scores)] + _EVALUATED[:3]
    return scores


def _evaluate(case, student_case) -> dict:
    """What the grader measures: {"seconds", and "refused" | "diverged" | "accuracy",
    "top_share"}. Nothing here reads what a class number means: in a grading run the labels
    name the classes in the run's own secret order (:func:`autograder.judging.secret.class_order`)."""
    scores: dict = {"seconds": _seconds(student_case)}
    try:
        model = load_model(student_case)
    except Diverged as error:
        return dict(scores, diverged=str(error))
    except ValueError as error:
        return dict(scores, refused=str(error))
    images, labels = _held_out(case)
    try:
        predicted = predictions(model, images)                                        # (M,)
    except TooSlow as error:
        return dict(scores, refused=str(error))
    counts = np.bincount(predicted, minlength=10)
    weights = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])
    return dict(scores, accuracy=float((predicted == labels).mean()),
                top_share=float(counts.max() / max(1, len(predicted))),
                weights_rms=float(weights.pow(2).mean().sqrt()))


def _overtime(case, scores) -> bool:
    return scores["seconds"] is not None and scores["seconds"] > overtime_after(case.params["seconds"])


def verdict(question, case, student_case) -> str | None:
    scores = _scores(case, student_case)
    if "refused" in scores:
        return scores["refused"]
    if scores["seconds"] is None:
        return ("the checker never handed train_vit its training data: the result it received did not come from "
                "its own call of train_vit")
    if "diverged" in scores:
        return scores["diverged"]
    need = float(case.params["accuracy"])
    if _overtime(case, scores):
        return (f"train_vit took {scores['seconds']:.0f} s; it was given seconds={case.params['seconds']} "
                f"(accuracy {scores['accuracy']:.3f})")
    if scores["accuracy"] < need:
        return (f"accuracy {scores['accuracy']:.3f} on {case.params['test']:,} held-out images, {need:.2f} needed "
                f"(train_vit took {scores['seconds']:.0f} s of its {case.params['seconds']})")
    return None


def match(question, data) -> str | None:
    """The key of the mistake the grader's evaluation shows, or None."""
    cases = data.get("cases") or []
    if len(cases) != 1 or cases[0].get("error"):
        return None
    case = question.cases[0]
    scores = _scores(case, cases[0])
    if "refused" in scores or scores["seconds"] is None:
        return None
    if "diverged" in scores:
        return "one_class"
    if _overtime(case, scores):
        return "overtime"
    if scores["weights_rms"] > LARGE_WEIGHTS_RMS:
        return "learning_rate_too_large"
    if scores["top_share"] >= ONE_CLASS_SHARE:
        return "one_class"
    if scores["accuracy"] <= CHANCE_BELOW:
        return "chance"
    if scores["accuracy"] < float(case.params["accuracy"]):
        return "undertrained"
    return None


def summary(question, data) -> str | None:
    """What a passing answer reached, for its feedback."""
    cases = data.get("cases") or []
    scores = _scores(question.cases[0], cases[0]) if len(cases) == 1 else None
    if not scores or "accuracy" not in scores or scores["seconds"] is None:
        return None
    return (f"accuracy {scores['accuracy']:.3f} on {question.cases[0].params['test']:,} held-out images "
            f"after {scores['seconds']:.0f} s of training"
            + close_to_bar(scores["accuracy"], float(question.cases[0].params["accuracy"])))


CLOSE_TO_BAR = 0.02         # a pass by less than this (2 points of accuracy) is warned about


def close_to_bar(accuracy: float, need: float) -> str:
    """The warning a pass with the grader's ``accuracy`` less than :data:`CLOSE_TO_BAR` above
    ``need`` gets (it still passes), else "". (Accuracies are counts over the held-out images:
    the 1e-9 keeps a margin of exactly 2 points, 0.82 for 0.80, out of float rounding's reach.)"""
    if not need <= accuracy < need + CLOSE_TO_BAR - 1e-9:
        return ""
    return (f". Close to the bar: {accuracy:.4g} is within {100 * CLOSE_TO_BAR:.0f} points of the {need:.2f} "
            f"needed, so one unlucky seed (or a slower grading machine, which fits fewer steps into the same "
            f"seconds) could fail it. To make it robust, use the whole time budget (stop on the clock, not after "
            f"a fixed number of epochs), warm the learning rate up and decay it over that budget, keep label "
            f"smoothing, and run it with a few seeds before you submit")


# Each mistake's builder is a train_vit that makes it, fast (the tests run them), on the given
# FashionViT (anything else is refused before any mistake is looked for).

def _untrained(parts):
    def train_vit(images, labels, seconds):
        torch.manual_seed(0)
        return FashionViT().eval()                                                  # never trained
    return train_vit


def _naive_cross_entropy(logits, targets):
    """A cross-entropy written without the max shift: large logits overflow exp (NaN)."""
    probs = torch.exp(logits) / torch.exp(logits).sum(dim=-1, keepdim=True)          # (B, 10)
    return -torch.log(probs[torch.arange(len(logits)), targets]).mean()


def _steps(lr, steps, optimizer_class, loss_fn=F.cross_entropy):
    """A train_vit that takes ``steps`` fixed steps of 128 images, whatever its seconds."""
    def build(parts):
        def train_vit(images, labels, seconds):
            torch.manual_seed(0)
            model = FashionViT()
            optimizer = optimizer_class(model.parameters(), lr=lr)
            for step in range(steps):
                index = slice(128 * step, 128 * (step + 1))
                loss = loss_fn(model(images[index]), labels[index].long())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            return model.eval()
        return train_vit
    return build


# A learning rate far too large with the naive cross-entropy: the logits overflow exp, the loss
# and then every parameter become NaN.
_diverged = _steps(1e3, 8, torch.optim.SGD, _naive_cross_entropy)
_few_steps = _steps(2e-3, 30, torch.optim.AdamW)        # stops after 30 steps, not on the clock
_learning_rate_one = _steps(1.0, 60, torch.optim.AdamW)


def _overtime_builder(parts):
    def train_vit(images, labels, seconds):
        time.sleep(TIME_SLACK * seconds + 3)                                         # ignores its budget
        return FashionViT()
    return train_vit


MISTAKES = [
    Mistake("overtime", "trained past the time budget",
            "Read the clock in the loop (time.monotonic() at the start, then before every step) and stop "
            "when the seconds are used up; keep a few seconds for returning.", _overtime_builder),
    Mistake("one_class", "a run that diverged",
            "The run diverged (the loss became NaN or huge): lower the learning rate (AdamW about 1e-3), "
            "warm it up over the first steps, and standardise the images to mean 0, std 1.", _diverged),
    Mistake("learning_rate_too_large", "a learning rate far too large",
            "AdamW moves every weight by about the learning rate at each step: with 1 the weights are thrown far "
            "from anything useful within a few steps. Use about 1e-3 to 2e-3 (with a short warm-up).",
            _learning_rate_one,
            ask="Your model's weights are many times larger than training leaves them: how far does one optimizer "
                "step move a weight, with your learning rate?"),
    Mistake("chance", "predictions at chance level",
            "The model did not learn: check that the optimizer steps (zero_grad, backward, step) run, that "
            "images and labels are shuffled with the same permutation, and that the returned model is the "
            "one you trained.", _untrained),
    Mistake("undertrained", "learned, but not enough",
            "Use the whole time budget (stop on the clock, not after a fixed number of steps), keep the given "
            "FashionViT's sizes, AdamW around 2e-3 with warm-up and cosine decay, batch 128, label smoothing "
            "0.1.", _few_steps),
]


def measures(question, data) -> dict:
    """For a leaderboard: the held-out accuracy the grader measured and the seconds the host
    measured (``measured_seconds``: never the probe's own ``train_seconds``), of a run that
    finished within its time; {} otherwise (refused, diverged, no host clock, overtime)."""
    cases = data.get("cases") or []
    if len(cases) != 1 or cases[0].get("error") or cases[0].get("measured_seconds") is None:
        return {}
    case = question.cases[0]
    scores = _scores(case, cases[0])
    if "accuracy" not in scores or _overtime(case, scores):
        return {}
    return {"accuracy": scores["accuracy"], "seconds": float(cases[0]["measured_seconds"])}


add("train_to_accuracy", references=lambda: [reference_train_vit], catalogue=MISTAKES, verdict=verdict,
    match=match, summary=summary, draw_answer=_draw_stand_in, measures=measures)
