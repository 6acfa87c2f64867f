"""Which routes compute a forbidden function despite the ban (in-process, like a probe fork)."""
import sys
import torch
import torch.nn.functional as F
from autograder.student.ban import install

key = sys.argv[1] if len(sys.argv) > 1 else "softmax"
install([key])
x = torch.randn(3, 5, dtype=torch.float64)
ref_sm = torch.exp(x - x.max(-1, keepdim=True).values); ref_sm = ref_sm / ref_sm.sum(-1, keepdim=True)

def try_(name, fn, ref):
    try:
        out = fn()
        ok = torch.allclose(out.to(ref.dtype), ref, atol=1e-6)
        print(f"{'HOLE' if ok else 'wrong'}: {name}")
    except Exception as e:
        print(f"blocked: {name}: {type(e).__name__}: {str(e)[:90]}")

if key in ("softmax", "cross_entropy"):
    def sdpa():
        n = x.shape[-1]
        q = torch.ones(*x.shape[:-1], 1, 1, dtype=x.dtype)
        k = x.unsqueeze(-1)                                   # (..., n, 1): scores = x
        v = torch.eye(n, dtype=x.dtype).expand(*x.shape[:-1], n, n)
        return F.scaled_dot_product_attention(q, k.unsqueeze(-3).squeeze(-3).unsqueeze(-3).squeeze(-3), v, scale=1.0).squeeze(-2)
    try_("F.scaled_dot_product_attention as softmax (float64)", sdpa, ref_sm)
    def sdpa32():
        x32 = x.float(); n = x.shape[-1]
        q = torch.ones(*x.shape[:-1], 1, 1); k = x32.unsqueeze(-1); v = torch.eye(n).expand(*x.shape[:-1], n, n)
        return F.scaled_dot_product_attention(q, k, v, scale=1.0).squeeze(-2)
    try_("F.scaled_dot_product_attention as softmax (float32)", sdpa32, ref_sm)
    def mha():
        n = x.shape[-1]
        m = torch.nn.MultiheadAttention(1, 1, bias=False, batch_first=True).double()
        return None
    try_("nested _softmax", lambda: torch.ops.aten._softmax(torch.nested.nested_tensor([x]), -1, False).unbind()[0], ref_sm)
    try_("nested Tensor.softmax", lambda: torch.nested.nested_tensor([x]).softmax(-1).unbind()[0], ref_sm)
    try_("nested jagged softmax", lambda: torch.nested.nested_tensor([x], layout=torch.jagged).softmax(-1).unbind()[0], ref_sm)
    try_("logsumexp", lambda: torch.exp(x - torch.logsumexp(x, -1, keepdim=True)), ref_sm)
    try_("Categorical.logits.exp", lambda: torch.distributions.Categorical(logits=x).logits.exp(), ref_sm)
    try_("Categorical.probs", lambda: torch.distributions.Categorical(logits=x).probs, ref_sm)
    try_("gumbel_softmax", lambda: F.gumbel_softmax(x, tau=1.0), ref_sm)
    try_("special.softmax", lambda: torch.special.softmax(x, -1), ref_sm)
    try_("softmax_backward trick", lambda: torch.ops.aten._log_softmax_backward_data(torch.zeros_like(x), x, -1, x.dtype), ref_sm)
    def lsm_bw():
        # _log_softmax_backward_data(grad, output, dim) = grad - exp(output) * grad.sum(dim)
        ls = x - torch.logsumexp(x, -1, keepdim=True)
        g = torch.zeros_like(x); g[..., 0] = -1.0
        r = torch.ops.aten._log_softmax_backward_data(g, ls, -1, x.dtype)
        return r - g
    try_("_log_softmax_backward_data", lsm_bw, ref_sm)
    try_("sparse.softmax", lambda: torch.sparse.softmax(x.to_sparse(), -1).to_dense(), ref_sm)
    try_("sparse csr softmax", lambda: torch.sparse.softmax(x.to_sparse_csr(), -1).to_dense(), ref_sm)
    try_("masked.softmax", lambda: torch.masked.softmax(x, -1), ref_sm)
    try_("vmap softmax", lambda: torch.func.vmap(lambda r: r.softmax(0))(x), ref_sm)
    try_("scipy", lambda: torch.from_numpy(__import__('scipy.special').special.softmax(x.numpy(), -1)), ref_sm)
    try_("meta+decomp", lambda: torch._decomp.decompositions._softmax(x, -1, False), ref_sm)
    try_("torch.jit.script", lambda: torch.jit.script(lambda t: torch.softmax(t, -1))(x), ref_sm)
    try_("nn.Softmax2d", lambda: torch.nn.Softmax2d()(x.unsqueeze(0).unsqueeze(0)), ref_sm)
    try_("MHA module", lambda: None, ref_sm)
    try_("fused _masked_softmax w/ mask", lambda: torch._masked_softmax(x, torch.zeros_like(x, dtype=torch.bool), -1, 0), ref_sm)
    def ce_route():
        # cross-entropy per class with one-hot targets: -log p_j -> p = exp(-loss)
        n = x.shape[-1]
        return torch.stack([torch.exp(-F.cross_entropy(x, torch.full((x.shape[0],), j), reduction='none')) for j in range(n)], -1)
    try_("cross_entropy -> softmax", ce_route, ref_sm)
    def bce():
        return None
    def multi_margin(): return None
    def ctc(): return None
    try_("F.kl_div / poisson nll (not softmax)", lambda: None, ref_sm)
    def nll_nested(): return None
