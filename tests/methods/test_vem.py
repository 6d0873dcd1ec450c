"""VEM: a tiny pretraining run of every variant, hyper-parameter errors, the near-copy weight and which bank the
loss contrasts with, against hand computations (the bank sampler itself: tests/samplers/test_feature_space.py)."""

import math

import pytest
import torch
import torch.nn.functional as F

from probcl.config import ConfigError


@pytest.mark.parametrize(
    "method,args",
    [
        ("vem-langevin", {"base": "simclr"}),
        ("vem-langevin", {"base": "moco"}),
        ("vem-svgd", {"base": "simclr"}),
        ("vem-svgd", {"base": "simclr", "kernel": "linear", "bank_update": "literal"}),
        ("vem-image", {"base": "simclr", "particles": 8, "steps": 2}),
        ("vem-image", {"base": "moco", "particles": 8, "steps": 2}),
    ],
)
def test_tiny_pretraining_writes_a_loadable_checkpoint(tiny_config, method, args):
    import probcl
    from probcl.core.layout import RunPaths
    from probcl.core.metrics_file import read_metrics
    from probcl.tasks.pretrain import pretrain

    bank_args = {} if method == "vem-image" else {"bank_size": 48}
    cfg = tiny_config(
        method,
        run_name=f"{method}-{len(args)}-{args['base']}",
        **{
            "method_args": {**args, **bank_args},
            "train.limit_train_batches": 2 if method == "vem-image" else 10,  # rows every 10 steps
            "train.monitor_every_n_epochs": 0,
        },
    )
    root = pretrain(cfg)
    assert RunPaths(root).last.exists()
    model = probcl.load(root)
    state = model.state_dict()
    if method == "vem-image":
        assert int(state["image_bank.filled"]) == 8 and state["image_bank.particles"].shape == (8, 1, 28, 28)
    else:
        assert int(state["memory.filled"]) == 48  # 32 queries a step, capped at the bank size
        assert torch.allclose(state["memory.bank"].norm(dim=1), torch.ones(48))
        rows = [r for r in read_metrics(root) if "train/bank_query_cos" in r]  # the bank is visible per step
        assert rows and all(-1 <= r["train/bank_query_cos"] <= 1 and r["train/bank_displacement"] >= 0 for r in rows)
    assert ("key_encoder.backbone.features.0.weight" in state) == (args["base"] == "moco")
    images = torch.randint(0, 256, (3, 1, 28, 28), dtype=torch.uint8)
    assert model.embed(images).shape == (3, model.feature_dim)


@pytest.mark.parametrize(
    "args,key",
    [
        ({"bank_temperature": 0.0}, "bank_temperature"),
        ({"base": "byol"}, "base"),
        ({"kernel": "gaussian"}, "kernel"),
        ({"bank_size": 0}, "bank_size"),
    ],
)
def test_invalid_hyper_parameters_name_the_key(tiny_config, args, key):
    from probcl.tasks.pretrain import pretrain

    cfg = tiny_config("vem-svgd", **{"method_args": args})
    with pytest.raises(ConfigError, match=key):
        pretrain(cfg)


def test_near_copy_weight_is_the_softmax_share_of_negatives_above_the_cosine_threshold():
    from probcl.methods.vem import near_copy_weight

    cosines = torch.tensor([[0.95, 0.5, 0.0], [0.2, 0.1, 0.0]])
    t = 0.5
    first = math.exp(0.95 / t) / (math.exp(0.95 / t) + math.exp(0.5 / t) + 1.0)  # only 0.95 is above 0.9
    assert float(near_copy_weight(cosines, t)) == pytest.approx((first + 0.0) / 2, rel=1e-6)


def _hand_info_nce(q, k, negatives, t):
    """Mean over anchors of -log softmax([q.k, q.b_1, ..., q.b_M] / t)[0], with plain lists."""
    total = 0.0
    for qi, ki in zip(q, k):
        logits = [sum(a * b for a, b in zip(qi, ki)) / t] + [sum(a * b for a, b in zip(qi, b)) / t for b in negatives]
        top = max(logits)
        total += -(logits[0] - top - math.log(sum(math.exp(v - top) for v in logits)))
    return total / len(q)


@pytest.mark.parametrize("loss_bank", ["updated", "pre-update"])
def test_the_loss_bank_option_changes_which_bank_vem_langevin_contrasts_with(loss_bank):
    from tests.methods.helpers import build, views

    model = build("vem-langevin", bank_size=6, loss_bank=loss_bank, noise_scale=0.0)
    model.memory.filled.fill_(6)  # a full bank: rows move only by the sampler
    before = model.memory.bank.clone()
    v1, v2 = views()
    loss = model.step(v1, v2, None).loss.item()
    after = model.memory.bank.clone()
    assert not torch.allclose(before, after)  # the sampler moved the bank towards this batch
    with torch.no_grad():
        q = F.normalize(model.projector(model.backbone(v1)), dim=1).tolist()
        k = F.normalize(model.projector(model.backbone(v2)), dim=1).tolist()
    seen = before if loss_bank == "pre-update" else after
    other = after if loss_bank == "pre-update" else before
    t = model.hp.temperature
    assert loss == pytest.approx(_hand_info_nce(q, k, seen.tolist(), t), abs=1e-5)
    assert abs(loss - _hand_info_nce(q, k, other.tolist(), t)) > 1e-3


def test_vem_langevin_defaults_to_the_presets_bank_momentum_zero_and_svgd_keeps_appendix_ds():
    from probcl.config import load_config
    from probcl.core.presets import resolve_config_path
    from probcl.methods.vem import VEMLangevinParams, VEMSVGDParams

    for dataset in ("fashion-mnist", "cifar10", "cifar100"):
        preset = load_config(resolve_config_path(f"{dataset}/vem-langevin")).method_args
        assert preset.get("bank_momentum", VEMLangevinParams().bank_momentum) == 0.0
    assert VEMLangevinParams().bank_momentum == 0.0
    assert VEMSVGDParams().bank_momentum == 0.9
    assert VEMLangevinParams().loss_bank == "updated"  # Alg. 1's order unless asked
