"""What each exercise forbids, as plain data: shared by the ban (:mod:`autograder.student.ban`,
which removes these entry points in the student's process before an answer is probed) and
the grader's static scan of the notebook (:mod:`autograder.judging.scan`).

The keys shared by several questions (softmax, layer_norm, ...) are declared here. A key that
belongs to one new question is declared next to that question, in its chapter module, with
:func:`forbid` (importing :mod:`autograder.questions` registers every chapter, so the table is
complete before the ban or the scan reads it). The feedback text (``what``, ``why``) belongs to
the key: a question that forbids another library call needs its own key with its own message,
never a reused one whose text speaks of another operation."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Forbidden:
    key: str
    what: str                      # how the message names it
    why: str                       # what the exercise wants instead
    attrs: frozenset               # attribute names flagged in the source (torch.softmax -> "softmax")
    aten: tuple = ()               # ATen operators disabled at the dispatcher (every Python alias reaches them)
    python: tuple = ()             # "module:attr.path" Python functions replaced by raisers
    scrub: tuple = ()              # attribute names removed from torch's Python references/decompositions
    also: tuple = ()               # other keys an exercise forbidding this one forbids too (each owns its message)


def expand(keys) -> list[str]:
    """``keys`` and every key their ``also`` names, in order, known keys only: what a
    question's ``forbidden`` means for the ban and the scan."""
    out: list[str] = []
    todo = list(keys)[::-1]
    while todo:
        key = todo.pop()
        if key in out or key not in FORBIDDEN:
            continue
        out.append(key)
        todo.extend(reversed(FORBIDDEN[key].also))
    return out


_SOFTMAX_OPS = ("_softmax", "_softmax.out", "softmax.int", "softmax.int_out", "special_softmax",
                "_masked_softmax", "_masked_softmax.out", "_sparse_softmax", "_sparse_softmax.int",
                "_sparse_softmax.out", "_safe_softmax",
                "_nested_tensor_softmax_with_shape",
                "quantized::softmax")    # another namespace: "namespace::op"
_LOG_SOFTMAX_OPS = ("_log_softmax", "_log_softmax.out", "log_softmax.int", "log_softmax.int_out",
                    "special_log_softmax", "_sparse_log_softmax", "_sparse_log_softmax.int",
                    "_sparse_log_softmax.out")
# the fused attention kernels compute a softmax inside (q = e0, k = x e0, v = I gives softmax(x)):
# wherever a library softmax is forbidden, they are too
_ATTENTION_OPS = ("scaled_dot_product_attention", "_scaled_dot_product_attention_math",
                  "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
                  "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                  "_scaled_dot_product_fused_attention_overrideable", "_fused_sdp_choice",
                  "_scaled_dot_product_attention_math_for_mps", "_flash_attention_forward",
                  "_efficient_attention_forward", "_cudnn_attention_forward",
                  "_native_multi_head_attention", "_native_multi_head_attention.out",
                  "_transformer_encoder_layer_fwd", "_transformer_encoder_layer_fwd.out",
                  "_triton_multi_head_attention", "_triton_scaled_dot_attention",
                  "_flash_attention_forward_no_dropout_inplace")
_SOFTMAX_NAMES = frozenset({"softmax", "log_softmax", "_softmax", "_log_softmax", "Softmax", "LogSoftmax",
                            "softmin", "Softmin", "special_softmax", "special_log_softmax", "gumbel_softmax",
                            "_masked_softmax", "_safe_softmax", "Softmax2d", "_sparse_softmax",
                            "_sparse_log_softmax", "_nested_tensor_softmax_with_shape",
                            "AdaptiveLogSoftmaxWithLoss", "safe_softmax"})
# torch.distributions normalises a Categorical's logits with logits - logits.logsumexp(...): a
# log-softmax; .probs is a softmax, .log_prob(target) a cross-entropy term, .entropy() the rest
_CATEGORICAL = ("torch.distributions.categorical:Categorical.__init__",
                "torch.distributions.one_hot_categorical:OneHotCategorical.__init__",
                "torch.distributions.multinomial:Multinomial.__init__",
                "torch.distributions.relaxed_categorical:ExpRelaxedCategorical.__init__",
                "torch.distributions.relaxed_categorical:RelaxedOneHotCategorical.__init__",
                "torch.distributions.mixture_same_family:MixtureSameFamily.__init__",
                "torch.distributions.utils:logits_to_probs",
                "torch.distributions.utils:probs_to_logits",
                # exp(x - max) / sum in Python: a softmax that never reaches the softmax operator
                "torch.distributions.transforms:SoftmaxTransform._call")

FORBIDDEN: dict[str, Forbidden] = {}


