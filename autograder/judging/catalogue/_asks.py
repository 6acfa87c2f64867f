"""The first step of the feedback for the mistakes several questions share, by key: a question that
points at the cause without giving the fix (a ``Mistake`` whose own ``ask`` is empty gets its key's
here, :func:`autograder.judging.catalogue._entry.add`; one without either asks about its title).
Data only: the lowest module of the catalogue with ``_entry``.
"""
from __future__ import annotations

ASKS = {
    # attention
    "no_scaling": "Your scores grow with the length of the vectors in each dot product: what keeps them at the "
                  "same scale whatever that length is?",
    "scale_by_emb": "You scale the scores, but by which length: that of one head's vectors, or of all heads "
                    "together?",
    "precedence_half": "Evaluate your scaling expression by hand for d = 16: is it the square root of d?",
    "scale_after_softmax": "After your scaling, do the attention weights of a query still sum to 1? When should the "
                           "scores be scaled?",
    "softmax_over_queries": "Add up the weights of one query over the keys: do they sum to 1? Over which axis is "
                            "your softmax?",
    "mask_ignored": "With a mask given, does your output change at all? Where does the mask reach the scores?",
    "mask_inverted": "Which positions does your code block: those where the mask is 1, or those where it is 0? "
                     "Which does the exercise mean by 1?",
    "mask_after_softmax": "After your masking, do the weights of a query still sum to 1? When should blocked scores "
                          "be set?",
    "fill_zero": "What weight does the softmax give a score of 0: is a blocked position really blocked?",
    "nan_fully_masked": "What does the softmax of a row whose scores are all -inf give, for a query that may see "
                        "no position at all?",
    "no_projection": "After the heads are merged, what mixes the information of the different heads?",
    "merge_d_h": "Once the heads are merged, are head 0's features the first d numbers of each token?",
    "reshape_without_permute": "Before the reshape, which axes sit next to each other, and does the reshape keep a "
                               "token's heads together?",
    "weights_averaged": "What should the returned weights hold: each head's own, or one summary of them?",
    "keys_from_decoder": "In cross-attention, where do the keys and values come from: the decoder's tokens or the "
                         "encoder's output?",
    "no_causal_mask": "With self_mask='causal', may token t look at token t + 1? What stops it in your code?",
    "no_bias": "Which of your layers was built differently from the exercise's layers (look at their arguments)?",
    "no_keepdim": "What shape do your max and sum have, and how does it line up with the tensor you subtract it "
                  "from?",
    # blocks
    "no_dropout": "With the dropout probability at 1.0 in training mode, does your output change? Where is the "
                  "dropout the exercise asks for?",
    "dropout_always_on": "After module.eval(), does your dropout still drop? What tells it the module's mode?",
    "post_ln": "Where does your LayerNorm sit: before the sub-layer, or after the residual sum?",
    "no_residual": "Does your block add each sub-layer's input back to its output?",
    "ffn_first": "In which order do the tokens meet the attention and the feed-forward block?",
    # patches and tokens
    "column_order": "In which order do you number the patches: row by row, like reading, or column by column?",
    "channels_first": "Inside one flattened patch, where do the C values of one pixel sit: side by side, or C "
                      "blocks of P*P values?",
    "transposed_patch": "Inside one patch, do you read the pixels row by row or column by column?",
    "interleaved": "Is each of your patches a block of neighbouring pixels, or pixels spread over the image?",
    "unfold_no_permute": "After unfold, which axes does your tensor have, and in which order do you flatten them?",
    "reshape_only": "Does a plain reshape move any axis, or does it read the image in memory order?",
    "in_features_without_channels": "How many numbers does one flattened patch of a C-channel image hold?",
    "linear_swapped": "Which size goes in and which comes out of your linear layer?",
    "cls_not_repeated": "Does every image of the batch get its own copy of the class token?",
    "cls_at_end": "Which token is the class token: the first or the last?",
    "cls_added": "Is the class token an extra token, or is it mixed into the patch tokens?",
    "cls_cat_wrong_dim": "Along which axis do you join the class token: the tokens, or the features?",
    "no_positions": "Where do your tokens learn their positions?",
    "positions_before_cls": "When you add the positions, is the class token already there, and which row does it "
                            "get?",
    "positions_from_one": "Which position does the first row of your table stand for?",
}
