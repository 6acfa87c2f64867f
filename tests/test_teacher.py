"""vitref.training.teacher: the convolutional distillation teacher, its targets and the distillation loss."""
import math

import pytest
import torch
import torch.nn.functional as F

from vitref import data as vdata
from vitref.training.teacher import ConvTeacher, distillation_loss, teacher_logits, train_teacher

INFO = dict(img_size=28, in_channels=1, num_classes=10, mean=(0.5,), std=(0.25,))


@pytest.mark.parametrize("arch", ["fc", "gap"])
def test_teacher_maps_images_to_logits(arch):
    teacher = ConvTeacher(1, 10, 28, arch)
    assert tuple(teacher(torch.randn(3, 1, 28, 28)).shape) == (3, 10)
    assert tuple(ConvTeacher(3, 5, 32, arch)(torch.randn(2, 3, 32, 32)).shape) == (2, 5)
    with pytest.raises(ValueError, match="unknown teacher arch 'resnet'"):
        ConvTeacher(1, 10, 28, "resnet")


def striped_images(count, seed=0):
    """Class 0: bright top half, class 1: bright bottom half (plus noise): learnable in a few steps,
    and unchanged by the mirror flips that the teacher trains with."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (count,), generator=generator)
    images = torch.randint(0, 60, (count, 1, 28, 28), generator=generator, dtype=torch.uint8)
    images[labels == 0, :, :14, :] += 150
    images[labels == 1, :, 14:, :] += 150
    return images, labels


@pytest.mark.slow   # a training run
def test_teacher_learns_and_stops_at_its_budget():
    images, labels = striped_images(512)
    info = dict(INFO, num_classes=2)
    teacher, summary = train_teacher(images, labels, info, epochs=2, batch_size=64, lr=3e-3)
    assert summary["steps"] == 2 * (512 // 64) and summary["epochs"] == 2
    assert not teacher.training
    test_images, test_labels = striped_images(200, seed=1)
    targets = teacher_logits(teacher, test_images, info)               # (200, 2)
    assert (targets.argmax(-1) == test_labels).float().mean().item() > 0.9
    _, timed = train_teacher(images, labels, info, deadline=0.0, batch_size=64)   # a deadline already past
    assert timed["steps"] == 1
    with pytest.raises(ValueError, match="budget"):
        train_teacher(images, labels, info)


def test_teacher_step_budget_counts_steps_across_epochs():
    images, labels = striped_images(128)
    _, summary = train_teacher(images, labels, dict(INFO, num_classes=2), steps=5, batch_size=64)
    assert summary["steps"] == 5 and summary["epochs"] == 2.5        # 2 batches an epoch, repeated
    _, both = train_teacher(images, labels, dict(INFO, num_classes=2), steps=5, epochs=1, batch_size=64)
    assert both["steps"] == 2                                          # the first budget reached ends it
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="steps must be a positive whole number"):
            train_teacher(images, labels, INFO, steps=bad)


def test_teacher_logits_average_each_image_with_its_mirror():
    torch.manual_seed(0)
    teacher = ConvTeacher(1, 10, 28).eval()
    images = torch.randint(0, 256, (5, 1, 28, 28), dtype=torch.uint8)
    targets = teacher_logits(teacher, images, INFO, batch_size=2)
    x = vdata.normalize(images, INFO["mean"], INFO["std"])
    with torch.no_grad():
        expected = (teacher(x) + teacher(x.flip(-1))) / 2
    torch.testing.assert_close(targets, expected)
    torch.testing.assert_close(teacher_logits(teacher, images.flip(-1), INFO), targets)   # mirror-invariant


def test_distillation_loss_is_the_tempered_kl_divergence():
    student = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
    teacher = torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, 0.0]])
    for temperature in (1.0, 3.0):
        p = F.softmax(teacher / temperature, -1)
        q = F.softmax(student / temperature, -1)
        expected = (p * (p.log() - q.log())).sum(-1).mean() * temperature ** 2
        assert distillation_loss(student, teacher, temperature).item() == pytest.approx(expected.item(), rel=1e-5)
    assert distillation_loss(teacher, teacher).item() == pytest.approx(0.0, abs=1e-7)
    assert distillation_loss(teacher + 5.0, teacher).item() == pytest.approx(0.0, abs=1e-6)   # shift-invariant
    assert not math.isclose(distillation_loss(student, teacher, 1.0).item(),
                            distillation_loss(student, teacher, 3.0).item())


def test_batch_loader_keeps_targets_with_their_images():
    images = torch.arange(20, dtype=torch.uint8).view(20, 1, 1, 1).expand(20, 1, 2, 2).contiguous()
    labels = torch.arange(20)
    targets = torch.arange(20.0)[:, None] * torch.ones(1, 3)           # (20, 3): row i belongs to image i
    loader = vdata.BatchLoader(images, labels, 6, (0.0,), (1.0,), shuffle=True, flip=True, targets=targets)
    seen = []
    for x, y, t in loader:
        assert torch.equal(t[:, 0].long(), y) and torch.equal((x[:, 0, 0, 0] * 255).round().long(), y)
        seen += y.tolist()
    assert sorted(seen) == list(range(20))
    with pytest.raises(ValueError, match="20 images but 19 targets"):
        vdata.BatchLoader(images, labels, 6, (0.0,), (1.0,), targets=targets[:19])
