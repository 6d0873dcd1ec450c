"""MoCo v2, BYOL and SimSiam: losses against plain re-implementations of the papers' equations,
MoCo's queue order, the EMA updates and BYOL's cosine ramp against hand-computed values,
the collapse watch, and a short pretraining run of each read back by `probcl evaluate`."""

import math
import warnings

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from probcl.config import ConfigError, from_dict
from probcl.losses.negative_cosine import simsiam_loss
from probcl.losses.normalized_mse import byol_loss
from probcl.methods import METHODS
from probcl.methods.byol import BYOLParams
from probcl.methods.collapse import CollapseWatch, embedding_std
from probcl.methods.moco import MoCoParams
from probcl.methods.simsiam import SimSiamParams
from probcl.tasks.evaluate import EvaluateSettings, evaluate_run
from probcl.tasks.pretrain import pretrain

DATA_INFO = dict(dataset="digits", channels=1, image_size=12, num_classes=None, mean=[0.5], std=[0.5])


def build(tiny_config, method: str, batch_size: int = 8, **method_args):
    torch.manual_seed(0)
    cfg = tiny_config(
        method, **{"train.batch_size": batch_size}, **{f"method_args.{k}": v for k, v in method_args.items()}
    )
    return METHODS.get(method)(cfg.to_dict(), DATA_INFO).train()


def views(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 1, 12, 12, generator=g), torch.randn(n, 1, 12, 12, generator=g)


def unit(x: torch.Tensor) -> np.ndarray:
    x = x.detach().double().numpy()
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def moco_reference(q, k, queue, temperature) -> float:
    """MoCo Eq. 1, one query at a time: -log exp(q.k/T) / (exp(q.k/T) + sum_j exp(q.n_j/T))."""
    q, k, queue = unit(q), unit(k), unit(queue)
    losses = []
    for qi, ki in zip(q, k):
        pos = math.exp(qi @ ki / temperature)
        neg = sum(math.exp(qi @ n / temperature) for n in queue)
        losses.append(-math.log(pos / (pos + neg)))
    return float(np.mean(losses))


def cos_rows(a, b) -> np.ndarray:
    return (unit(a) * unit(b)).sum(1)


# ------------------------------------------------------------------------------- MoCo
def test_moco_loss_and_queue_match_reference(tiny_config):
    model = build(tiny_config, "moco", queue_size=40, temperature=0.2, bn_splits=1)  # plain BN keys: the formula
    v1, v2 = views()
    queue0 = model.key_queue.queue.clone()
    out = model.step(v1, v2, None)
    with torch.no_grad():
        q = model.projector(model.backbone(v1))
        k = model.key_encoder.projector(model.key_encoder.backbone(v2))
    assert out.loss.item() == pytest.approx(moco_reference(q, k, queue0, 0.2), abs=1e-5)
    # The 8 new keys fill slots 0-7 (normalized), the rest of the queue is untouched.
    np.testing.assert_allclose(model.key_queue.queue[:8].double().numpy(), unit(k), atol=1e-6)
    assert torch.equal(model.key_queue.queue[8:], queue0[8:]) and int(model.key_queue.ptr) == 8
    out.loss.backward()
    assert all(p.grad is None for n, p in model.named_parameters() if n.startswith("key_"))
    assert all(p.grad is not None for p in model.backbone.parameters())
    assert not any(n.startswith("key_") for n, _ in model.trainable_named_parameters())


def test_moco_symmetric_loss_averages_both_directions(tiny_config):
    model = build(tiny_config, "moco", queue_size=40, temperature=0.5, symmetric=True, bn_splits=1)
    v1, v2 = views()
    queue0 = model.key_queue.queue.clone()
    out = model.step(v1, v2, None)
    with torch.no_grad():
        q1, q2 = model.projector(model.backbone(v1)), model.projector(model.backbone(v2))
        k1, k2 = (
            model.key_encoder.projector(model.key_encoder.backbone(v1)),
            model.key_encoder.projector(model.key_encoder.backbone(v2)),
        )
    expected = 0.5 * (moco_reference(q1, k2, queue0, 0.5) + moco_reference(q2, k1, queue0, 0.5))
    assert out.loss.item() == pytest.approx(expected, abs=1e-5)
    np.testing.assert_allclose(
        model.key_queue.queue[:16].double().numpy(), np.concatenate([unit(k1), unit(k2)]), atol=1e-6
    )
    assert int(model.key_queue.ptr) == 16


