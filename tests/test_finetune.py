"""vitref.finetune: position-table resampling (against timm), resizing a ViT, short training runs."""
import pytest
import torch
from timm.layers import resample_abs_pos_embed

import vitref
from vitref.finetune import resample_positions, resize_images, resize_vit, train_steps

INFO = dict(mean=(0.5,), std=(0.25,))


def small_vit(img_size=28, **kw):
    torch.manual_seed(0)
    return vitref.ViT(img_size=img_size, patch_size=7, in_channels=1, num_classes=10, dim=32, depth=2,
                      num_heads=4, mlp_dim=64, **kw)


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
@pytest.mark.parametrize("old,new", [(4, 6), (4, 5), (6, 4), (3, 7)])
def test_resample_matches_timm(old, new, mode):
    torch.manual_seed(0)
    table = torch.randn(1, 1 + old * old, 16)
    ours = resample_positions(table, new, mode=mode)
    theirs = resample_abs_pos_embed(table, [new, new], num_prefix_tokens=1, interpolation=mode, antialias=True)
    assert ours.shape == (1, 1 + new * new, 16)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def test_class_token_row_kept_and_rectangular_grids():
    table = torch.randn(2, 1 + 3 * 4, 8)
    out = resample_positions(table, (6, 2), old_grid=(3, 4))
    assert out.shape == (2, 1 + 12, 8)
    assert torch.equal(out[:, 0], table[:, 0])
    theirs = resample_abs_pos_embed(table[:1], [6, 2], old_size=[3, 4])
    torch.testing.assert_close(out[:1], theirs, rtol=0, atol=1e-6)


def test_constant_and_row_structure_survive_resampling():
    # A table that only depends on the column must still only depend on the column (2-D, not a 1-D stretch).
    cols = torch.arange(4.0)
    grid = cols.repeat(4)[:, None].expand(16, 3)                        # (16, 3): value = column index
    table = torch.cat([torch.full((1, 3), 9.0), grid])[None]            # (1, 17, 3)
    out = resample_positions(table, 6, mode="bilinear")[0, 1:].reshape(6, 6, 3)
    assert torch.allclose(out, out[:1].expand(6, 6, 3))                 # every row the same
    assert (out[0, 1:, 0] >= out[0, :-1, 0]).all()                      # increasing along the columns
    same = resample_positions(table, 4)
    assert same is table


def test_resample_errors():
    with pytest.raises(ValueError, match="square grid"):
        resample_positions(torch.zeros(1, 1 + 15, 4), 5)
    with pytest.raises(ValueError, match="expected a position table"):
        resample_positions(torch.zeros(17, 4), 5)
    with pytest.raises(ValueError, match="unknown mode"):
        resample_positions(torch.zeros(1, 17, 4), 5, mode="area")
    with pytest.raises(ValueError, match="positive"):
        resample_positions(torch.zeros(1, 17, 4), 0)
    with pytest.raises(ValueError, match="old_grid"):
        resample_positions(torch.zeros(1, 17, 4), 5, old_grid=(2, 4))


def test_resize_vit_copies_weights_and_runs_at_new_size():
    model = small_vit().eval()
    bigger = resize_vit(model, 42)
    assert bigger.img_size == 42 and bigger.pos_embed.shape == (1, 37, 32)
    assert not bigger.training
    for (name, p), (name2, q) in zip(model.named_parameters(), bigger.named_parameters()):
        assert name == name2
        if name != "pos_embed":
            assert torch.equal(p, q), name
    torch.testing.assert_close(bigger.pos_embed, resample_positions(model.pos_embed, 6))
    assert bigger(torch.randn(2, 1, 42, 42)).shape == (2, 10)
    back = resize_vit(model, 28)                                          # same grid: same function
    x = torch.randn(2, 1, 28, 28)
    torch.testing.assert_close(back(x), model(x))
    assert model.pos_embed.shape == (1, 17, 32)                           # the original is untouched


def test_resize_vit_errors():
    with pytest.raises(ValueError, match="multiple of the patch size"):
        resize_vit(small_vit(), 30)
    with pytest.raises(TypeError, match="vitref.ViT"):
        resize_vit(torch.nn.Linear(2, 2), 28)


def test_resize_images():
    images = torch.randint(0, 256, (3, 1, 28, 28), dtype=torch.uint8)
    out = resize_images(images, 42)
    assert out.dtype == torch.uint8 and out.shape == (3, 1, 42, 42)
    flat = torch.full((1, 1, 28, 28), 200, dtype=torch.uint8)
    assert (resize_images(flat, 35) == 200).all()
    with pytest.raises(ValueError, match="uint8"):
        resize_images(images.float(), 42)
    with pytest.raises(ValueError, match="positive int"):
        resize_images(images, 0)


@pytest.mark.slow   # a training run
def test_train_steps_learns_and_is_seeded():
    torch.manual_seed(1)
    labels = torch.arange(256) % 2
    images = torch.zeros(256, 1, 28, 28, dtype=torch.uint8)
    images[labels == 1, :, :14] = 255                                    # class 1: bright top half
    losses = train_steps(small_vit(), images, labels, INFO, 30, lr=3e-3, batch_size=64)
    again = train_steps(small_vit(), images, labels, INFO, 30, lr=3e-3, batch_size=64)
    assert len(losses) == 30 and losses == again
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5


@pytest.mark.slow      # seconds of CPU: make test runs it, the fast loop does not
def test_train_steps_uses_the_course_schedule(monkeypatch):
    import vitref.finetune
    from vitref.training import lr_at as real

    seen = []
    monkeypatch.setattr(vitref.finetune, "lr_at", lambda p, c: seen.append((p, c.warmup)) or real(p, c))
    images = torch.zeros(64, 1, 28, 28, dtype=torch.uint8)
    train_steps(small_vit(), images, torch.zeros(64, dtype=torch.long), INFO, 4, warmup=0.5, batch_size=32)
    assert seen == [(0.0, 0.5), (0.25, 0.5), (0.5, 0.5), (0.75, 0.5)]


def test_train_steps_errors():
    images = torch.zeros(8, 1, 28, 28, dtype=torch.uint8)
    labels = torch.zeros(8, dtype=torch.long)
    with pytest.raises(ValueError, match="steps"):
        train_steps(small_vit(), images, labels, INFO, 0)
    with pytest.raises(ValueError, match="batch size"):
        train_steps(small_vit(), images, labels, INFO, 1, batch_size=16)
    with pytest.raises(ValueError, match="warmup"):
        train_steps(small_vit(), images, labels, INFO, 1, batch_size=4, warmup=1.0)
