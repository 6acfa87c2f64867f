"""Chapters 5 and 6 (blocks, patch embedding) beyond their answer banks (tests/answers/ch05_blocks.py
and ch06_patch_embedding.py, run by tests/test_answer_banks.py): the seeded dropout cases and
the feed-forward block's hidden_dim."""
import pytest

import autograder
from answers import solutions as S
from answers.bank import load

pytestmark = pytest.mark.usefixtures("one_thread")


def test_dropout_masks_are_reproduced_for_correct_variants():
    """The seeded p = 0.5 cases hold for nn.Dropout, F.dropout and one shared nn.Dropout alike
    (the q7 and q7b banks' right answers, which test_answer_banks checks)."""
    q7b = autograder.question("q7b")
    seeded = [c for c in q7b.cases if c.params.get("train") and 0 < c.params.get("drop_p", 0) < 1]
    assert seeded and all(c.params["drop_p"] != c.params["forward_drop_p"] for c in seeded)
    banks = load()
    assert {"FFNInplaceDropout"} <= {a.__name__ for a in banks["q7"].right}
    assert {"BlockFunctionalDropout"} <= {a.__name__ for a in banks["q7b"].right}


def test_the_feed_forward_block_takes_hidden_dim():
    """q7 builds FeedForwardBlock(E, hidden_dim=H) with H no multiple of E (vitref's signature, which
    chapters 7 and 8 call as FeedForwardBlock(dim, hidden_dim=mlp_dim)); the solution (which
    test_answer_banks checks) builds that width."""
    cases = [c for c in autograder.question("q7").cases if "hidden_dim" in c.params]
    assert cases and all(c.params["hidden_dim"] % c.params["E"] for c in cases)
    assert S.FeedForwardBlock(6, hidden_dim=10)[0].out_features == 10
