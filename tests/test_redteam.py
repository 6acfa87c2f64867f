"""Red-team findings (bench/redteam/): routes around the ban on forbidden functions, and
what the grader must keep refusing or accepting. Fast, in-process tests; the end-to-end
reproducers grade hostile notebooks with ``python -m bench.redteam.attacks``."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from autograder.student.ban import ForbiddenCall, install


@pytest.fixture
def banned():
    bans = []

    def ban(*keys):
        bans.append(install(keys, reversible=True))

    yield ban
    for b in reversed(bans):
        b.undo()


def _softmax_by_attention(x: torch.Tensor) -> torch.Tensor:
    """softmax(x) over the last axis from the fused attention kernel: q = e0, k = x e0, v = I."""
    rows, n = x.shape
    q = torch.zeros(rows, 1, 1, n, dtype=x.dtype)
    q[..., 0] = 1
    k = torch.zeros(rows, 1, n, n, dtype=x.dtype)
    k[..., 0] = x.reshape(rows, 1, n)
    v = torch.eye(n, dtype=x.dtype).expand(rows, 1, n, n)
    return F.scaled_dot_product_attention(q, k, v, scale=1.0).reshape(rows, n)


def _softmax_by_flash_kernel(x: torch.Tensor) -> torch.Tensor:
    rows, n = x.shape
    q = torch.zeros(rows, 1, 1, n, dtype=x.dtype)
    q[..., 0] = 1
    k = torch.zeros(rows, 1, n, n, dtype=x.dtype)
    k[..., 0] = x.reshape(rows, 1, n)
    v = torch.eye(n, dtype=x.dtype).expand(rows, 1, n, n).contiguous()
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, scale=1.0)[0].reshape(rows, n)


def test_attention_kernels_compute_a_softmax():
    """The premise of the tests below: without a ban, the fused attention kernel is a softmax."""
    x = torch.randn(3, 5, dtype=torch.float64)
    assert torch.allclose(_softmax_by_attention(x), torch.softmax(x, -1))
    assert torch.allclose(_softmax_by_flash_kernel(x), torch.softmax(x, -1))


@pytest.mark.parametrize("key", ["softmax", "cross_entropy"])
@pytest.mark.parametrize("route", [_softmax_by_attention, _softmax_by_flash_kernel])
def test_attention_kernels_are_forbidden_where_softmax_is(banned, key, route):
    banned(key)
    with pytest.raises(ForbiddenCall):
        route(torch.randn(3, 5))


def _rows(x):
    return x.reshape(1, -1, x.shape[-1])           # every row a channel: batch norm = layer norm


LAYER_NORM_ROUTES = {
    "_batch_norm_with_update": lambda x: torch.ops.aten._batch_norm_with_update(
        _rows(x), None, None, torch.zeros(x.shape[0]), torch.ones(x.shape[0]), 0.1, 1e-5)[0],
    "native_batch_norm.out": lambda x: torch.ops.aten.native_batch_norm.out(
        _rows(x), None, None, None, None, True, 0.1, 1e-5, out=torch.empty(_rows(x).shape),
        save_mean=torch.empty(x.shape[0]), save_invstd=torch.empty(x.shape[0]))[0],
    "_native_batch_norm_legit.no_stats_out": lambda x: torch.ops.aten._native_batch_norm_legit.no_stats_out(
        _rows(x), None, None, True, 0.1, 1e-5, out=torch.empty(_rows(x).shape),
        save_mean=torch.empty(x.shape[0]), save_invstd=torch.empty(x.shape[0]))[0],
    "native_layer_norm on a nested tensor": lambda x: torch.ops.aten.native_layer_norm(
        torch.nested.nested_tensor([x]), [x.shape[-1]], torch.ones(x.shape[-1]), torch.zeros(x.shape[-1]),
        1e-5)[0].unbind()[0],
}


@pytest.mark.parametrize("name", sorted(LAYER_NORM_ROUTES))
def test_layer_norm_routes(banned, name):
    x = torch.randn(4, 6)
    expected = F.layer_norm(x, (6,))
    assert torch.allclose(LAYER_NORM_ROUTES[name](x).reshape(4, 6), expected, atol=1e-5)   # a real route
    banned("layer_norm")
    with pytest.raises(ForbiddenCall):
        LAYER_NORM_ROUTES[name](x)


def test_own_answers_still_work_under_every_ban(banned):
    banned("softmax", "cross_entropy", "layer_norm", "attention", "embedding")
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    e = torch.exp(x - x.amax(-1, keepdim=True))
    p = e / e.sum(-1, keepdim=True)
    mean = x.mean(-1, keepdim=True)
    ln = (x - mean) / torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + 1e-5)
    (p.sum() + ln.pow(2).sum()).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    scores = x @ x.transpose(-2, -1)
    assert (scores.masked_fill(torch.eye(3, dtype=torch.bool), -1e9).amax(-1) < 1e9).all()


UNDO_SCRIPT = r'''
import warnings
import torch, torch.nn.functional as F
from autograder.student.ban import install
from autograder.questions.forbidden import FORBIDDEN

x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)

def library_functions():
    x.grad = None
    outs = [F.softmax(x, -1), F.log_softmax(x, -1), F.layer_norm(x, (4,)), F.group_norm(x, 1),
            F.cross_entropy(x[0], torch.tensor([1, 2, 3])), F.scaled_dot_product_attention(x, x, x),
            F.embedding(torch.tensor([0, 1]), x[0])]
    sum(o.sum() for o in outs).backward()
    return [o.detach() for o in outs] + [x.grad.clone()]

before = library_functions()
for key in FORBIDDEN:
    install([key], reversible=True).undo()
with warnings.catch_warnings():
    warnings.simplefilter("error")          # PyTorch warns when a stale dispatch entry is used
    after = library_functions()
assert all(torch.equal(a, b) for a, b in zip(before, after))
print("restored")
'''


@pytest.mark.slow      # seconds of CPU: make test runs it, the fast loop does not
def test_check_leaves_the_students_torch_as_it_found_it():
    """``check()`` bans in the student's own kernel and undoes the ban: afterwards every library
    function computes the same values and gradients, without PyTorch's "an autograd kernel was
    not registered" warning (registering both composite alias families left the table stale)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", UNDO_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "restored" in done.stdout, done.stderr[-2000:]


