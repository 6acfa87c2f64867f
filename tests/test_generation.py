"""vitref.generation: KV cache, padding, sampling, beam search; each against an independent computation."""
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

import vitref
from vitref.generation import (
    BigramLM,
    DecoderOnlyLM,
    KVCache,
    beam_search,
    generate,
    pad_batch,
    positions_from_mask,
    sample_next,
)

V = 13


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one thread (a second one only waits, and on a busy machine it waits long)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def random_lm(depth=2, dim=16, heads=2, max_len=40, std=0.3):
    """A DecoderOnlyLM with large random weights (float64), so every mistake shows in the logits."""
    model = DecoderOnlyLM(V, max_len, dim=dim, depth=depth, num_heads=heads).double()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std)
    return model.eval()


def reference_logits(model, tokens):
    """Logits (T, V) of ONE unpadded sequence (T,), written from the model's weights with plain
    torch ops (PyTorch's own causal attention, no mask arithmetic, no cache)."""
    T = len(tokens)
    x = model.token_embed.weight[tokens] + model.pos_embed.weight[:T]                  # (T, D)
    for block in model.blocks:
        attn = block.attn
        h = F.layer_norm(x, (x.shape[-1],), block.norm1.weight, block.norm1.bias)
        q, k, v = (h @ attn.qkv.weight.T + attn.qkv.bias).chunk(3, dim=-1)            # (T, D) each
        heads = [t.view(T, attn.num_heads, -1).transpose(0, 1) for t in (q, k, v)]    # (h, T, d) each
        out = F.scaled_dot_product_attention(*heads, is_causal=True)
        out = out.transpose(0, 1).reshape(T, -1) @ attn.projection.weight.T + attn.projection.bias
        x = x + out
        h = F.layer_norm(x, (x.shape[-1],), block.norm2.weight, block.norm2.bias)
        first, _, _, second = block.mlp
        x = x + F.linear(F.gelu(F.linear(h, first.weight, first.bias)), second.weight, second.bias)
    x = F.layer_norm(x, (x.shape[-1],), model.norm.weight, model.norm.bias)
    return x @ model.head.weight.T + model.head.bias                                    # (T, V)


PROMPTS = [[1, 2, 3, 4, 5, 6], [7, 8], [9, 10, 11, 12]]


def test_full_forward_matches_the_reference():
    model = random_lm()
    seq = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    torch.testing.assert_close(model(seq[None])[0], reference_logits(model, seq))


@pytest.mark.parametrize("chunks", [[1] * 11, [6, 1, 1, 1, 1, 1], [6, 3, 2], [11]])
def test_cached_left_padded_batch_gives_each_sequence_its_own_logits(chunks):
    """Feed a left-padded batch in chunks through the cache; every real position must get the
    logits of its sequence computed alone, from scratch, by the reference."""
    model = random_lm()
    tokens, mask = pad_batch(PROMPTS, pad_id=0)                                          # (3, 6)
    extra = torch.randint(1, V, (3, 5), generator=torch.Generator().manual_seed(1))
    tokens = torch.cat([tokens, extra], dim=1)                                          # (3, 11)
    mask = torch.cat([mask, torch.ones(3, 5, dtype=torch.bool)], dim=1)
    cache, pieces, start = model.new_cache(), [], 0
    for size in chunks:
        stop = start + size
        pieces.append(model(tokens[:, start:stop], attention_mask=mask[:, :stop], cache=cache))
        start = stop
    logits = torch.cat(pieces, dim=1)                                                   # (3, 11, V)
    assert len(cache) == 11
    for row in range(3):
        real = tokens[row][mask[row]]
        torch.testing.assert_close(logits[row][mask[row]], reference_logits(model, real))
    assert torch.isfinite(logits).all()          # padded queries see nothing: zeros, not NaN


