"""How a CPU run uses the cores: the thread tuner and batch slices run in parallel threads.

An *option* is a number of torch threads (``2``), or ``(threads, splits)``: the batch is cut
into ``splits`` slices (:func:`batch_slices`) that run forward and backward at the same time in
their own Python threads, each op on ``threads`` cores. :class:`ThreadTuner` times the options
while training and keeps the fastest; :class:`SlicedForward` evaluates the same way.
"""
from __future__ import annotations

import math
import os

import torch


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_options() -> list:
    """What a timed CPU run chooses from: one thread, all cores, and one thread per batch slice on each core."""
    cores = available_cores()
    return [1, cores, (1, cores)]


def threads_of(option) -> int:
    """Torch threads of an option (``2`` or ``(threads, splits)``)."""
    return option if isinstance(option, int) else option[0]


def splits_of(option) -> int:
    """Batch slices of an option (1 for a plain number of threads)."""
    return 1 if isinstance(option, int) else option[1]


def _label(option):
    """How an option appears in the history: ``2`` (threads) or ``'1x2'`` (1 thread in each of 2 batch slices)."""
    return option if isinstance(option, int) else f"{option[0]}x{option[1]}"


def batch_slices(size: int, splits: int) -> list[slice]:
    """``splits`` contiguous slices covering ``range(size)``, as equal as can be (37, 2 -> 0:18, 18:37)."""
    bounds = [round(i * size / splits) for i in range(splits + 1)]
    return [slice(a, b) for a, b in zip(bounds, bounds[1:])]


class ThreadTuner:
    """Keep the fastest of several ways to use the CPU cores, re-checked while training.

    An option is a number of torch threads (``2``), or ``(threads, splits)``: the batch is cut
    into ``splits`` slices that run forward and backward at the same time in their own Python
    threads, each op on ``threads`` cores (see :func:`vitref.training.loop.forward_backward`).
    For a small model, ``(1, 2)`` keeps both cores busy with one synchronisation per step, where
    ``2`` threads synchronise inside every operation.

    On a shared machine, all-cores parallelism can be many times *slower* than one thread
    (every parallel operation waits for a thread that another program has taken off its core),
    while on an idle machine it is nearly twice as fast. Every ``interval`` seconds the tuner
    times a few real training steps with each option (fewest threads first) and keeps the
    fastest; an option that is clearly slower is dropped after one step, and the interval doubles
    while the answer stays the same. Three steps in a row at over twice the timed speed (the
    load changed) start a new check at once. Used for timed CPU runs (``threads=0``); it changes
    only speed, not the method. ``splits`` is the current option's number of batch slices.
    """

    def __init__(self, options, interval: float = 60.0, steps_per_option: int = 3, max_interval: float = 240.0):
        # fewest threads first: the safe baseline
        self.options = sorted(set(options), key=lambda o: (threads_of(o) * splits_of(o), splits_of(o)))
        self.best = self.options[0]
        self.base_interval, self.interval, self.max_interval = interval, interval, max_interval
        self.steps_per_option = steps_per_option
        self.next_probe = 0.0
        self.plan: list = []
        self.samples: dict = {}
        self.choices: list[dict] = []
        self.slow_steps = 0
        self.splits = 1
        self.warmed = {self.best}     # an option's first step pays one-off costs (new threads, allocations): not timed
        self._use(self.best)

    @property
    def max_splits(self) -> int:
        """The most batch slices any option uses (how many threads a slice pool needs)."""
        return max(splits_of(o) for o in self.options)

    def _use(self, option) -> None:
        if torch.get_num_threads() != threads_of(option):
            torch.set_num_threads(threads_of(option))
        self.splits = splits_of(option)

    def before_step(self, now: float) -> None:
        """Call before a timed step: switch to the option to time next (or the best)."""
        if not self.plan and len(self.options) > 1 and now >= self.next_probe:
            # Time the safest option first (fewest threads: at worst about cores-times slower),
            # so that an option which the machine's load makes far slower is dropped after one step.
            self.plan = [o for o in self.options
                         for _ in range(self.steps_per_option + (o not in self.warmed))]
            self.samples = {}
        self._use(self.plan[0] if self.plan else self.best)

    def after_step(self, seconds: float, now: float, step: int) -> None:
        """Call after the step with how long it took (``seconds``), the time now and the step number."""
        if not self.plan:
            # The load changed (3 steps in a row at over twice the timed speed): check again now.
            reference = min(self.samples.get(self.best, [math.inf]))
            self.slow_steps = self.slow_steps + 1 if seconds > 2 * reference else 0
            if self.slow_steps >= 3:
                self.next_probe, self.slow_steps = now, 0
            return
        option = self.plan.pop(0)
        if option not in self.warmed:
            self.warmed.add(option)
            return
        self.samples.setdefault(option, []).append(seconds)
        others = [min(v) for k, v in self.samples.items() if k != option]
        if others and seconds > 2 * min(others):               # clearly slower: stop timing it
            self.plan = [o for o in self.plan if o != option]
        if not self.plan:
            previous = self.best
            self.best = min(self.samples, key=lambda k: min(self.samples[k]))
            # a first check, or a changed answer, is re-checked soon; the same answer less and less often
            same = self.best == previous and bool(self.choices)
            self.interval = min(self.max_interval, self.interval * 2) if same else self.base_interval
            self.next_probe = now + self.interval
            self.choices.append(dict(step=step, threads=_label(self.best),
                                     ms_per_step={_label(k): round(1000 * min(v), 1) for k, v in self.samples.items()}))
            self._use(self.best)


class SlicedForward:
    """``model(x)`` computed as ``splits`` slices of the batch in parallel threads of ``pool``
    (evaluation only: no graph is built). Other attributes are the model's."""

    def __init__(self, model, splits: int, pool):
        self.model, self.splits, self.pool = model, splits, pool

    def __getattr__(self, name):                  # .training, .eval(), .train() ... of the model
        return getattr(self.model, name)

    def __call__(self, x):
        def run(part):
            with torch.no_grad():                 # grad mode is per thread
                return self.model(x[part])
        return torch.cat(list(self.pool.map(run, batch_slices(len(x), self.splits))))   # (B, num_classes)


__all__ = ["available_cores", "cpu_options", "threads_of", "splits_of", "batch_slices", "ThreadTuner",
           "SlicedForward"]
