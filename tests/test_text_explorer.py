"""vitref.text_explorer: the ONNX export of chapter 8's character GPT and the files its page loads.

The browser side (onnxruntime-web in Chromium against the build's vitref outputs, the causal mask drawn,
the keyboard) is tests/test_book.py::test_live_text_explorer_in_chromium.
"""
from __future__ import annotations

import json

import pytest
import torch

from vitref import explorer, text_explorer
from vitref.charlm import CharTokenizer
from vitref.generation import DecoderOnlyLM

TOKENIZER = CharTokenizer("abcdefgh ijklmnop.\n")


def tiny_gpt(seed: int = 0, max_len: int = 24) -> DecoderOnlyLM:
    torch.manual_seed(seed)
    return DecoderOnlyLM(TOKENIZER.vocab_size, max_len=max_len, dim=16, depth=2, num_heads=2, mlp_dim=32).eval()


def test_the_weights_are_the_models_own_and_causal():
    model = tiny_gpt()
    tokens = torch.randint(1, TOKENIZER.vocab_size, (2, 7))                        # (B, T)
    logits, attention = text_explorer.CharExplorerNet(model)(tokens)
    assert attention.shape == (2, 2, 2, 7, 7)                                     # (B, L, h, T, T)
    assert torch.allclose(logits, model(tokens), atol=1e-6)
    assert torch.allclose(attention.sum(-1), torch.ones(2, 2, 2, 7))
    assert (attention.triu(diagonal=1) == 0).all()
    # block 1's weights, applied to its values and projected, give its attention layer's output
    block = model.blocks[0]
    x = model.token_embed(tokens) + model.pos_embed(torch.arange(7))              # (B, T, D)
    values = block.attn.qkv(block.norm1(x)).chunk(3, dim=-1)[2].view(2, 7, 2, 8).transpose(1, 2)   # (B, h, T, d)
    mixed = (attention[:, 0] @ values).transpose(1, 2).reshape(2, 7, 16)           # (B, T, D)
    assert torch.allclose(block.attn.projection(mixed), block.attn(block.norm1(x))[0], atol=1e-5)


def test_onnxruntime_equals_vitref_at_every_length(tmp_path):
    model = tiny_gpt()
    path = text_explorer.export_char_onnx(model, tmp_path / "charlm.onnx")
    for length in (1, 5, 24):                                                     # exported with 8: free
        tokens = torch.randint(1, TOKENIZER.vocab_size, (2, length))
        logits, attention = text_explorer.char_onnx_outputs(path, tokens)
        expected_logits, expected_attention = text_explorer.CharExplorerNet(model)(tokens)
        assert logits.shape == (2, length, TOKENIZER.vocab_size) and attention.shape == (2, 2, 2, length, length)
        assert abs(logits - expected_logits.detach().numpy()).max() < 1e-4
        assert abs(attention - expected_attention.detach().numpy()).max() < 1e-4
    assert max(text_explorer.char_export_difference(model, path, [[1, 2, 3], [4] * 20]).values()) < 1e-4


def test_export_difference_sees_a_model_that_is_not_the_exported_one(tmp_path):
    path = text_explorer.export_char_onnx(tiny_gpt(seed=0), tmp_path / "charlm.onnx")
    difference = text_explorer.char_export_difference(tiny_gpt(seed=1), path, [[1, 2, 3, 4]])
    assert difference["logits"] > 1e-3 and difference["attention"] > 1e-3


def test_published_files_carry_the_vocabulary_and_vitrefs_outputs(tmp_path):
    model = tiny_gpt()
    texts = ["abc de", "hello.\n" * 3]                                             # the second: over 8 tokens
    published = text_explorer.publish_char(tmp_path, model, TOKENIZER, texts)
    assert set(published["sizes"]) == {explorer.CHAR_MODEL_FILE, explorer.CHAR_DATA_FILE}
    assert max(published["difference"].values()) < 1e-4
    data = json.loads((tmp_path / explorer.CHAR_DATA_FILE).read_text())
    assert data["itos"] == TOKENIZER.itos and data["context"] == 24 and (data["depth"], data["heads"]) == (2, 2)
    with torch.no_grad():
        logits = model(TOKENIZER.encode_tensor("abc de")[None])[0, -1]            # (V,)
    logits[TOKENIZER.pad_id] = float("-inf")
    assert data["checks"][0]["top"][0] == logits.argmax().item()
    assert len(data["checks"][0]["attention"]) == 2 * 2 * 6 * 6
    assert data["checks"][1]["text"] == texts[1] and len(data["checks"][1]["attention"]) == 2 * 2 * 21 * 21


def test_a_check_text_longer_than_the_context_is_refused(tmp_path):
    with pytest.raises(ValueError, match="1 to 24 characters"):
        text_explorer.publish_char(tmp_path, tiny_gpt(), TOKENIZER, ["a" * 25])


def test_the_budget_counts_both_explorers_files(tmp_path):
    (tmp_path / explorer.MODEL_FILE).write_bytes(bytes(explorer.MAX_ASSET_BYTES - 1000))   # the ViT's, already there
    with pytest.raises(ValueError, match="more than"):
        text_explorer.publish_char(tmp_path, tiny_gpt(), TOKENIZER, ["abc"])
    assert [p.name for p in tmp_path.iterdir()] == [explorer.MODEL_FILE]


def test_the_page_loads_its_scripts_from_the_site_only():
    html = text_explorer.text_explorer_html()
    assert '<script src="../_static/explorer/common.js">' in html
    assert html.index("common.js") < html.index("text-explorer.js") and 'aria-live="polite"' in html
    with pytest.raises(ValueError, match="site itself"):
        text_explorer.text_explorer_html("//cdn.example.org/text-explorer.js")