def test_cache_equals_recomputing_the_prefix_without_padding():
    model = random_lm(depth=3)
    seq = torch.randint(1, V, (2, 9))
    full = model(seq)
    cache = model.new_cache()
    steps = [model(seq[:, t:t + 1], cache=cache) for t in range(9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert cache.keys[0].shape == (2, 2, 9, 8)       # (B, h, L, d)


def test_padding_needs_both_the_mask_and_the_positions():
    model = random_lm()
    tokens, mask = pad_batch(PROMPTS, pad_id=0)
    alone = reference_logits(model, torch.tensor(PROMPTS[1]))[-1]                       # row 1: 4 pads
    right = model(tokens, attention_mask=mask)[1, -1]
    torch.testing.assert_close(right, alone)
    no_positions = model(tokens, attention_mask=mask, position_ids=torch.arange(6).expand(3, 6))[1, -1]
    no_mask = model(tokens)[1, -1]
    assert (no_positions - alone).abs().max() > 1e-3
    assert (no_mask - alone).abs().max() > 1e-3


def test_positions_from_mask():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    assert positions_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 0, 0, 0]]


def test_pad_batch_left_and_right():
    tokens, mask = pad_batch([[5, 6, 7], [8]], pad_id=0)
    assert tokens.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[True] * 3, [False, False, True]]
    tokens, mask = pad_batch([[5, 6, 7], [8]], pad_id=0, side="right")
    assert tokens.tolist() == [[5, 6, 7], [8, 0, 0]] and mask.tolist() == [[True] * 3, [True, False, False]]


# ---------------------------------------------------------------- generate

def greedy_alone(model, prompt, n, eos_id=None):
    """Greedy continuation of one prompt by recomputing the reference logits at every step."""
    seq = list(prompt)
    for _ in range(n):
        nxt = int(reference_logits(model, torch.tensor(seq))[-1].argmax())
        seq.append(nxt)
        if nxt == eos_id:
            break
    return seq[len(prompt):]


def test_batched_cached_greedy_equals_each_prompt_alone():
    model = random_lm(max_len=30)
    expected = [greedy_alone(model, p, 12) for p in PROMPTS]
    for use_cache in (True, False):
        result = generate(model, PROMPTS, 12, use_cache=use_cache)
        assert result.new_tokens == expected
        assert result.steps == 12 and result.tokens.shape == (3, 6 + 12)


def test_generation_stops_when_every_row_has_emitted_eos():
    # deterministic chain 1 -> 2 -> 3 -> 4 -> 5 -> 6(EOS); 6 -> 6
    probs = torch.zeros(8, 8)
    for a in range(1, 6):
        probs[a, a + 1] = 1.0
    probs[6, 6] = probs[0, 1] = probs[7, 7] = 1.0
    model = BigramLM.from_probs(probs)
    result = generate(model, [[1], [4], [3, 4, 5]], max_new_tokens=20, eos_id=6, pad_id=0)
    assert result.new_tokens == [[2, 3, 4, 5, 6], [5, 6], [6]]
    assert result.steps == 5                                   # the longest row needs 5 tokens, not 20
    # finished rows are padded, and the padding is masked
    assert result.tokens[2, -5:].tolist() == [6, 0, 0, 0, 0]
    assert result.attention_mask[2, -5:].tolist() == [True, False, False, False, False]


