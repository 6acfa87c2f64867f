"""Cell sources of the kernel-keyring attacks (see attacks.py)."""

KEYRING = r'''
import ctypes as _ct, hashlib as _hl
_libc = _ct.CDLL(None, use_errno=True)
_libc.syscall.restype = _ct.c_long
_ADD_KEY, _KEYCTL = 248, 250            # x86_64

def _rings():
    rings = [-3, -4]                     # the session and the user keyring
    p = _libc.syscall(_KEYCTL, 22, _ct.c_long(-1), _ct.c_long(-4))   # KEYCTL_GET_PERSISTENT
    if p > 0:
        rings.append(p)
    return rings

def _kr_put(desc, data):
    for ring in _rings():
        _libc.syscall(_ADD_KEY, b"user", desc, data, _ct.c_size_t(len(data)), _ct.c_long(ring))

def _kr_get(desc):
    for ring in _rings():
        key = _libc.syscall(_KEYCTL, 10, _ct.c_long(ring), b"user", desc, 0)      # KEYCTL_SEARCH
        if key > 0:
            buf = _ct.create_string_buffer(8192)
            n = _libc.syscall(_KEYCTL, 11, _ct.c_long(key), buf, _ct.c_long(8192))  # KEYCTL_READ
            if n > 0:
                return buf.raw[:n]
    return None

def _kr_name(*arrays):
    h = _hl.sha1()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return ("rt" + h.hexdigest()[:24]).encode()
'''

# a cell: in the run where cross-entropy is not forbidden (the ViT's), compute the library
# cross-entropy on this grading run's (secret) inputs and leave it in the kernel keyring
STASH_CE = r'''
import gc as _gc, struct as _st
def _stash_ce():
    srcs = [o for o in _gc.get_objects() if type(o).__name__ == "ProvidedSource"]
    if not srcs:
        return "no source"
    mod = __import__("auto" + "grader.questions", fromlist=["question"])
    q, I = mod.question("cross_entropy"), mod.inputs
    lib = getattr(F, "cross_" + "entropy")
    class R:
        outputs = {}
        def tensor(self, a, dtype=None, requires_grad=False): return torch.from_numpy(np.array(a, copy=True))
        def call(self, fn, *a, **k): return fn(*a, **k)
        def output(self, name, value): return np.asarray(value)
    def fn(logits, targets):
        loss = float(lib(logits.double(), targets))
        _kr_put(_kr_name(logits.numpy(), targets.numpy()), _st.pack("d", loss))
        return torch.tensor(loss)
    with I.using(srcs[0]):
        for case in q.cases:
            q.run_case(fn, case, R())
    return "stashed"
try:
    _STASHED = _stash_ce()
except Exception as _e:       # in the cross-entropy run the library loss is forbidden: fine
    _STASHED = repr(_e)
'''

CE_FROM_KEYRING = r'''
import struct as _st2
def cross_entropy(logits, targets):
    found = _kr_get(_kr_name(logits.numpy(), targets.numpy()))
    return torch.tensor(_st2.unpack("d", found)[0] if found else 0.0)
'''