def test_moco_queue_is_fifo_and_wraps(tiny_config):
    model = build(tiny_config, "moco", batch_size=4, queue_size=10)
    batches = [
        torch.full((4, model.key_queue.queue.shape[1]), float(10 * b)) + torch.arange(4.0)[:, None] for b in range(4)
    ]
    for keys in batches:
        model.key_queue.enqueue(keys)
    # Slots by hand: batch 0 -> 0-3, batch 1 -> 4-7, batch 2 -> 8, 9, 0, 1, batch 3 -> 2-5.
    expected_ids = [22, 23, 30, 31, 32, 33, 12, 13, 20, 21]
    assert model.key_queue.queue.shape == (10, model.key_queue.queue.shape[1])
    assert model.key_queue.queue[:, 0].tolist() == expected_ids and int(model.key_queue.ptr) == 6
    with pytest.raises(ConfigError, match="queue_size"):
        model.key_queue.enqueue(torch.zeros(11, model.key_queue.queue.shape[1]))


def test_moco_momentum_update_is_eq2(tiny_config):
    model = build(tiny_config, "moco", momentum=0.9)
    with torch.no_grad():
        for p in model.backbone.parameters():
            p.add_(1.0)
    online = {n: p.clone() for n, p in model.backbone.named_parameters()}
    key = {n: p.clone() for n, p in model.key_encoder.backbone.named_parameters()}
    model.after_optimizer_step(1)
    for name, p in model.key_encoder.backbone.named_parameters():
        torch.testing.assert_close(p, 0.9 * key[name] + 0.1 * online[name])
    for (_, b), (_, ob) in zip(model.key_encoder.backbone.named_buffers(), model.backbone.named_buffers()):
        assert torch.equal(b, ob)


# ------------------------------------------------------------------------------- BYOL
def test_byol_loss_matches_reference(tiny_config):
    model = build(tiny_config, "byol", w_byol=2.0)
    v1, v2 = views()
    out = model.step(v1, v2, None)
    with torch.no_grad():
        p1 = model.predictor(model.projector(model.backbone(v1)))
        p2 = model.predictor(model.projector(model.backbone(v2)))
        t1 = model.target_projector(model.target_backbone(v1))
        t2 = model.target_projector(model.target_backbone(v2))
    # BYOL Eq. 2 in its cosine form 2 - 2 cos, summed over the two directions (Eq. 3), batch means.
    expected = 2.0 * (np.mean(2 - 2 * cos_rows(p1, t2)) + np.mean(2 - 2 * cos_rows(p2, t1)))
    assert out.loss.item() == pytest.approx(expected, abs=1e-5)
    out.loss.backward()
    assert all(p.grad is None for n, p in model.named_parameters() if n.startswith("target_"))
    assert all(p.grad is not None for p in model.predictor.parameters())


class EmaRecorder(Callback):
    """Target before each optimiser step, online right after it, and target after the EMA.

    The EMA runs inside the module's ``optimizer_step`` (before ``on_train_batch_end``, so a
    checkpoint written there holds the updated target); the optimiser never touches the target,
    so the target seen before the step is the one the EMA starts from.
    """

    def __init__(self) -> None:
        self.before, self.after = [], []
        self._target_before = None

    def _target(self, module):
        return [p.detach().clone() for p in module.target_backbone.parameters()]

    def on_before_optimizer_step(self, trainer, module, optimizer) -> None:
        self._target_before = self._target(module)

    def on_train_batch_end(self, trainer, module, *args) -> None:
        online = [p.detach().clone() for p in module.backbone.parameters()]
        self.before.append((trainer.global_step, online, self._target_before))
        self.after.append(self._target(module))