def test_prompt_too_long_is_a_clear_error():
    model = random_lm(max_len=32)
    with pytest.raises(ValueError, match="prompt length 40 exceeds the model's maximum sequence length 32"):
        generate(model, [[1] * 40], 1)
    with pytest.raises(ValueError, match=r"prompt length 30 \+ max_new_tokens 5 = 35 exceeds"):
        generate(model, [[1] * 30], 5)
    with pytest.raises(ValueError, match="exceeds the model's maximum sequence length 32"):
        model(torch.ones(1, 33, dtype=torch.long))
    cache = model.new_cache()
    model(torch.ones(1, 30, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="30 cached \\+ 3 new = 33"):
        model(torch.ones(1, 3, dtype=torch.long), cache=cache)


def test_bad_inputs_are_clear_errors():
    model = random_lm()
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 12\]"):
        model(torch.tensor([[1, 13]]))
    with pytest.raises(TypeError, match="integer token ids"):
        model(torch.ones(1, 3))
    with pytest.raises(ValueError, match="attention_mask must have shape"):
        model(torch.ones(2, 3, dtype=torch.long), attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="at least one token"):
        pad_batch([[1], []], 0)
    with pytest.raises(ValueError, match="side must be"):
        pad_batch([[1]], 0, side="middle")
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        sample_next(torch.zeros(1, 3), temperature=-1)
    with pytest.raises(ValueError, match="top_k must be"):
        sample_next(torch.zeros(1, 3), top_k=0)
    with pytest.raises(ValueError, match="num_beams must be >= 1"):
        beam_search(model, [1], 0, 3)
    cache = model.new_cache()
    model(torch.ones(2, 3, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match=r"cached keys \(2, 2, 3, 8\) do not fit the new keys \(B, h, T, d\) = "
                                         r"\(3, 2, 1, 8\)"):
        model(torch.ones(3, 1, dtype=torch.long), cache=cache)


# ---------------------------------------------------------------- the attention layer and KVCache

# DecoderOnlyLM(13, 40, dim=16, depth=2, num_heads=2)'s parameters as named before its attention
# became vitref.CachedSelfAttention (it was generation.CausalSelfAttention): checkpoints keep loading.
NAMES_BEFORE_THE_MERGE = {
    "token_embed.weight": (13, 16), "pos_embed.weight": (40, 16),
    **{f"blocks.{i}.{name}": shape for i in range(2) for name, shape in {
        "norm1.weight": (16,), "norm1.bias": (16,),
        "attn.qkv.weight": (48, 16), "attn.qkv.bias": (48,),
        "attn.projection.weight": (16, 16), "attn.projection.bias": (16,),
        "norm2.weight": (16,), "norm2.bias": (16,),
        "mlp.0.weight": (64, 16), "mlp.0.bias": (64,), "mlp.3.weight": (16, 64), "mlp.3.bias": (16,),
    }.items()},
    "norm.weight": (16,), "norm.bias": (16,), "head.weight": (13, 16), "head.bias": (13,),
}


def test_a_state_dict_from_before_the_merge_still_loads():
    g = torch.Generator().manual_seed(0)
    old = {name: torch.randn(shape, generator=g, dtype=torch.float64) * 0.3
           for name, shape in NAMES_BEFORE_THE_MERGE.items()}
    model = DecoderOnlyLM(V, 40, dim=16, depth=2, num_heads=2).double().eval()
    model.load_state_dict(old, strict=True)
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == NAMES_BEFORE_THE_MERGE
    seq = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    torch.testing.assert_close(model(seq[None])[0], reference_logits(model, seq))


def test_the_model_attends_with_the_exercise_class():
    model = random_lm()
    assert all(type(block.attn) is vitref.CachedSelfAttention for block in model.blocks)
    assert not hasattr(vitref.generation, "CausalSelfAttention")


def test_key_mask_hides_padding_and_a_query_that_sees_nothing_gets_zeros():
    torch.manual_seed(0)
    attn = vitref.CachedSelfAttention(8, 2).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    key_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])          # row 0: two pads on the left
    out, (k, v) = attn(x, key_mask=key_mask)
    assert k.shape == v.shape == (2, 2, 5, 4)                          # (B, h, T, d)
    assert torch.isfinite(out).all()
    # pads see nothing: zero attention, so the output is the projection's bias
    torch.testing.assert_close(out[0, :2], attn.projection.bias.expand(2, 8))
    # the real tokens of row 0 get the outputs of the row without its pads, and an all-real mask changes nothing
    torch.testing.assert_close(out[0, 2:], attn(x[:1, 2:])[0][0])
    torch.testing.assert_close(out[1], attn(x[1:])[0][0])
    # with a cache, the mask covers the cached and the new tokens
    _, cache = attn(x[:, :3], key_mask=key_mask[:, :3])
    step, _ = attn(x[:, 3:], cache, key_mask=key_mask)
    torch.testing.assert_close(step, out[:, 3:])


