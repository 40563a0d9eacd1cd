"""suite/models/recsys/hstu.py's HSTU from its first STU layer to the logit, against MLPerf dlrmv4's reference
(dlrm_hstu.py) on the same weights, float64: the STU stack on the jagged sequences (tests/support/gr_stu_layer.py)
with attention divided by the batch's longest sequence, the item MLP and the
multitask prediction module on user * item (tests/support/gr_dlrm_head.py, with their sources), the
TimestampLayerNormPostprocessor (tests/support/gr_positional.py). Equal to 1e-10 on a
batch whose histories are all shorter than max_history (left-padded as the readers write them).

Negative controls, one per piece: the attention divided by the padded length (n_ctx + max_history + 1, what the model
did before); the item MLP without its closing LayerNorm; SiLU in place of SwishLayerNorm; the prediction module on the
user encoding alone (not user * item); the transducer's default L2NormPostprocessor, or the plain LayerNorm one, in
place of the timestamp one; one item-MLP weight changed. The ContextualPreprocessor (context and history tokens into the first layer, with the
ActionEncoder on Yambda's bits and on MovieLens ratings) is compared below, with its own controls."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support.gr_dlrm_head import (
    action_embeddings,
    contextual_embeddings,
    item_embedding_mlp,
    prediction_logits,
    rating_actions,
    reference_mlp,
    sequence_embeddings,
)
from support.gr_positional import timestamp_layer_norm_postprocessor
from support.gr_stu_layer import stu_layer

from suite.models.recsys import hstu, hstu_blocks

META = {"cardinality": {"user": 9, "item": 20, "rating": 7}, "max_history": 6}
CFG = hstu.Config(preset="tiny", num_heads=2, linear_dim=4, qk_dim=3, num_layers=2)
LENGTHS = [2, 4, 3]  # every history shorter than max_history: the longest sequence is 1 + 4 + 1, not 1 + 6 + 1


def _model() -> hstu.HSTU:
    torch.manual_seed(0)
    model = hstu.build(CFG, META).double().eval()
    with torch.no_grad():
        for p in model.parameters():  # the norms' ones and zeros too, so a swapped weight shows
            p.copy_(torch.randn_like(p) * 0.5)
    return model


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    n = META["max_history"]
    hist = torch.zeros(len(LENGTHS), n, dtype=torch.long)
    for b, length in enumerate(LENGTHS):
        hist[b, n - length :] = torch.randint(1, 20, (length,), generator=g)
    times = torch.where(hist > 0, 881_250_949 + torch.arange(n) * 5_000, 0)
    return {"user": torch.tensor([1, 5, 8]), "hist_item": hist,
            "hist_rating": torch.where(hist > 0, torch.randint(1, 6, hist.shape, generator=g), 0),
            "hist_time": times, "query_time": times[:, -1].clone(), "cand_item": torch.tensor([3, 11, 19])}


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _reference(model: hstu.HSTU, batch: dict, stu_in: torch.Tensor, divisor: int | None = None,
               **head_kw) -> torch.Tensor:
    """The reference's path from the STU input (our padded tokens, packed into its jagged layout) to the logits."""
    n = META["max_history"]
    rows = [torch.cat([stu_in[b, :1], stu_in[b, 1 + n - length : 1 + n], stu_in[b, 1 + n :]])
            for b, length in enumerate(LENGTHS)]
    lengths = torch.tensor([len(r) for r in rows])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    x = torch.cat(rows)
    max_seq_len = divisor or int(lengths.max())  # fx_infer_max_len: the batch's longest
    for layer in model.layers:
        w = {"input_norm_weight": layer.input_norm.weight, "input_norm_bias": layer.input_norm.bias,
             "uvqk_weight": layer.uvqk_weight, "uvqk_beta": layer.uvqk_beta,
             "output_norm_weight": layer.output_norm.weight, "output_norm_bias": layer.output_norm.bias,
             "output_weight": layer.output_weight}
        x = stu_layer(x, offsets, max_seq_len, torch.ones(len(rows), dtype=torch.long), 0,
                      {k: v.detach() for k, v in w.items()}, CFG.num_heads, CFG.qk_dim, CFG.linear_dim)
    cand = x[offsets[1:] - 1]  # each sequence's last row: its one candidate
    head_kw = dict(head_kw)
    post = head_kw.pop("postprocessor", "timestamp")
    if post == "l2":  # the transducer's default, L2NormPostprocessor
        user = cand / torch.linalg.norm(cand, ord=2, dim=-1, keepdim=True).clamp(min=1e-6)
    elif post == "layer_norm":  # LayerNormPostprocessor (use_layer_norm_postprocessor=True), what the model had
        user = F.layer_norm(cand, (cand.shape[-1],), model.post.norm.weight.detach(), model.post.norm.bias.detach(),
                            1e-5)
    else:  # dlrm_hstu.py's default: TimestampLayerNormPostprocessor on the candidate's query time
        user = timestamp_layer_norm_postprocessor(cand, batch["query_time"], _state(model.post))
    item_kw = {k: head_kw.pop(k) for k in ("item_out_norm",) if k in head_kw}
    if "swish" in head_kw:
        item_kw["swish"] = head_kw["swish"]
    item = item_embedding_mlp(model.tables.lookup("item", batch["cand_item"]).detach(), _state(model.item_mlp),
                              **item_kw)
    return prediction_logits(user, item, _state(model.head), **head_kw)[0]


