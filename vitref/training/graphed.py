"""A training step recorded once as a CUDA graph and replayed: the GPU recipe's answer to launch overhead.

The recipe's ViT is small (a few hundred thousand to a few million parameters): on a GPU each
eager step spends most of its time launching a few hundred small kernels, so the step time does
not grow with the batch. :class:`CapturedStep` records the whole step (forward, backward, gradient
clipping, the fused AdamW update) once, then replays it: one launch per step. What changes from
step to step lives in tensors the graph reads: the batch (copied into fixed buffers) and the
learning rate (a one-element tensor on the device, filled before each replay).

The math is the loop's own step (:func:`vitref.training.loop.forward_backward`, clipping, AdamW):
on the CPU, and for the first ``eager_steps`` steps on a GPU, it runs eagerly, and the tests
compare it with the loop's step there. Timeline on a GPU::

    step 1 .. eager_steps     eager, on a side stream (AdamW creates its state; kernels are chosen)
    step eager_steps + 1      record the graph with this batch, then replay it
    later steps               copy the batch into the buffers, replay
"""
from __future__ import annotations

import torch

from .config import TrainConfig


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Every group's learning rate to ``lr``: filled in place where it is a tensor (a recorded
    graph reads that tensor), assigned where it is a number."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def capturable_adamw(groups: list[dict], config: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW that a CUDA graph can record: fused, ``capturable`` (on CUDA), its learning rate a
    tensor on the device (each group its own, filled by :func:`set_learning_rate`). On the CPU
    the same optimizer, not capturable: the tests compare its steps with the loop's there."""
    for group in groups:
        group["lr"] = torch.tensor(config.lr, dtype=torch.float32, device=device)
    return torch.optim.AdamW(groups, lr=torch.tensor(config.lr, dtype=torch.float32, device=device),
                             betas=(0.9, config.beta2), fused=True, capturable=device.type == "cuda")


class CapturedStep:
    """``step(x, y, teacher_batch) -> (loss, correct)``: one optimizer step of ``model`` on a batch
    ``x (B, C, H, W)``, ``y (B,)`` (``teacher_batch (B, K)`` or None), returning the batch-mean loss
    and the number right as tensors on the device (copies: the next replay does not change them).

    ``compute(x, y, teacher_batch)`` is the step's math (forward, backward, clipping, update); on
    CUDA it is recorded after ``eager_steps`` eager steps. Every batch must have the first
    batch's shape (the loop drops the last, smaller one).
    """

    def __init__(self, compute, device: torch.device, eager_steps: int = 3):
        if eager_steps < 1:
            raise ValueError(f"eager_steps must be at least 1 (AdamW creates its state then), got {eager_steps}")
        self.compute, self.device, self.eager_steps = compute, device, eager_steps
        self.steps = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.buffers: tuple[torch.Tensor, ...] = ()       # x (B, C, H, W), y (B,)[, teacher (B, K)]
        self.outputs: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def captured(self) -> bool:
        """Whether the step is now replayed from a recorded graph."""
        return self.graph is not None

    def __call__(self, x: torch.Tensor, y: torch.Tensor, teacher_batch: torch.Tensor | None):
        self.steps += 1
        if self.device.type != "cuda":
            return self.compute(x, y, teacher_batch)
        batch = (x, y) if teacher_batch is None else (x, y, teacher_batch)
        if self.graph is None and self.steps <= self.eager_steps:
            return self._on_side_stream(batch)
        if self.graph is None:
            self._record(batch)
        else:
            self._load(batch)
        assert self.graph is not None and self.outputs is not None
        self.graph.replay()
        return self.outputs[0].clone(), self.outputs[1].clone()

    def _load(self, batch: tuple[torch.Tensor, ...]) -> None:
        """Copy a batch into the graph's input buffers (same shapes as the recorded batch)."""
        for buffer, value in zip(self.buffers, batch):
            if buffer.shape != value.shape:
                raise ValueError(f"a captured step replays one batch shape: recorded {tuple(buffer.shape)}, "
                                 f"got {tuple(value.shape)}")
            buffer.copy_(value, non_blocking=True)

    def _on_side_stream(self, batch: tuple[torch.Tensor, ...]):
        """An eager step on a side stream (how PyTorch asks for warm-up before a capture)."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            loss, correct = self.compute(*self._padded(batch))
        torch.cuda.current_stream(self.device).wait_stream(side)
        return loss, correct

    def _record(self, batch: tuple[torch.Tensor, ...]) -> None:
        """Record the step on fixed copies of ``batch`` (recording runs nothing: the caller replays)."""
        self.buffers = tuple(value.clone() for value in batch)
        torch.cuda.synchronize(self.device)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = self.compute(*self._padded(self.buffers))

    @staticmethod
    def _padded(batch: tuple[torch.Tensor, ...]):
        """``(x, y, teacher_batch)`` with ``None`` for a batch without a teacher's logits."""
        return batch if len(batch) == 3 else (*batch, None)


__all__ = ["CapturedStep", "capturable_adamw", "set_learning_rate"]