if key == "layer_norm":
    w = torch.randn(5, dtype=torch.float64); b = torch.randn(5, dtype=torch.float64)
    mu = x.mean(-1, keepdim=True); var = x.var(-1, unbiased=False, keepdim=True)
    ref_ln = (x - mu) / torch.sqrt(var + 1e-5) * w + b
    try_("F.layer_norm", lambda: F.layer_norm(x, (5,), w, b), ref_ln)
    try_("_batch_norm_with_update", lambda: torch.ops.aten._batch_norm_with_update(x.reshape(1, 3, 5), None, None, torch.zeros(3, dtype=x.dtype), torch.ones(3, dtype=x.dtype), 0.1, 1e-5)[0].reshape(3, 5) * w + b, ref_ln)
    try_("_native_batch_norm_legit_functional", lambda: torch.ops.aten._native_batch_norm_legit_functional(x.reshape(1, 3, 5), None, None, torch.zeros(3, dtype=x.dtype), torch.ones(3, dtype=x.dtype), True, 0.1, 1e-5)[0].reshape(3, 5) * w + b, ref_ln)
    try_("F.instance_norm", lambda: F.instance_norm(x.reshape(1, 3, 5)).reshape(3, 5) * w + b, ref_ln)
    try_("nested layer_norm", lambda: torch.ops.aten.native_layer_norm(torch.nested.nested_tensor([x]), [5], w, b, 1e-5)[0].unbind()[0], ref_ln)
    try_("nested F.layer_norm", lambda: F.layer_norm(torch.nested.nested_tensor([x]), (5,), w, b).unbind()[0], ref_ln)
    try_("nested group", lambda: None, ref_ln)
    try_("F.local_response_norm", lambda: None, ref_ln)
    try_("batch_norm_elemt/stats", lambda: torch.batch_norm_elemt(x.reshape(1,3,5), None, None, mu.reshape(3), torch.rsqrt(var.reshape(3)+1e-5), 1e-5).reshape(3,5)*w+b, ref_ln)
    try_("native_batch_norm.out", lambda: torch.ops.aten.native_batch_norm.out(x.reshape(1,3,5), None, None, None, None, True, 0.1, 1e-5, out=torch.empty(1,3,5,dtype=x.dtype), save_mean=torch.empty(3,dtype=x.dtype), save_invstd=torch.empty(3,dtype=x.dtype))[0].reshape(3,5)*w+b, ref_ln)
    try_("_native_batch_norm_legit.out", lambda: torch.ops.aten._native_batch_norm_legit.no_stats_out(x.reshape(1,3,5), None, None, True, 0.1, 1e-5, out=torch.empty(1,3,5,dtype=x.dtype), save_mean=torch.empty(3,dtype=x.dtype), save_invstd=torch.empty(3,dtype=x.dtype))[0].reshape(3,5)*w+b, ref_ln)
    try_("F.group_norm", lambda: F.group_norm(x.reshape(3, 1, 5), 1).reshape(3,5)*w+b, ref_ln)
if key == "embedding":
    W = torch.randn(10, 4, dtype=torch.float64); ids = torch.tensor([[1, 2], [3, 9]])
    ref = W[ids]
    try_("indexing W[ids]", lambda: W[ids], ref)
    try_("index_select", lambda: W.index_select(0, ids.flatten()).reshape(2, 2, 4), ref)
    try_("F.embedding", lambda: F.embedding(ids, W), ref)
    try_("nested embedding", lambda: torch.ops.aten.embedding(W, torch.nested.nested_tensor([ids])).unbind()[0], ref)