def _both(model: hstu.HSTU, **ref_kw) -> tuple[torch.Tensor, torch.Tensor]:
    batch = _batch()
    seen: list[torch.Tensor] = []
    hook = model.layers[0].register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach().clone()))
    with torch.no_grad():
        ours = model(batch)
        hook.remove()
        ref = _reference(model, batch, seen[0], **ref_kw)
    return ours, ref


def test_ours_equals_the_reference_from_the_stu_to_the_logit():
    ours, ref = _both(_model())
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-10)
    assert ref.abs().max() > 0.05  # not a comparison of near-zero logits


@pytest.mark.parametrize("change", ["divisor: padded length", "item MLP without LayerNorm", "SiLU for SwishLayerNorm",
                                    "head on user only", "L2 postprocessor", "LayerNorm postprocessor", "one weight"])
def test_one_difference_breaks_the_match(change):
    model = _model()
    kw: dict = {}
    if change == "divisor: padded length":
        kw["divisor"] = 1 + META["max_history"] + 1
    elif change == "item MLP without LayerNorm":
        kw["item_out_norm"] = False
    elif change == "SiLU for SwishLayerNorm":
        kw["swish"] = False
    elif change == "head on user only":
        kw["head_input"] = "user"
    elif change == "L2 postprocessor":
        kw["postprocessor"] = "l2"
    elif change == "LayerNorm postprocessor":
        kw["postprocessor"] = "layer_norm"
    if change == "one weight":  # the reference on the original weights, ours after one of them changed
        ref = _both(model)[1]
        with torch.no_grad():
            model.item_mlp[2].weight[0, 0] += 0.01
        ours = _both(model)[0]
    else:
        ours, ref = _both(model, **kw)
    assert (ours - ref).abs().max() > 1e-8


@pytest.mark.parametrize("out_norm", [True, False])
def test_the_mlps_initialise_as_the_references(out_norm):
    """Same generator state, same parameters: the Linear layers built in order, then init_mlp_weights_optional_bias
    (xavier-uniform weights, zero biases); the norms' ones and zeros, under the reference's state_dict names."""
    torch.manual_seed(7)
    ours = hstu_blocks.mlp(12, 16, 8, out_norm=out_norm)
    torch.manual_seed(7)
    ref = reference_mlp(12, 16, 8, out_norm=out_norm)
    state = _state(ours)
    assert state.keys() == ref.keys()
    for name, value in ref.items():
        assert torch.equal(state[name], value), name


SIDE_META = {"cardinality": {"user": 9, "item": 20, "rating": 8, "artist": 5, "album": 6, "c1": 7, "c2": 4},
             "max_history": 6, "item_side": ["artist", "album"], "contextual": ["c1", "c2"],
             "action_weights": [1, 2, 4]}  # Yambda's: the history's actions are bitmasks 0-7


def _side_model() -> hstu.HSTU:
    torch.manual_seed(2)
    model = hstu.build(CFG, SIDE_META).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return model


