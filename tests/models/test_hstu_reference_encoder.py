"""suite/models/recsys/hstu.py's HSTUPositionalEncoder, TimestampLayerNormPostprocessor and min_uih_length masking
against MLPerf dlrmv4's reference restated in plain torch on its jagged layout (tests/support/gr_positional.py, with
its sources), float64 on the same weights; the multitask loss weight of the sequence workloads. A negative control
per piece: positions counted from the start, the sqrt(d) scale left out, the PyTorch path's literal time clamp (the
table's width), one timestamp-table row changed; the postprocessor's time features left out or with hours and days
swapped; the contextual token not masked, or masked at another length."""

from __future__ import annotations

import pytest
import torch
from support.gr_dlrm_head import contextual_embeddings
from support.gr_positional import (
    add_timestamp_positional_embeddings,
    contextual_inputs,
    time_features,
    timestamp_layer_norm_postprocessor,
)

from suite.models.recsys import hstu, hstu_blocks

META = {"cardinality": {"user": 9, "item": 20, "rating": 7}, "max_history": 6,
        "contextual_min_uih_length": {"user": 5}}
# 6 position buckets: the longest history's first events (positions 6, 7) are clamped to the last bucket; 40 time
# buckets over an 8-wide table: the PyTorch path's literal clamp (width - 1 = 7) differs from the rows' (40)
CFG = hstu.Config(preset="tiny", num_heads=2, linear_dim=4, qk_dim=3, num_layers=2, num_position_buckets=6,
                  num_time_buckets=40)
LENGTHS = [2, 6, 5, 0]  # an empty history too (its query time 0, as movie_lens.py)
T0 = 881_250_949  # MovieLens-100K's first timestamp (1997-12-04)


def _model(meta: dict = META) -> hstu.HSTU:
    torch.manual_seed(0)
    model = hstu.build(CFG, meta).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return model


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    n = META["max_history"]
    b = len(LENGTHS)
    hist = torch.zeros(b, n, dtype=torch.long)
    times = torch.zeros(b, n, dtype=torch.long)
    for i, length in enumerate(LENGTHS):
        hist[i, n - length :] = torch.randint(1, 20, (length,), generator=g)
        # gaps from seconds to weeks: buckets 0 .. past 40
        gaps = torch.randint(0, 3, (length,), generator=g) * torch.tensor([1, 3_000, 200_000])[
            torch.randint(0, 3, (length,), generator=g)]
        times[i, n - length :] = T0 + 86_400 * i + gaps.cumsum(0)
    return {"user": torch.tensor([1, 5, 8, 2]), "hist_item": hist, "hist_time": times,
            "hist_rating": torch.where(hist > 0, torch.randint(1, 6, hist.shape, generator=g), 0),
            "query_time": times[:, -1].clone(), "cand_item": torch.tensor([3, 11, 19, 7])}


def _inputs(model: hstu.HSTU, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the encoder's input tokens, its output: the first STU layer's input, the candidates' encodings into the
    postprocessor), from our forward."""
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(_m, args) -> None:
            seen.setdefault(name, args[0].clone())
        return hook
    hooks = [model.positional.register_forward_pre_hook(keep("in")),
             model.layers[0].register_forward_pre_hook(keep("out")), model.post.register_forward_pre_hook(keep("post"))]
    with torch.no_grad():
        model(batch)
    for h in hooks:
        h.remove()
    return seen["in"], seen["out"], seen["post"]


def _jagged(padded: torch.Tensor, n_ctx: int = 1) -> torch.Tensor:
    """Our padded [B, n_ctx + max_history + 1, ...] rows -> the reference's jagged [context, history, candidate]."""
    n = META["max_history"]
    return torch.cat([torch.cat([padded[b, :n_ctx], padded[b, n_ctx + n - length : n_ctx + n], padded[b, n_ctx + n:]])
                      for b, length in enumerate(LENGTHS)])


def _reference_encoder(model: hstu.HSTU, batch: dict, x: torch.Tensor, **kw) -> torch.Tensor:
    lengths = torch.tensor([1 + length + 1 for length in LENGTHS])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    b = len(LENGTHS)
    times = torch.cat([torch.zeros(b, 1, dtype=torch.long), batch["hist_time"], batch["query_time"].view(-1, 1)],
                      dim=1)
    pe = model.positional
    return add_timestamp_positional_embeddings(
        _jagged(x), offsets, pe.position_weight.detach(), pe.timestamp_weight.detach(), _jagged(times),
        int(lengths.max()), 1, lengths, torch.ones(b, dtype=torch.long), **kw)


def test_the_positional_encoder_is_the_references():
    """Every valid row of the first STU layer's input equals the reference's encoder on our encoder's input
    (float64, 1e-12); the batch's buckets reach both clamps."""
    model, batch = _model(), _batch()
    x, ours, _ = _inputs(model, batch)
    ref = _reference_encoder(model, batch, x)
    torch.testing.assert_close(_jagged(ours), ref, rtol=0, atol=1e-12)
    buckets = model.positional.buckets(batch["query_time"], batch["hist_time"])[batch["hist_item"] > 0]
    assert buckets.max() == CFG.num_time_buckets and (buckets > CFG.d_model - 1).any() and (buckets == 0).any()
    assert model.positional.positions(1, META["max_history"], 1, x.device).max() == CFG.num_position_buckets - 1


@pytest.mark.parametrize("change", ["positions from the start", "no sqrt(d) scale", "the PyTorch path's time clamp",
                                    "one timestamp row"])