def forbid(*args, **kwargs) -> Forbidden:
    """Declare a forbidden key (the fields of :class:`Forbidden`); a key is declared once."""
    entry = Forbidden(*args, **kwargs)
    if entry.key in FORBIDDEN:
        raise ValueError(f"forbidden key {entry.key!r} is declared twice: give the new one its own key "
                         f"(its message is its own) or reuse {entry.key!r} without declaring it")
    FORBIDDEN[entry.key] = entry
    return entry


forbid(
    "softmax", "a library softmax (torch.softmax, F.softmax, Tensor.softmax, nn.Softmax, log_softmax)",
    "this exercise asks you to write softmax yourself from exp, max and sum",
    attrs=_SOFTMAX_NAMES,
    aten=_SOFTMAX_OPS + _LOG_SOFTMAX_OPS + _ATTENTION_OPS,
    scrub=("softmax", "log_softmax", "_softmax", "_log_softmax", "softmin", "special_softmax",
           "special_log_softmax", "_safe_softmax", "_masked_softmax"),
    also=("categorical",),
)
forbid(
    "attention", "PyTorch's built-in attention (F.scaled_dot_product_attention, nn.MultiheadAttention, "
    "its quantizable and quantized copies in torch.ao, flex_attention, the Transformer layers)",
    "this exercise asks you to compute the attention scores, softmax and weighted sum yourself",
    attrs=frozenset({"scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward",
                     "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
                     "TransformerDecoder", "Transformer", "_scaled_dot_product_attention_math",
                     "_native_multi_head_attention", "_scaled_dot_product_flash_attention_for_cpu",
                     "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                     "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
                     "_scaled_dot_product_attention_math_for_mps", "_triton_multi_head_attention",
                     "_triton_scaled_dot_attention", "_transformer_encoder_layer_fwd",
                     "flex_attention", "flex_attention_hop", "math_attention", "_math_attention_inner",
                     "sdpa_dense", "varlen_attn", "_varlen_attn", "varlen_attn_out", "_varlen_attn_out",
                     "_flash_attention_forward", "_efficient_attention_forward", "_cudnn_attention_forward",
                     "_flash_attention_forward_no_dropout_inplace", "scaled_dot_product_flash_attention_for_cpu",
                     "FlexAttentionHOP", "flex_attention_autograd", "FlexAttentionAutogradOp",
                     "trace_flex_attention", "flex_attention_autocast_cpu", "flex_attention_autocast_cuda",
                     "_flex_attention_autocast_impl", "flex_attention_functionalize",
                     "flex_attention_proxy_torch_dispatch_mode"}),
    aten=_ATTENTION_OPS,
    python=("torch.nn.functional:multi_head_attention_forward",
            "torch.nn.modules.activation:MultiheadAttention.forward",
            "torch.nn.modules.transformer:TransformerEncoderLayer.forward",
            "torch.nn.modules.transformer:TransformerDecoderLayer.forward",
            # torch.ao's quantizable MultiheadAttention is its own Python code (bmm, softmax, bmm)
            "torch.ao.nn.quantizable.modules.activation:MultiheadAttention.forward",
            "torch.ao.nn.quantizable.modules.activation:MultiheadAttention._forward_impl",
            # flex_attention on CPU, eagerly: math_attention (a softmax that the attention key allows)
            "torch._higher_order_ops.flex_attention:math_attention",
            "torch.nn.attention.flex_attention:flex_attention",
            "torch.nn.attention.varlen:varlen_attn"),
    scrub=("scaled_dot_product_attention", "_scaled_dot_product_attention_math",
           "_scaled_dot_product_flash_attention_for_cpu", "multi_head_attention_forward"),
)
forbid(
    "layer_norm", "PyTorch's LayerNorm (nn.LayerNorm, F.layer_norm, RMSNorm, GroupNorm, their torch.ao copies)",
    "this exercise asks you to compute the mean, the variance and the normalisation yourself",
    attrs=frozenset({"LayerNorm", "layer_norm", "native_layer_norm", "RMSNorm", "rms_norm", "_fused_rms_norm",
                     "group_norm", "GroupNorm", "native_group_norm", "_normalize"}),
    aten=("layer_norm", "native_layer_norm", "native_layer_norm.out", "group_norm", "native_group_norm",
          "native_group_norm.out", "rms_norm", "_fused_rms_norm", "native_layer_norm_backward",
          "quantized::layer_norm", "quantized::group_norm"),
    scrub=("layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "rms_norm", "_normalize"),
    also=("batch_norm",),
)
forbid(
    "batch_norm", "PyTorch's batch or instance normalisation (F.batch_norm, nn.BatchNorm1d, F.instance_norm, "
    "nn.InstanceNorm1d...), a layer norm over a reshaped input",
    "this exercise asks you to compute the mean, the variance and the normalisation yourself",
    attrs=frozenset({"batch_norm", "native_batch_norm", "_batch_norm_impl_index", "instance_norm",
                     "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LazyBatchNorm1d",
                     "LazyBatchNorm2d", "LazyBatchNorm3d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
                     "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d", "batch_norm_elemt",
                     "batch_norm_stats", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                     "cudnn_batch_norm", "miopen_batch_norm", "_batch_norm_no_update", "_batch_norm_with_update",
                     "_batch_norm_with_update_functional", "_native_batch_norm_legit_functional",
                     "_native_batch_norm_legit_no_stats", "native_batch_norm_helper",
                     "native_batch_norm_decomposition", "batch_norm_gather_stats",
                     "batch_norm_gather_stats_with_counts", "batch_norm_update_stats", "quantized_batch_norm",
                     "batch_norm_relu", "batch_norm1d_relu", "batch_norm2d_relu", "batch_norm3d_relu"}),
    aten=("batch_norm", "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit.no_stats",
          "_native_batch_norm_legit_no_training", "_batch_norm_impl_index", "instance_norm",
          # batch norm over x.reshape(1, rows, dim) is a layer norm: every batch-norm kernel computes it
          "_batch_norm_with_update", "_batch_norm_with_update_functional", "_batch_norm_no_update",
          "_native_batch_norm_legit_functional", "cudnn_batch_norm", "miopen_batch_norm",
          "batch_norm_elemt", "batch_norm_stats", "batch_norm_gather_stats", "batch_norm_gather_stats_with_counts",
          "batch_norm_update_stats", "quantized_batch_norm", "quantized::batch_norm", "quantized::batch_norm1d",
          "quantized::batch_norm2d", "quantized::batch_norm3d", "quantized::instance_norm",
          "quantized::batch_norm_relu", "quantized::batch_norm1d_relu", "quantized::batch_norm2d_relu",
          "quantized::batch_norm3d_relu"),
)
forbid(
    "cross_entropy", "PyTorch's cross-entropy or log-softmax (F.cross_entropy, nn.CrossEntropyLoss, "
    "F.nll_loss, F.linear_cross_entropy, nn.AdaptiveLogSoftmaxWithLoss, F.log_softmax, a library softmax)",
    "this exercise asks you to write the log-softmax, the pick of the target class and the mean yourself",
    attrs=frozenset({"cross_entropy", "CrossEntropyLoss", "nll_loss", "NLLLoss", "cross_entropy_loss",
                     "nll_loss2d", "NLLLoss2d", "nll_loss_nd", "_nll_loss_nd", "nll_loss_forward",
                     "linear_cross_entropy", "LinearCrossEntropyLoss", "AdaptiveLogSoftmaxWithLoss",
                     "_nll_loss_forward", "nll_loss2d_forward"})
    | _SOFTMAX_NAMES,
    aten=("cross_entropy_loss", "nll_loss", "nll_loss.out", "nll_loss_nd", "nll_loss_forward",
          "nll_loss_forward.output", "nll_loss2d", "nll_loss2d_forward", "nll_loss2d_forward.output")
    + _SOFTMAX_OPS + _LOG_SOFTMAX_OPS + _ATTENTION_OPS,
    python=("torch.nn.functional:linear_cross_entropy",),
    scrub=("cross_entropy", "nll_loss", "nll_loss_forward", "softmax", "log_softmax", "_softmax",
           "_log_softmax", "special_log_softmax", "special_softmax", "_safe_softmax", "_nll_loss_nd"),
    also=("categorical",),
)
forbid(
    "categorical", "torch.distributions' categorical family (Categorical, OneHotCategorical, Multinomial, "
    "RelaxedOneHotCategorical, MixtureSameFamily: they normalise logits with a library log-softmax; "
    ".probs is a softmax, .log_prob a cross-entropy term) or its SoftmaxTransform",
    "this exercise asks you to write that normalisation (exp, max and sum, or the log-softmax) yourself",
    attrs=frozenset({"Categorical", "OneHotCategorical", "OneHotCategoricalStraightThrough", "Multinomial",
                     "RelaxedOneHotCategorical", "ExpRelaxedCategorical", "MixtureSameFamily",
                     "logits_to_probs", "probs_to_logits", "SoftmaxTransform"}),
    python=_CATEGORICAL,
)
forbid(
    "embedding", "PyTorch's embedding lookup (F.embedding, nn.Embedding, their torch.ao copies)",
    "this exercise asks you to do the lookup yourself: a one-hot matrix times W",
    attrs=frozenset({"embedding", "Embedding", "embedding_bag", "EmbeddingBag", "_embedding_bag",
                     "_embedding_bag_forward_only"}),
    aten=("embedding", "embedding.out", "embedding_bag", "embedding_bag.padding_idx", "_embedding_bag",
          "_embedding_bag_forward_only", "quantized::embedding_byte", "quantized::embedding_4bit",
          "quantized::embedding_bag_byte", "quantized::embedding_bag_4bit"),
    scrub=("embedding",),
)
