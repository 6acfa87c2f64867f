"""The distillation teacher, kept importable here; the code is in :mod:`vitref.training.teacher`."""
from .training.teacher import ConvTeacher, distillation_loss, teacher_logits, train_teacher

__all__ = ["ConvTeacher", "train_teacher", "teacher_logits", "distillation_loss"]