def test_attention_bad_inputs_name_the_shapes():
    attn = vitref.CachedSelfAttention(8, 2)
    x = torch.zeros(2, 3, 8)
    with pytest.raises(ValueError, match=r"expected last dimension E = 8"):
        attn(torch.zeros(2, 3, 6))
    with pytest.raises(ValueError, match=r"expected a tensor of shape \(B, T, E\)"):
        attn(torch.zeros(3, 8))
    with pytest.raises(ValueError, match=r"key_mask must have shape \(B, S\+T\) = \(2, 5\): one entry per token, "
                                         r"2 cached \+ 3 new; got \(2, 3\)"):
        attn(x, (torch.zeros(2, 2, 2, 4), torch.zeros(2, 2, 2, 4)), key_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"cached values \(2, 2, 2, 3\) do not fit"):
        attn(x, (torch.zeros(2, 2, 2, 4), torch.zeros(2, 2, 2, 3)))
    with pytest.raises(TypeError, match="a pair \\(keys, values\\)"):
        attn(x, torch.zeros(2, 2, 2, 4))


def test_kv_cache_stores_what_each_layer_returns_and_reorders_rows():
    cache = KVCache(2)
    assert len(cache) == 0 and cache.layer(1) is None and cache.keys == (None, None) and cache.num_bytes() == 0
    k, v = torch.arange(24.).view(3, 2, 1, 4), -torch.arange(24.).view(3, 2, 1, 4)   # (B, h, L, d)
    cache.store(0, (k, v))
    cache.store(1, (k + 1, v - 1))
    assert len(cache) == 1 and cache.layer_length(1) == 1 and cache.num_bytes() == 4 * 24 * 4
    cache.reorder(torch.tensor([2, 2, 0]))
    assert torch.equal(cache.layer(0)[0], k[[2, 2, 0]]) and torch.equal(cache.values[1], (v - 1)[[2, 2, 0]])
    with pytest.raises(ValueError, match="layer 2 out of range: the cache has 2 layers"):
        cache.layer(2)
    with pytest.raises(ValueError, match=r"keys \(3, 2, 1, 4\) and values \(3, 2, 2, 4\) must be \(B, h, L, d\)"):
        cache.store(0, (k, torch.zeros(3, 2, 2, 4)))
    with pytest.raises(TypeError, match="a pair"):
        cache.store(0, k)


# ---------------------------------------------------------------- sampling

def test_temperature_zero_and_top_k_one_are_greedy():
    logits = torch.randn(50, V)
    assert torch.equal(sample_next(logits, temperature=0), logits.argmax(-1))
    assert torch.equal(sample_next(logits, temperature=1.5, top_k=1), logits.argmax(-1))


@pytest.mark.parametrize("temperature, top_k", [(1.0, None), (0.5, None), (2.0, None), (1.0, 3)])
def test_sampling_frequencies_match_the_tempered_distribution(temperature, top_k):
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])
    n = 40_000
    draws = sample_next(logits.expand(n, 5), temperature, top_k, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5).double() / n
    # expected, computed by hand from the definition
    weights = [math.exp(v / temperature) for v in logits.tolist()]
    if top_k is not None:
        weights = [w if i < top_k else 0.0 for i, w in enumerate(weights)]   # logits are sorted
    expected = torch.tensor(weights, dtype=torch.float64) / sum(weights)
    assert (freq - expected).abs().max() < 0.01                 # 4 standard errors at n = 40,000
    if top_k is not None:
        assert freq[top_k:].sum() == 0


# ---------------------------------------------------------------- beam search

BOS, A, B, C, D, E, EOS = range(7)


