"""Chapter 7, cross-entropy with label smoothing (the loss every training run of the course uses).

Skeleton::

    def smoothed_cross_entropy(logits, targets, smoothing=0.1):
        # logits (B, C), targets (B,) integers in [0, C): the target distribution puts
        # 1 - smoothing + smoothing / C on the right class and smoothing / C on every other;
        # returns the mean over the batch of -sum_c q_c log softmax(logits)_c (a 0-dim tensor)
        ...

Library cross-entropy and log-softmax are forbidden (``F.cross_entropy(..., label_smoothing=)``
would be the whole answer).
"""
from __future__ import annotations

import numpy as np

from .base import Case, Question, register
from .common import logits_and_targets, record_loss

LS_CASES = [
    Case("logits (4, 5), targets (4,), smoothing=0.1", {"B": 4, "C": 5, "eps": 0.1, "seed": 221, "scale": 2.0},
         {4: "B", 5: "C"}),
    Case("logits (3, 7), targets (3,), smoothing=0.3", {"B": 3, "C": 7, "eps": 0.3, "seed": 222, "scale": 3.0},
         {3: "B", 7: "C"}),
    Case("logits (2, 4), targets (2,), smoothing=0.0 (plain cross-entropy)",
         {"B": 2, "C": 4, "eps": 0.0, "seed": 223, "scale": 1.0}, {2: "B", 4: "C"}),
    Case("logits (5, 3), targets (5,), called without smoothing (the default, 0.1)",
         {"B": 5, "C": 3, "eps": None, "seed": 224, "scale": 2.0}, {5: "B", 3: "C"}),
    Case("logits (3, 6) with values near +-1000 (overflow test), smoothing=0.2",
         {"B": 3, "C": 6, "eps": 0.2, "seed": 225, "scale": 800.0, "unlikely_targets": True}, {3: "B", 6: "C"}),
    Case("float64 logits (4, 6), smoothing=0.25: the loss and its gradient with respect to the logits",
         {"B": 4, "C": 6, "eps": 0.25, "seed": 226, "scale": 2.0, "dtype": "float64", "grads": True},
         {4: "B", 6: "C"}),
]


def _run_ls(answer, case, rec):
    p = case.params
    logits, targets = logits_and_targets(rec, p)
    loss = rec.call(answer, logits, targets) if p["eps"] is None else rec.call(answer, logits, targets, p["eps"])
    record_loss(rec, loss)
    if p.get("grads"):
        rec.grads(loss, rec.tensor(np.ones((), dtype=np.float32)), {"logits": logits})


register(Question(id="label_smoothing", chapter="07_vit", title="Cross-entropy with label smoothing", points=2,
                  answer_name="smoothed_cross_entropy", kind="function", cases=LS_CASES, run_case=_run_ls,
                  forbidden=("cross_entropy",), outputs={"loss": "a single number", "grad_logits": "(B, C)"}))
