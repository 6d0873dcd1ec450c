"""bf16 mixed precision on the CPU (Lightning's ``bf16-mixed`` is ``torch.autocast("cpu", torch.bfloat16)``):
the parts that need float32 keep it under autocast, and the sampler and vMF methods train with finite losses
close to their float32 losses."""

from __future__ import annotations

import pytest
import torch

from probcl.config import load_config
from probcl.losses.ceb import c_simclr_loss
from probcl.losses.ebclr import energy
from probcl.methods import METHODS
from probcl.samplers.sgld import proximal_sgld


def bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def test_vmf_loss_and_energy_compute_in_float32_under_bf16_autocast():
    gen = torch.Generator().manual_seed(0)
    h1, h2, z_ref = (torch.randn(32, 16, generator=gen) for _ in range(3))
    exact = h1 @ h2.T
    with bf16():  # the check can fail: a bf16 matmul rounds the same logits
        assert not torch.equal((h1 @ h2.T).float(), exact)
    torch.manual_seed(1)
    reference = c_simclr_loss(h1, h2, 1024.0, 10.0, 1.0, "cross-view", gather=False)
    with bf16():
        torch.manual_seed(1)  # the same vMF samples
        got = c_simclr_loss(h1, h2, 1024.0, 10.0, 1.0, "cross-view", gather=False)
        got_energy = energy(h1, z_ref, 0.1)
    assert got.loss.dtype == torch.float32 and torch.equal(got.loss, reference.loss)
    assert got_energy.dtype == torch.float32 and torch.equal(got_energy, energy(h1, z_ref, 0.1))


def test_sgld_chain_keeps_steps_below_bf16_resolution():
    """E(v) = w . v through a linear layer (bf16 under autocast; w = 2^-7 is exact in bf16): T noiseless steps
    move each pixel by T alpha w = 0.002 from 1.0, where bf16's spacing is 2^-7 = 0.0078 (a bf16 chain stays).
    The start comes in bf16 (as views made under autocast could): the chain still runs in float32."""
    layer = torch.nn.Linear(16, 1, bias=False)
    torch.nn.init.constant_(layer.weight, 2.0**-7)
    init = torch.ones(4, 1, 4, 4, dtype=torch.bfloat16)
    with bf16():
        trace = proximal_sgld(lambda v: layer(v.flatten(1)).squeeze(1), init, 5, 0.05, 1.0, 0.0)
    assert trace.samples.dtype == torch.float32
    torch.testing.assert_close(trace.samples, torch.full((4, 1, 4, 4), 1.0 - 5 * 0.05 * 2.0**-7), rtol=0, atol=1e-6)


SAMPLERS = {
    "ebclr": {"method_args.buffer_size": 64, "method_args.sgld.steps": 3},
    "vem-langevin": {"method_args.bank_size": 64, "method_args.steps": 3},
    "c-simclr": {},
}


def _step_loss(method: str, data, batch, precision_context) -> tuple[torch.Tensor, list[torch.Tensor]]:
    overrides = {"method": method, "data.dataset": "digits", "model.width": 4, "model.proj_hidden": 16}
    cfg = load_config(None, {**overrides, "model.proj_out": 8, **SAMPLERS[method]})
    info = dict(dataset="digits", channels=1, image_size=28, num_classes=10, mean=[0.5], std=[0.5])
    torch.manual_seed(0)
    model = METHODS.get(method)(cfg.to_dict(), info).train()
    model.use_training_data(data)  # EBCLR's re-initialised chains start from training images
    with precision_context:
        loss = model.step(*model.training_views(batch[0]), batch).loss
    loss.backward()
    return loss.detach().float(), [p.grad for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("method", list(SAMPLERS))
def test_a_bf16_training_step_is_finite_and_near_the_float32_one(method):
    from probcl.data.loaders import load_dataset

    data = load_dataset("digits", "train")
    batch = (data.images[:32], data.labels()[:32], torch.arange(32))
    loss32, _ = _step_loss(method, data, batch, torch.autocast("cpu", enabled=False))
    loss16, grads = _step_loss(method, data, batch, bf16())
    assert torch.isfinite(loss16) and grads and all(torch.isfinite(g).all() for g in grads)
    assert abs(loss16 - loss32) <= 0.02 * abs(loss32) + 0.02, (loss16, loss32)