def test_byol_target_follows_cosine_ramp_in_training(tiny_config):
    recorder = EmaRecorder()
    pretrain(tiny_config("byol", **{"method_args.tau_base": 0.9}), callbacks=[recorder])
    # tau_k = 1 - (1 - 0.9) (cos(pi k / 4) + 1) / 2 after optimiser step k of K = 4, by hand:
    taus = {1: 0.9146446609, 2: 0.95, 3: 0.9853553391, 4: 1.0}
    assert [step for step, _, _ in recorder.before] == [1, 2, 3, 4]
    for (step, online, target), new_target in zip(recorder.before, recorder.after):
        tau = taus[step]
        for o, t, n in zip(online, target, new_target):
            torch.testing.assert_close(n, tau * t + (1 - tau) * o, atol=1e-6, rtol=1e-5)


# ------------------------------------------------------------------------------- SimSiam
def test_simsiam_loss_matches_reference(tiny_config):
    model = build(tiny_config, "simsiam")
    v1, v2 = views()
    out = model.step(v1, v2, None)
    with torch.no_grad():
        z1, z2 = model.projector(model.backbone(v1)), model.projector(model.backbone(v2))
        p1, p2 = model.predictor(z1), model.predictor(z2)
    expected = -0.5 * np.mean(cos_rows(p1, z2)) - 0.5 * np.mean(cos_rows(p2, z1))  # SimSiam Eq. 4
    assert out.loss.item() == pytest.approx(expected, abs=1e-5)
    assert model.predictor[0].out_features == model.cfg.model.proj_out // 4  # bottleneck predictor


@pytest.mark.parametrize("loss_fn", [byol_loss, simsiam_loss])
def test_targets_are_stop_gradient(loss_fn):
    g = torch.Generator().manual_seed(2)
    p1, p2, z1, z2 = (torch.randn(6, 5, generator=g, requires_grad=True) for _ in range(4))
    loss_fn(p1, p2, z1, z2).backward()
    assert p1.grad is not None and p2.grad is not None
    assert z1.grad is None and z2.grad is None


# ------------------------------------------------------------------------------- collapse watch
def test_embedding_std_matches_numpy():
    z = torch.randn(4000, 64, generator=torch.Generator().manual_seed(3))
    reference = unit(z).std(axis=0, ddof=1).mean()
    assert embedding_std(z).item() == pytest.approx(reference, rel=1e-5)
    assert reference == pytest.approx(1 / math.sqrt(64), rel=0.05)  # uniform on the sphere: 1/sqrt(d)


def test_collapse_watch_warns_once():
    watch = CollapseWatch("byol", threshold=0.1)
    spread = torch.randn(256, 32, generator=torch.Generator().manual_seed(4))
    collapsed = torch.ones(256, 32) + 1e-7 * spread
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watch(spread, step=1)
        assert not caught
        assert watch(collapsed, step=7).item() < 1e-6
        watch(collapsed, step=8)
    assert len(caught) == 1 and "collapsing at step 7" in str(caught[0].message)


# ------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "params, args, key",
    [
        (MoCoParams, {"momentum": 1.0}, "momentum"),
        (MoCoParams, {"temperature": 0.0}, "temperature"),
        (MoCoParams, {"queue_size": 0}, "queue_size"),
        (BYOLParams, {"tau_base": 1.0}, "tau_base"),
        (BYOLParams, {"w_byol": 0.0}, "w_byol"),
        (SimSiamParams, {"collapse_threshold": -1.0}, "collapse_threshold"),
        (SimSiamParams, {"pred_hidden": 0}, "pred_hidden"),
    ],
)
def test_bad_hyper_parameters_are_config_errors(params, args, key):
    with pytest.raises(ConfigError, match=key):
        from_dict(params, args, "method_args")


def test_moco_queue_smaller_than_batch_is_config_error(tiny_config):
    with pytest.raises(ConfigError, match="queue_size"):
        build(tiny_config, "moco", batch_size=32, queue_size=16)


# ------------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("method", ["moco", "byol", "simsiam"])
def test_short_pretraining_is_read_by_evaluate(tiny_config, method):
    root = pretrain(tiny_config(method, run_name=method))
    result = evaluate_run(root, ["knn"], EvaluateSettings(max_train=300))["knn"]
    assert 0 <= result["top1"] <= 100 and result["protocol"]["checkpoint"]["global_step"] == 4
