"""The GPU recipe (``--preset fashion-mnist-gpu``): the preset resolves, says in one line where CUDA
is missing, and its step (recorded once as a CUDA graph, :mod:`vitref.training.graphed`) is the same
math as the loop's eager step. On the CPU the step runs eagerly through the same code, so CI
checks the math; the recording itself is checked where a GPU is (the one test that needs it)."""
import subprocess
import sys

import pytest
import torch

from vitref import training as vtrain
from vitref.training.cli import parse_args
from vitref.training.graphed import CapturedStep, capturable_adamw, set_learning_rate

TINY = dict(dim=16, depth=1, num_heads=2, mlp_dim=32, batch_size=64, progress=False, out=None, threads=1,
            train_limit=512, test_limit=200, tta="none")
NO_CUDA = "needs a CUDA GPU: this test records and replays a CUDA graph"


def test_gpu_preset_resolves_to_a_recorded_step_on_cuda():
    config = parse_args(["--preset", "fashion-mnist-gpu"])
    assert (config.device, config.cuda_graph, config.tf32) == ("cuda", True, True)
    assert config.minutes == 2.0 and config.dataset == "fashion-mnist"
    assert parse_args(["--preset", "fashion-mnist-gpu", "--no-cuda-graph"]).cuda_graph is False


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_gpu_preset_without_cuda_says_so_in_one_line():
    done = subprocess.run([sys.executable, "-m", "vitref.train", "--preset", "fashion-mnist-gpu"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA GPU" in lines[0], done.stderr


def test_learning_rate_is_filled_in_place_where_it_is_a_tensor():
    model = torch.nn.Linear(3, 2)
    optimizer = capturable_adamw([dict(params=[model.weight], weight_decay=0.1),
                                  dict(params=[model.bias], weight_decay=0.0)], vtrain.TrainConfig(lr=0.5),
                                 torch.device("cpu"))
    tensors = [group["lr"] for group in optimizer.param_groups]
    set_learning_rate(optimizer, 0.25)
    assert [group["lr"] for group in optimizer.param_groups] == tensors       # the same tensors (a graph reads them)
    assert all(float(t) == 0.25 for t in tensors)
    plain = torch.optim.AdamW(model.parameters(), lr=0.5)
    set_learning_rate(plain, 0.125)
    assert plain.param_groups[0]["lr"] == 0.125


@pytest.mark.slow   # two short training runs
def test_recordable_step_trains_as_the_eager_step_on_the_cpu():
    eager_model, eager = vtrain.train(steps=6, device="cpu", **TINY)
    graph_model, graph = vtrain.train(steps=6, device="cpu", cuda_graph=True, **TINY)
    assert graph["steps"] == eager["steps"] == 6 and graph["captured_step"] is False and "captured_step" not in eager
    for (name, a), b in zip(eager_model.state_dict().items(), graph_model.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    assert graph["epochs"][0]["train_loss"] == pytest.approx(eager["epochs"][0]["train_loss"], rel=1e-5)
    # the learning rate moved (warm-up): a step that ignored the schedule would differ
    assert eager["epochs"][0]["lr"] > 0


def test_captured_step_refuses_a_batch_of_another_shape():
    step = CapturedStep(lambda x, y, t: (x.sum(), y.sum()), torch.device("cpu"))
    assert step(torch.ones(2, 3), torch.ones(2), None)[0] == 6 and not step.captured
    step.buffers = (torch.zeros(4, 3), torch.zeros(4))
    with pytest.raises(ValueError, match=r"recorded \(4, 3\), got \(2, 3\)"):
        step._load((torch.ones(2, 3), torch.ones(2)))
    with pytest.raises(ValueError, match="eager_steps must be at least 1"):
        CapturedStep(lambda x, y, t: None, torch.device("cpu"), eager_steps=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_replayed_graph_trains_as_the_eager_step_on_cuda():
    config = dict(TINY, device="cuda", threads=None)
    eager_model, eager = vtrain.train(steps=8, **config)
    graph_model, graph = vtrain.train(steps=8, cuda_graph=True, **config)
    assert graph["captured_step"] is True
    for (name, a), b in zip(eager_model.state_dict().items(), graph_model.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)
    assert graph["epochs"][0]["train_loss"] == pytest.approx(eager["epochs"][0]["train_loss"], rel=1e-4)
