"""vitref.mlm: BERT's masking, 15% of the positions chosen, 80% [MASK], 10% random, 10% kept."""
import pytest
import torch

from vitref.mlm import IGNORE, mask_tokens


def test_masking_shares_and_targets():
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 50, (64, 500), generator=generator)               # 32,000 positions
    inputs, targets = mask_tokens(tokens, vocab_size=50, mask_id=50, generator=generator)
    chosen = targets != IGNORE
    assert torch.equal(targets[chosen], tokens[chosen])                        # the originals, where chosen
    assert torch.equal(inputs[~chosen], tokens[~chosen])                       # untouched elsewhere
    assert abs(chosen.float().mean().item() - 0.15) < 0.01
    masked = (inputs == 50) & chosen
    assert abs(masked.sum().item() / chosen.sum().item() - 0.8) < 0.02
    assert not ((inputs == 50) & ~chosen).any()
    changed_not_masked = chosen & (inputs != 50) & (inputs != tokens)         # random ids (a few equal the original)
    assert 0.07 < changed_not_masked.sum().item() / chosen.sum().item() < 0.11


def test_masking_is_seeded_and_refuses_bad_input():
    tokens = torch.arange(40).reshape(2, 20)
    a = mask_tokens(tokens, 40, 40, generator=torch.Generator().manual_seed(3))
    b = mask_tokens(tokens, 40, 40, generator=torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError, match="integer token ids"):
        mask_tokens(tokens.float(), 40, 40)
    with pytest.raises(ValueError, match=r"rate .* got 1.5"):
        mask_tokens(tokens, 40, 40, rate=1.5)