# --------------------------------------------------------------------------- the sandbox

KEYRING_SCRIPT = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = {"x86_64": (248, 250), "aarch64": (217, 219)}[os.uname().machine]
out = {}
for name, ring in (("session", -3), ("user", -4)):
    key = libc.syscall(calls[0], b"user", b"left-for-the-next-run", b"outputs", ctypes.c_size_t(7), ctypes.c_long(ring))
    out[name] = [key, ctypes.get_errno()]
persistent = libc.syscall(calls[1], 22, ctypes.c_long(-1), ctypes.c_long(-4))   # KEYCTL_GET_PERSISTENT
out["persistent"] = [persistent, ctypes.get_errno()]
RESULT = out
'''


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    from autograder.hosts import sandbox
    z = sandbox.Zygote(payload="autograder.student.zygote:script_payload", preload=("numpy",),
                       preload_checks=False, memory_mb=512)
    z.start()
    yield z
    z.close()


@pytest.mark.slow      # seconds of CPU: make test runs it, the fast loop does not
def test_no_kernel_keyring_in_the_sandbox(zygote):
    """Keyrings are not namespaced: a key left by one run (the notebook's run where
    cross-entropy is allowed, computing it on the secret inputs) was read by the next (where it
    is forbidden), or by the next student of the job (bench/redteam: ce_keyring)."""
    import errno
    import json

    from autograder.hosts import sandbox
    result = zygote.run(KEYRING_SCRIPT.encode(), [], sandbox.Limits(timeout=20, memory_mb=512), name="student.py")
    assert result.status == "ok", result
    found = json.loads(result.data)["result"]
    assert found == {name: [-1, errno.EPERM] for name in ("session", "user", "persistent")}, found


# --------------------------------------------------------------------------- the static scan

def test_scan_does_not_follow_a_local_name_to_a_global_of_the_same_name():
    """An honest cross_entropy(logits, targets), in a notebook whose ViT demo cell binds a
    global ``logits = model(x)``, was rejected as "uses a library softmax": the scan followed
    the parameter ``logits`` to that cell, the model, the ViT and the attention's softmax."""
    from autograder.judging.scan import scan_source
    cells = ["import torch",
             "class Attention:\n    def forward(self, s):\n        return s.softmax(dim=-1)\n"
             "model = Attention()\nlogits = model.forward(torch.randn(2, 3))\n",
             "def cross_entropy(logits, targets):\n"
             "    shifted = logits - logits.amax(dim=-1, keepdim=True)\n"
             "    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))\n"
             "    return -log_probs[torch.arange(logits.shape[0]), targets].mean()\n"]
    assert scan_source(cells, "cross_entropy", ("cross_entropy",)) == []


@pytest.mark.parametrize("answer", [
    "def softmax(x, dim=-1):\n    return sm(x, dim)\n",
    "def softmax(x, dim=-1):\n    global sm\n    return sm(x, dim)\n",
    "def softmax(x, dim=-1, f=sm):\n    return f(x, dim)\n",
    "def softmax(x, dim=-1):\n    def inner(y):\n        return sm(y, dim)\n    return inner(x)\n",
    "softmax = lambda x, dim=-1: sm(x, dim)\n",
    "def softmax(x, dim=-1):\n    return [sm(r, dim) for r in [x]][0]\n",
    "class A:\n    sm = sm\n    def __call__(self, x, dim=-1):\n        return self.sm(x, dim)\nsoftmax = A()\n",
])
def test_scan_still_follows_global_helpers(answer):
    from autograder.judging.scan import scan_source
    cells = ["import torch\nsm = torch.softmax\n", answer]
    assert [h.key for h in scan_source(cells, "softmax", ("softmax",))] == ["softmax"]


WEDGE_SCRIPT = r'''
import os, struct, signal, time
head = b"[" * 100000 + b"]" * 100000          # json.loads raises RecursionError on it
os.write(3, struct.pack(">I", len(head)) + head + struct.pack(">I", 0))
signal.signal(signal.SIGALRM, signal.SIG_IGN)
for _ in range(40):
    try:
        if os.fork() == 0:
            while True:
                time.sleep(1000)
    except OSError:
        break
