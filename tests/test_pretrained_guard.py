"""vitref.pretrained's guard for chapter 7's pretrained ViT: it finds weights already on the machine
without any network call, allows a download only in Colab or with VITREF_DOWNLOAD, says how to run the
part otherwise, and loads a local weights file into the from-scratch ViT (all offline, random weights)."""
import sys
import types

import pytest
import torch

from vitref import pretrained

NAME = "vit_tiny_patch16_224"     # small enough for a fast test; the chapter uses vit_base_patch16_224


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """Any download through timm fails the test; torch hub's folder is an empty temporary one."""
    import timm.models._builder as builder

    def refuse(*args, **kwargs):
        raise AssertionError(f"a download was attempted: {args} {kwargs}")

    for fn in ("load_state_dict_from_hf", "load_state_dict_from_url", "download_cached_file"):
        monkeypatch.setattr(builder, fn, refuse, raising=False)
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "torch-hub"))


def fake_hf_cache(cache, timm_model) -> str:
    """Store ``timm_model``'s weights where huggingface_hub keeps a download of NAME's repository."""
    import timm
    from safetensors.torch import save_file

    repo = timm.models.get_pretrained_cfg(NAME).hf_hub_id.partition("@")[0]
    folder = cache / ("models--" + repo.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True)
    path = snapshot / "model.safetensors"
    save_file({k: v.contiguous() for k, v in timm_model.state_dict().items()}, str(path))
    return str(path)


def without_colab(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("VITREF_DOWNLOAD", raising=False)


def test_no_weights_and_no_download_gives_a_sentence_saying_how(monkeypatch, tmp_path, no_network):
    without_colab(monkeypatch)
    assert pretrained.cached_weights(NAME, cache_dir=tmp_path) is None
    assert not pretrained.download_allowed()
    source, sentence = pretrained.availability(NAME, cache_dir=tmp_path)
    assert source is None
    assert NAME in sentence and "Colab" in sentence and "VITREF_DOWNLOAD=1" in sentence


@pytest.mark.parametrize("how", ["colab", "env"])
def test_download_is_allowed_in_colab_or_with_the_variable(monkeypatch, tmp_path, no_network, how):
    without_colab(monkeypatch)
    if how == "colab":
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.setenv("VITREF_DOWNLOAD", "1")
    assert pretrained.download_allowed()
    assert pretrained.availability(NAME, cache_dir=tmp_path)[0] == "download"
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setenv("VITREF_DOWNLOAD", "0")                    # 0 means no
    assert not pretrained.download_allowed()


@pytest.mark.slow   # three ViT-Tiny models at 224 x 224 (seconds on an idle CPU)
def test_cached_weights_are_found_and_loaded_without_network(monkeypatch, tmp_path, no_network):
    import timm

    without_colab(monkeypatch)
    torch.manual_seed(1)
    source_model = timm.create_model(NAME, pretrained=False).eval()      # stands for the real weights
    path = fake_hf_cache(tmp_path, source_model)
    assert pretrained.cached_weights(NAME, cache_dir=tmp_path) == path
    found, sentence = pretrained.availability(NAME, cache_dir=tmp_path)
    assert found == path and path in sentence

    torch.manual_seed(2)                                                 # a different random start
    model, config = pretrained.load_timm_vit(NAME, pretrained=True, weights_file=found)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert torch.allclose(model(x), source_model(x), atol=1e-4)      # the file's weights, not the new start
        torch.manual_seed(2)
        unloaded, _ = pretrained.load_timm_vit(NAME, pretrained=False)
        assert not torch.allclose(unloaded(x), source_model(x), atol=1e-2)
    assert config["input_size"] == (3, 224, 224)


def test_a_torch_hub_checkpoint_is_found(monkeypatch, tmp_path, no_network):
    import dataclasses

    import timm

    cfg = dataclasses.replace(timm.models.get_pretrained_cfg(NAME), hf_hub_id=None,
                              url="https://example.org/weights/vit_tiny.pth")     # weights timm fetches by URL
    monkeypatch.setattr(timm.models, "get_pretrained_cfg", lambda name: cfg)
    assert pretrained.cached_weights(NAME, cache_dir=tmp_path) is None
    checkpoint = tmp_path / "torch-hub" / "checkpoints" / "vit_tiny.pth"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"")
    assert pretrained.cached_weights(NAME, cache_dir=tmp_path) == str(checkpoint)


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="no pretrained weights named"):
        pretrained.cached_weights("no_such_vit")