def greedy_trap():
    """BOS -> A (0.6) or B (0.4); A -> C (0.34), D or E (0.33 each); B -> C (0.9) or D (0.1);
    C, D, E -> EOS.

    Greedy takes A (0.6), then C: 0.6 * 0.34 = 0.204. The best sequence is B C EOS:
    0.4 * 0.9 = 0.36.
    """
    probs = torch.zeros(7, 7, dtype=torch.float64)
    probs[BOS, A], probs[BOS, B] = 0.6, 0.4
    probs[A, C], probs[A, D], probs[A, E] = 0.34, 0.33, 0.33
    probs[B, C], probs[B, D] = 0.9, 0.1
    probs[[C, D, E], EOS] = 1.0
    probs[EOS, EOS] = 1.0
    return BigramLM.from_probs(probs)


def test_beam_search_beats_greedy_where_greedy_is_provably_suboptimal():
    model = greedy_trap()
    greedy = generate(model, [[BOS]], 5, eos_id=EOS).new_tokens[0]
    assert greedy == [A, C, EOS] and math.isclose(math.exp(model.sequence_log_prob([BOS] + greedy)), 0.204)
    assert beam_search(model, [BOS], 1, 5, eos_id=EOS)[0].tokens == greedy      # width 1 = greedy
    best = beam_search(model, [BOS], 2, 5, eos_id=EOS)[0]
    assert best.tokens == [B, C, EOS]
    assert math.isclose(math.exp(best.log_prob), 0.36)


def exhaustive_best(model, prompt, length, eos_id):
    """The most likely continuation of at most ``length`` tokens, by enumerating all of them."""
    best, best_lp = None, -math.inf
    for seq in itertools.product(range(model.vocab_size), repeat=length):
        seq = list(seq)
        if eos_id in seq:
            seq = seq[: seq.index(eos_id) + 1]
        lp = model.sequence_log_prob(list(prompt) + seq)
        if lp > best_lp + 1e-12:
            best, best_lp = seq, lp
    return best, best_lp


@pytest.mark.parametrize("seed", range(5))
def test_wide_beam_search_finds_the_exhaustive_optimum(seed):
    g = torch.Generator().manual_seed(seed)
    model = BigramLM(torch.randn(5, 5, generator=g) * 2)
    length = 4
    expected, expected_lp = exhaustive_best(model, [0], length, eos_id=4)
    best = beam_search(model, [0], 5 ** (length - 1), length, eos_id=4)[0]
    assert best.tokens == expected
    assert math.isclose(best.log_prob, expected_lp, rel_tol=1e-9)
    # the hypotheses come best first, and their scores are the true sequence log-probabilities
    hyps = beam_search(model, [0], 4, length, eos_id=4)
    assert [h.log_prob for h in hyps] == sorted((h.log_prob for h in hyps), reverse=True)
    for h in hyps:
        assert math.isclose(h.log_prob, model.sequence_log_prob([0] + h.tokens), rel_tol=1e-9)


def test_beam_search_with_cache_equals_without_cache_on_a_transformer():
    model = random_lm(max_len=20)
    with_cache = beam_search(model, [1, 2, 3], 4, 6, eos_id=5)
    without = beam_search(model, [1, 2, 3], 4, 6, eos_id=5, use_cache=False)
    assert [h.tokens for h in with_cache] == [h.tokens for h in without]
    for a, b in zip(with_cache, without):
        assert math.isclose(a.log_prob, b.log_prob, rel_tol=1e-9, abs_tol=1e-9)
    # each score is the log-probability the reference model gives that continuation
    for h in with_cache:
        seq = torch.tensor([1, 2, 3] + h.tokens)
        log_probs = torch.log_softmax(reference_logits(model, seq), dim=-1)
        lp = sum(log_probs[t - 1, seq[t]].item() for t in range(3, len(seq)))
        assert math.isclose(h.log_prob, lp, rel_tol=1e-7)
