"""All benchmarks: ``python -m bench`` (= ``make bench``); ``python -m bench throughput check_latency`` for some.

Each benchmark is also a module of its own (``python -m bench.<name> --help``):

* ``throughput``        -- vitref.ViT vs timm VisionTransformer train steps, same config, interleaved;
* ``check_latency``     -- one autograder.check() call in a warm kernel;
* ``grading``           -- ``python -m autograder grade`` on a synthetic class;
* ``similarity``        -- the similarity report on a class built from the answer banks (precision, recall, time);
* ``train_to_accuracy`` -- ``python -m vitref.train --dataset fashion-mnist --minutes 10``;
* ``book_build``        -- ``jupyter-book build``, fresh and unchanged;
* ``colab_like``        -- every notebook in a Colab-like environment, the course installed by its set-up cell.

They print measured numbers and ratios; none is part of ``make test``. Fast ones run first.
"""
from __future__ import annotations

import importlib
import sys
import time

ORDER = ["throughput", "check_latency", "grading", "similarity", "train_to_accuracy", "book_build", "colab_like"]


def main(argv=None) -> int:
    names = list(argv if argv is not None else sys.argv[1:]) or ORDER
    unknown = [n for n in names if n not in ORDER]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {ORDER}", file=sys.stderr)
        return 2
    failed = []
    for name in names:
        print(f"== bench.{name} ==", flush=True)
        start = time.perf_counter()
        try:
            status = importlib.import_module(f"bench.{name}").main([])
        except Exception as error:  # noqa: BLE001 - one broken benchmark must not hide the others
            print(f"bench.{name} failed: {type(error).__name__}: {error}", flush=True)
            status = 1
        if status:
            failed.append(name)
        print(f"== bench.{name}: {time.perf_counter() - start:.0f} s ==\n", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
