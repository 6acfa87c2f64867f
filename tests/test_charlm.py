"""vitref.charlm: the corpus, the character tokenizer, the training loop of the tiny GPT."""
import math

import pytest
import torch
import torch.nn.functional as F

from vitref.charlm import (CharTokenizer, evaluate_loss, perplexity, python_docs_corpus, random_windows,
                          sample_at_temperatures, split, train_char_lm)
from vitref.generation import DecoderOnlyLM, generate


def test_corpus_is_ascii_prose_one_paragraph_per_line():
    text = python_docs_corpus()
    assert len(text) > 100_000
    assert text.isascii() and text.endswith("\n")
    lines = text.splitlines()
    assert not any(line.startswith(" ") or line == "" for line in lines)
    assert not any(set(line) <= set("*=-~^") for line in lines)
    assert 'The "if" statement is used for conditional execution:' in lines


def test_tokenizer_round_trip_and_padding():
    tok = CharTokenizer("hello world\n")
    assert tok.vocab_size == 1 + len(set("hello world\n")) and tok.itos[0] == "<pad>"
    ids = tok.encode("low\n")
    assert 0 not in ids and tok.decode(ids) == "low\n"
    assert tok.decode([0, 0] + ids) == "low\n"                     # padding is dropped
    with pytest.raises(ValueError, match="not in the vocabulary: 'xz'"):
        tok.encode("ox zoo")


def test_windows_are_shifted_by_one():
    data = torch.arange(100)
    inputs, targets = random_windows(data, 8, 10, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (8, 10)
    assert torch.equal(targets[:, :-1], inputs[:, 1:]) and torch.equal(targets, inputs + 1)
    with pytest.raises(ValueError, match="shorter than one window"):
        random_windows(torch.arange(5), 2, 10, torch.Generator())
    train, valid = split(data, 0.9)
    assert len(train) == 90 and torch.equal(torch.cat([train, valid]), data)


def test_evaluate_loss_is_the_mean_cross_entropy():
    torch.manual_seed(0)
    model = DecoderOnlyLM(7, 16, dim=8, depth=1, num_heads=2)
    data = torch.randint(0, 7, (50,))
    context = 8                                                    # 6 windows use tokens 0..48
    logits = model(data[:48].view(6, 8))
    expected = F.cross_entropy(logits.flatten(0, 1), data[1:49])
    assert math.isclose(evaluate_loss(model, data, context, batch_size=4), expected.item(), rel_tol=1e-5)


@pytest.fixture
def one_thread():
    """Tiny models: one thread (a second one only waits, and on a busy machine it waits long)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def test_training_learns_a_repetitive_text_and_generates_it(one_thread):
    text = "abcabcabd\n" * 40
    tok = CharTokenizer(text)
    data = tok.encode_tensor(text)
    torch.manual_seed(0)
    model = DecoderOnlyLM(tok.vocab_size, 32, dim=32, depth=1, num_heads=2)
    before = evaluate_loss(model, data, 16)
    result = train_char_lm(model, data, context=16, batch_size=16, lr=1e-2, max_steps=150, warmup=10)
    after = evaluate_loss(model, data, 16)
    assert result.steps == 150 and len(result.losses) == 150
    assert before > 1.5 and after < 0.3
    out = generate(model, [tok.encode("abcab")], 20, eos_id=tok.stoi["\n"])
    assert tok.decode(out.new_tokens[0]) == "cabd\n"


def test_training_rejects_a_context_longer_than_the_model():
    model = DecoderOnlyLM(5, 8)
    with pytest.raises(ValueError, match="context 16 exceeds the model's maximum sequence length 8"):
        train_char_lm(model, torch.zeros(100, dtype=torch.long), context=16)


def _tiny_run(seed, steps=12):
    """A few steps of the training loop on a tiny corpus; returns the losses and the validation loss."""
    text = "the cat sat on the mat.\nthe dog sat on the log.\n" * 20
    tok = CharTokenizer(text)
    train, valid = split(tok.encode_tensor(text), 0.8)
    torch.manual_seed(seed)
    model = DecoderOnlyLM(tok.vocab_size, 16, dim=16, depth=1, num_heads=2)
    result = train_char_lm(model, train, context=16, batch_size=8, lr=1e-2, max_steps=steps, warmup=3, seed=seed)
    return result, evaluate_loss(model, valid, 16), model, tok


def test_a_budget_in_steps_with_a_seed_gives_identical_losses(one_thread):
    first, first_valid, _, _ = _tiny_run(seed=3)
    second, second_valid, _, _ = _tiny_run(seed=3)
    assert first.steps == second.steps == 12 and len(first.losses) == 12
    assert first.losses == second.losses and first_valid == second_valid        # bit for bit
    other, other_valid, _, _ = _tiny_run(seed=4)
    assert other.losses != first.losses and other_valid != first_valid
    assert first.losses[-1] < first.losses[0]                                       # and it learns


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size():
    torch.manual_seed(0)
    model = DecoderOnlyLM(11, 16, dim=8, depth=1, num_heads=2)
    torch.nn.init.zeros_(model.head.weight)                          # every logit 0: a uniform guess
    loss = evaluate_loss(model, torch.randint(0, 11, (100,)), 16)
    assert math.isclose(loss, math.log(11), rel_tol=1e-6)
    assert math.isclose(perplexity(loss), 11, rel_tol=1e-6)
    assert perplexity(0.0) == 1.0
    with pytest.raises(ValueError, match="a cross-entropy loss is a number >= 0, got -0.5"):
        perplexity(-0.5)


def test_samples_at_temperatures_are_seeded_and_greedy_at_zero(one_thread):
    _, _, model, tok = _tiny_run(seed=0, steps=30)
    samples = sample_at_temperatures(model, tok, "the ", (0.0, 1.0, 5.0), 10, seed=1)
    assert list(samples) == [0.0, 1.0, 5.0]
    assert all(s.startswith("the ") and len(s) == 14 for s in samples.values())     # <pad> is never drawn
    greedy = generate(model, [tok.encode("the ")], 10)
    assert samples[0.0] == "the " + tok.decode(greedy.new_tokens[0])
    assert sample_at_temperatures(model, tok, "the ", (1.0, 5.0), 10, seed=1) == {1.0: samples[1.0], 5.0: samples[5.0]}
    hot = [sample_at_temperatures(model, tok, "the ", (5.0,), 10, seed=s)[5.0] for s in range(4)]
    assert len(set(hot)) > 1                                         # the seed matters when sampling
    stopped = sample_at_temperatures(model, tok, "the ", (0.0,), 10, eos=samples[0.0][4])[0.0]
    assert stopped == samples[0.0][:5]                               # ends at the first eos character
    with pytest.raises(ValueError, match="eos must be one character"):
        sample_at_temperatures(model, tok, "the ", (0.0,), 10, eos="ab")