while True:
    time.sleep(1000)
'''

FORKS_SCRIPT = r'''
import os
pids = []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    pids.append(pid)
RESULT = [os.waitpid(p, 0)[1] for p in pids]
'''


def _processes_of(uid: int) -> list[int]:
    import os
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/status") as fh:
                if any(line.startswith("Uid:") and int(line.split()[1]) == uid for line in fh):
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.slow      # seconds of CPU: make test runs it, the fast loop does not
def test_a_frame_the_zygote_cannot_parse_does_not_leave_the_run_alive(zygote):
    """A header nested too deep made the zygote's watch raise: it stopped watching the run,
    whose processes (the job's student uid) lived on, and every later student of the job got
    "none could be started" (RLIMIT_NPROC) on every question (bench/redteam: aaa_wedge)."""
    import json

    from autograder.hosts import sandbox
    result = zygote.run(WEDGE_SCRIPT.encode(), [], sandbox.Limits(timeout=4, memory_mb=512), name="student.py")
    assert result.status == "timeout", result
    import time
    end = time.monotonic() + 10            # killed with its pid namespace: gone once the kernel reaps them
    while _processes_of(zygote.uid) and time.monotonic() < end:
        time.sleep(0.1)
    assert _processes_of(zygote.uid) == []
    result = zygote.run(FORKS_SCRIPT.encode(), [], sandbox.Limits(timeout=20, memory_mb=512), name="student.py")
    assert result.status == "ok" and json.loads(result.data)["result"] == [0] * 8, result


def test_frames_nested_too_deep_are_dropped():
    import struct

    from autograder.student import wire, zygote
    head = b"[" * 100000 + b"]" * 100000
    data = struct.pack(">I", len(head)) + head + struct.pack(">I", 0)
    assert wire.frames(data) == []
    assert zygote.frame_events(bytearray(data), 0) == (len(data), [("?", None)])
