"""Chapter 9 (training): the solutions only.

``train_to_accuracy`` is graded by a training run and ``concept_augmentation`` is answered with a
number: neither has a bank of other answers (tests/test_answer_banks.py's ``NO_BANK`` says why);
tests/test_training_question.py tests the training question's verdicts and mistakes.
"""
import math
import time

import torch
import torch.nn.functional as F

from .bank import solution, solution_value
from .given import FashionViT


# ###################################################################################################
# the solutions, as the answer cells of the solutions notebook write them
# (tests/test_answer_banks.py::test_each_solution_is_the_notebooks_answer holds them equal)
@solution("train_to_accuracy")
def train_vit(images, labels, seconds=60):
    """Train a FashionViT on images uint8 (N, 1, 28, 28) and labels int64 (N,) for at most
    `seconds` of wall-clock time; return the trained model."""
    ### BEGIN SOLUTION
    start = time.monotonic()
    budget = 0.9 * seconds                       # keep some time for returning
    torch.manual_seed(0)
    model = FashionViT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    batch_size, peak_lr, warmup = 128, 2e-3, 0.05
    while True:
        order = torch.randperm(len(labels))                      # one shuffle per epoch, images and labels alike
        for first in range(0, len(labels) - batch_size + 1, batch_size):
            progress = (time.monotonic() - start) / budget       # 0 -> 1 over the time budget
            if progress >= 1:
                return model.eval()
            if progress < warmup:                                 # linear warm-up, then cosine to 0 (as lr_at)
                lr = peak_lr * progress / warmup
            else:
                lr = peak_lr * 0.5 * (1 + math.cos(math.pi * (progress - warmup) / (1 - warmup)))
            for group in optimizer.param_groups:
                group["lr"] = lr
            index = order[first:first + batch_size]
            loss = F.cross_entropy(model(images[index]), labels[index], label_smoothing=0.1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    ### END SOLUTION


data_option = solution_value("concept_augmentation", 2)
