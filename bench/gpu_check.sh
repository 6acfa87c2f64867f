#!/usr/bin/env bash
# The GPU recipe's checks and measurements, as one call on a lent GPU machine (bench/README.md):
#   bench/gpu_check.sh [sweep|final]
# Needs Fashion-MNIST's four .gz files in data/fashion-mnist/ (copied there, carried with the call)
# and torch, timm, pytest on the machine. Writes logs under $OUT (default /tmp/gpu-check).
#   sweep: the GPU tests, python -m bench.throughput --device cuda, then five 2-minute runs of
#          variants of the preset side by side (they share the card: a lower bound for each alone)
#   final [ARGS]: python -m vitref.train --preset fashion-mnist-gpu alone, then again with ARGS
set -u
mode=${1:-sweep}
OUT=${OUT:-/tmp/gpu-check}; mkdir -p "$OUT"
export PYTHONPATH=$PWD VITREF_DATA=$PWD/data/fashion-mnist PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/vitref-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, timm; print('torch', torch.__version__, 'timm', timm.__version__)"
python3 -c "from vitref import data; data.load_tensors('fashion-mnist', train=True); data.load_tensors('fashion-mnist', train=False); print('data staged')"
train() { python3 -m vitref.train --preset fashion-mnist-gpu --out none --no-progress "$@"; }
if [ "$mode" = sweep ]; then
  timeout 180 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_recipe.py 2>&1 | tail -4
  timeout 240 python3 -m bench.throughput --device cuda 2>&1 | tee "$OUT/throughput.log"
  train > "$OUT/A-preset.log" 2>&1 &
  train --batch-size 1024 --lr 3e-3 > "$OUT/B-batch1024.log" 2>&1 &
  train --dim 192 --num-heads 6 --mlp-dim 384 --erase 0.25 --lr 1.5e-3 > "$OUT/C-wide-erase.log" 2>&1 &
  train --distill hard --teacher-share 0.2 > "$OUT/D-distill.log" 2>&1 &
  train --patch-size 7 --dim 64 --depth 4 --mlp-dim 128 --batch-size 1024 --lr 4e-3 --crop-padding 1 \
    > "$OUT/E-cpu-shape.log" 2>&1 &
  wait
  for f in "$OUT"/[A-E]-*.log; do echo "== $(basename "$f")"; tail -3 "$f"; done
else
  # each run alone on the card; extra arguments (e.g. --batch-size 1024 --lr 3e-3) go to the second run
  python3 -m vitref.train --preset fashion-mnist-gpu --out "$OUT/runs" --name final-1 --no-progress 2>&1 | tail -3
  python3 -m vitref.train --preset fashion-mnist-gpu --out "$OUT/runs" --name final-2 --no-progress "${@:2}" 2>&1 | tail -3
fi
