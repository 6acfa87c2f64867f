"""The grader's side: references, mistake catalogue, judge, static scan, secret inputs.

Importing this package registers the datasets the training questions draw their images from
(:func:`autograder.questions.inputs.dataset`): Fashion-MNIST through :mod:`vitref.data`
(Debian's copy, or a download on first use), loaded once per process.
"""
from __future__ import annotations

import functools

from ..questions import inputs as _inputs


@functools.lru_cache(maxsize=2)
def _fashion_mnist(train: bool):
    # inner import: vitref.data would add ~100 ms to `import autograder`; it loads when a training question draws
    from vitref.data import load_tensors

    images, labels = load_tensors("fashion-mnist", train)           # uint8 (N, 1, 28, 28), int64 (N,)
    return images.numpy(), labels.numpy()


_inputs.register_dataset("fashion-mnist", _fashion_mnist, classes=10)