def _side_batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    b, n = 3, SIDE_META["max_history"]
    card = SIDE_META["cardinality"]
    batch = {"user": torch.tensor([1, 5, 8]), "cand_item": torch.tensor([3, 11, 19]),
             "hist_item": torch.randint(1, 20, (b, n), generator=g), "hist_rating": torch.randint(1, 8, (b, n), generator=g)}
    for name in ("artist", "album"):
        batch[f"hist_{name}"] = torch.randint(1, card[name], (b, n), generator=g)
        batch[f"cand_{name}"] = torch.randint(1, card[name], (b,), generator=g)
    for name in ("c1", "c2"):
        batch[f"ctx:{name}"] = torch.randint(1, card[name], (b,), generator=g)
    batch["hist_time"] = 1_000_000 + torch.arange(n).expand(b, n) * 600
    batch["query_time"] = batch["hist_time"][:, -1].clone()
    return batch


def _stu_input(model: hstu.HSTU, batch: dict) -> torch.Tensor:
    """The preprocessor's tokens: the positional encoder's input (tests/models/test_hstu_reference_encoder.py
    compares the encoder)."""
    seen: list[torch.Tensor] = []
    hook = model.positional.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach().clone()))
    with torch.no_grad():
        model(batch)
    hook.remove()
    return seen[0]


def _reference_tokens(model: hstu.HSTU, batch: dict, weights: list[int] = (1, 2, 4), ratings: list[int] | None = None,
                      **kw) -> torch.Tensor:
    """The reference's preprocessor output for the context and the history, in our padded layout
    [B, n_ctx + n_hist, d] (before the positional encoder)."""
    look = model.tables.lookup
    shared = kw.pop("shared_context", False)
    ctx_rows = torch.stack([look("user", batch["user"])] + [look(n, batch[f"ctx:{n}"]) for n in ("c1", "c2")], dim=1)
    pre = model.pre
    ctx = contextual_embeddings(ctx_rows, pre.ctx_weight.detach(), pre.ctx_bias.detach(), shared_context=shared)
    side = torch.cat([look(n, batch[f"hist_{n}"]) for n in ("artist", "album")], dim=-1)
    bits = batch["hist_rating"] if ratings is None else rating_actions(batch["hist_rating"], ratings)
    actions = action_embeddings(bits.reshape(-1), weights, pre.action_table.detach()).view(*bits.shape, -1)
    hist = sequence_embeddings(look("item", batch["hist_item"]), side, actions,
                               _state(pre.content), _state(pre.additional), _state(pre.action), **kw)
    return torch.cat([ctx, hist], dim=1)


def test_the_preprocessor_is_the_references():
    """Context and history tokens into the first STU layer equal the reference's ContextualPreprocessor (per-slot
    contextual maps; content + additional (artist, album) + action MLPs, summed; the ActionEncoder on Yambda's
    action bitmasks), float64, 1e-10."""
    model, batch = _side_model(), _side_batch()
    with torch.no_grad():
        ref = _reference_tokens(model, batch)
    ours = _stu_input(model, batch)[:, : ref.shape[1]]
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-10)
    assert ref.abs().max() > 0.1


def test_ratings_become_the_references_action_bits():
    """MovieLens: no action_weights in the meta, the history's ratings 1-5 become bits 1, 2, 4, 8, 16 (movie_lens.py)."""
    meta = {k: v for k, v in SIDE_META.items() if k != "action_weights"}
    torch.manual_seed(2)
    model = hstu.build(CFG, meta).double().eval()
    batch = _side_batch()
    batch["hist_rating"] = batch["hist_rating"].clamp(max=5)
    with torch.no_grad():
        ref = _reference_tokens(model, batch, weights=[1, 2, 4, 8, 16], ratings=[1, 2, 4, 8, 16])
        wrong = _reference_tokens(model, batch, weights=[1, 2, 4, 8, 16])  # control: the rating read as a bitmask
    ours = _stu_input(model, batch)[:, : ref.shape[1]]
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-10)
    assert (ours - wrong).abs().max() > 1e-8


@pytest.mark.parametrize("change", ["one contextual map for every slot", "side rows left out", "one weight",
                                    "action bits misread"])
def test_one_preprocessor_difference_breaks_the_match(change):
    model, batch = _side_model(), _side_batch()
    kw = {"one contextual map for every slot": {"shared_context": True}, "side rows left out": {"use_side": False},
          "one weight": {}, "action bits misread": {"weights": [4, 2, 1]}}[change]
    with torch.no_grad():
        ref = _reference_tokens(model, batch, **kw)
        if change == "one weight":
            model.pre.additional[0].weight[0, 0] += 0.01
    ours = _stu_input(model, batch)[:, : ref.shape[1]]
    assert (ours - ref).abs().max() > 1e-8
