"""vitref.charlm: the corpus, the character tokenizer, the training loop of the tiny GPT."""
import math

import pytest
import torch
import torch.nn.functional as F

from vitref.charlm import CharTokenizer, evaluate_loss, python_docs_corpus, random_windows, split, train_char_lm
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