def test_one_encoder_difference_breaks_the_match(change):
    model, batch = _model(), _batch()
    x, ours, _ = _inputs(model, batch)
    kw = {"positions from the start": {"from_end": False}, "no sqrt(d) scale": {"alpha": 1.0},
          "the PyTorch path's time clamp": {"clamp_rows": False}, "one timestamp row": {}}[change]
    if change == "one timestamp row":
        with torch.no_grad():
            model.positional.timestamp_weight[CFG.num_time_buckets] += 0.01
    ref = _reference_encoder(model, batch, x, **kw)
    assert (_jagged(ours) - ref).abs().max() > 1e-8


def test_the_encoder_initialises_as_the_references():
    """Same generator state: the position table, then the timestamp table, uniform(+-sqrt(1 / buckets))."""
    torch.manual_seed(3)
    ours = hstu_blocks.HSTUPositionalEncoder(8192, 2048, 16)
    torch.manual_seed(3)
    pos = torch.empty(8192, 16).uniform_(-(1 / 8192) ** 0.5, (1 / 8192) ** 0.5)
    ts = torch.empty(2049, 16).uniform_(-(1 / 2048) ** 0.5, (1 / 2048) ** 0.5)
    assert torch.equal(ours.position_weight.detach(), pos) and torch.equal(ours.timestamp_weight.detach(), ts)


def _reference_post(model: hstu.HSTU, cand: torch.Tensor, query_time: torch.Tensor, **kw) -> torch.Tensor:
    w = {k: v.detach() for k, v in model.post.state_dict().items()}
    return timestamp_layer_norm_postprocessor(cand, query_time, w, **kw)


def test_the_postprocessor_is_the_references():
    """The candidates' encodings after the postprocessor equal the reference's TimestampLayerNormPostprocessor on
    their query times (float64, 1e-12), and the head's logits follow from them."""
    model, batch = _model(), _batch()
    _, _, cand = _inputs(model, batch)
    seen: list[torch.Tensor] = []
    hook = model.post.register_forward_hook(lambda _m, _a, out: seen.append(out.clone()))
    with torch.no_grad():
        model(batch)
    hook.remove()
    ref = _reference_post(model, cand[:, 0], batch["query_time"])
    torch.testing.assert_close(seen[0][:, 0], ref, rtol=0, atol=1e-12)
    feats = time_features(batch["query_time"], torch.float64)
    assert feats.shape == (4, 4) and feats[1:].std(dim=0).min() > 0.05  # the hours and the days vary


@pytest.mark.parametrize("change", ["no time features", "hours and days swapped", "one combiner weight"])
def test_one_postprocessor_difference_breaks_the_match(change):
    model, batch = _model(), _batch()
    _, _, cand = _inputs(model, batch)
    with torch.no_grad():
        ours = model.post(cand[:, 0], batch["query_time"])
        if change == "no time features":
            ref = _reference_post(model, cand[:, 0], torch.zeros_like(batch["query_time"]))  # phase 0 everywhere
        elif change == "hours and days swapped":
            ref = _reference_post(model, cand[:, 0], batch["query_time"], features=((86400, 7), (3600, 24)))
        else:
            ref = _reference_post(model, cand[:, 0], batch["query_time"])
            model.post.combiner.weight[0, -1] += 0.01
            ours = model.post(cand[:, 0], batch["query_time"])
    assert (ours - ref).abs().max() > 1e-8


def _context(model: hstu.HSTU, batch: dict, min_uih: list[int]) -> torch.Tensor:
    rows = model.tables.lookup("user", batch["user"]).detach().unsqueeze(1)
    seq_lengths = torch.tensor(LENGTHS) + 1  # history + the one candidate
    return contextual_embeddings(contextual_inputs(rows, seq_lengths, min_uih), model.pre.ctx_weight.detach(),
                                 model.pre.ctx_bias.detach())


@pytest.mark.parametrize("min_uih", [5, 20, 0])
def test_min_uih_length_masks_the_contextual_token_as_the_reference(min_uih):
    """The contextual token into the encoder equals the reference's ContextualPreprocessor with
    contextual_feature_to_min_uih_length (its input zeroed where history + candidates < min_uih_length); controls:
    the mask left out, or at another length, break it where it matters."""
    meta = dict(META, contextual_min_uih_length={"user": min_uih})
    model, batch = _model(meta), _batch()
    x, _, _ = _inputs(model, batch)
    ours = x[:, :1]
    torch.testing.assert_close(ours, _context(model, batch, [min_uih]), rtol=0, atol=1e-12)
    for other in {0, 5, 20} - {min_uih}:
        # lengths + 1 = 3, 7, 6, 1: 5 masks rows 0 and 3, 20 every row, 0 none
        assert (ours - _context(model, batch, [other])).abs().max() > 1e-8


def test_the_workloads_min_uih_lengths_are_the_references():
    """configs.py: {"user_id": 20} for MovieLens, 0 for Yambda's uid and crosses (the model's default)."""
    from suite.workloads.recsys import SequentialRecommendation
    assert SequentialRecommendation.CONTEXTUAL_MIN_UIH_LENGTH == {"user": 20}
    assert SequentialRecommendation.CAUSAL_MULTITASK_WEIGHTS == 0.2
    model = hstu.build(CFG, {k: v for k, v in META.items() if k != "contextual_min_uih_length"})
    assert model.min_uih_length == (0,)


def test_the_time_features_survive_a_cast_of_the_model():
    """bf16 cannot hold 86,400 (it reads 86,528): the postprocessor's periods are constants, not buffers a cast
    would round; its time features stay the reference's float32 ones."""
    post = hstu_blocks.TimestampLayerNormPostprocessor(8).to(torch.bfloat16)
    t = torch.tensor([881_250_949, 893_286_638, 1_000_000])
    assert torch.equal(post.time_features(t), time_features(t, torch.float32))
