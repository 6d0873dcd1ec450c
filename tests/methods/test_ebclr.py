"""EBCLR: energy (Eq. 20), discriminative term (Eq. 18), proximal MSGLD (Eq. 21-22), replay buffer,
checkpointing, a tiny training run and `probcl sample`, each against a plain re-implementation."""

import io
import math

import numpy as np
import pytest
import torch
from scipy.stats import binomtest

from probcl.config import ConfigError, load_config
from probcl.losses.ebclr import discriminative_loss, ebclr_loss, energy
from probcl.losses.nt_xent import nt_xent_loss
from probcl.methods import METHODS, TrainingDivergedError
from probcl.samplers.sgld import MSGLDConfig, MultiStageSGLD, ReplayBuffer, msgld_sigma, proximal_sgld

EBM_MODEL = {
    "model.norm": "none",
    "model.act": "leaky_relu",
    "augment.preset": "ebclr-gray",
    "augment.normalize": "symmetric",
}


def unit(x):
    return x / np.linalg.norm(x)


def direct_energy(z, refs, tau):
    """Eq. 20 written plainly: -log sum_m exp(-||z/|z| - z'_m/|z'_m|||^2 / tau)."""
    return -math.log(sum(math.exp(-float(np.sum((unit(z) - unit(r)) ** 2)) / tau) for r in refs))


def direct_energy_grad(w, b, v, refs, tau):
    """d E(W v + b) / d v by the chain rule: softmax-weighted 2(z_hat - r_m)/tau through the normalisation."""
    z = w @ v + b
    norm = np.linalg.norm(z)
    z_hat = z / norm
    r_hat = [unit(r) for r in refs]
    logits = np.array([-np.sum((z_hat - r) ** 2) / tau for r in r_hat])
    weights = np.exp(logits - logits.max())
    weights /= weights.sum()
    d_zhat = sum(wm * 2 * (z_hat - r) / tau for wm, r in zip(weights, r_hat))
    d_z = (np.eye(len(z)) - np.outer(z_hat, z_hat)) @ d_zhat / norm
    return w.T @ d_z


def direct_minus_log_q(z1, z2, tau, others):
    """Eq. 18: -log q(v'_n | v_n) with its 1/N' normaliser, averaged over both views as anchors."""
    views = [unit(v) for v in np.concatenate([z1, z2])]
    n = len(z1)
    total = []
    for i in range(2 * n):
        partner = (i + n) % (2 * n)
        if others == "2n-1":
            candidates = [k for k in range(2 * n) if k != i]
        else:  # the N views of the other side
            candidates = list(range(n, 2 * n)) if i < n else list(range(n))
        sim = lambda k, i=i: math.exp(-float(np.sum((views[i] - views[k]) ** 2)) / tau)  # noqa: E731
        total.append(-math.log(sim(partner) / (sum(sim(k) for k in candidates) / len(candidates))))
    return float(np.mean(total)), len(candidates)


# ------------------------------------------------------------------ energy and discriminative term
def test_energy_matches_direct_computation():
    rng = np.random.default_rng(0)
    z, refs = rng.normal(size=(3, 4)), rng.normal(size=(5, 4))
    for tau in (0.1, 0.7):
        ours = energy(torch.tensor(z), torch.tensor(refs), tau).numpy()
        expected = [direct_energy(row, refs, tau) for row in z]
        np.testing.assert_allclose(ours, expected, rtol=1e-10, atol=1e-10)


def test_sgld_step_follows_the_input_gradient_of_the_energy():
    rng = np.random.default_rng(1)
    w, b, refs = rng.normal(size=(4, 6)), rng.normal(size=4), rng.normal(size=(5, 4))
    v0 = rng.normal(size=(3, 6))
    linear = torch.nn.Linear(6, 4).double()
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(w))
        linear.bias.copy_(torch.tensor(b))
    tau, alpha = 0.5, 1e-3
    energy_fn = lambda v: energy(linear(v), torch.tensor(refs), tau)  # noqa: E731
    v1 = proximal_sgld(energy_fn, torch.tensor(v0), 1, alpha, 1e9, 0.0).samples.numpy()
    for row0, row1 in zip(v0, v1):
        np.testing.assert_allclose((row0 - row1) / alpha, direct_energy_grad(w, b, row0, refs, tau), rtol=1e-8)


@pytest.mark.parametrize("others", ["2n-1", "n"])
def test_discriminative_term_is_eq18(others):
    rng = np.random.default_rng(2)
    z1, z2 = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    tau = 0.2
    expected, n_others = direct_minus_log_q(z1, z2, tau, others)
    ours = discriminative_loss(torch.tensor(z1), torch.tensor(z2), tau, others, gather=True).item()
    assert abs(ours - (expected + math.log(n_others))) < 1e-10  # ours drops the constant log N'
    if others == "2n-1":  # -||a - b||^2 / tau = 2 cos / tau - 2 / tau: NT-Xent at tau / 2
        assert abs(ours - nt_xent_loss(torch.tensor(z1), torch.tensor(z2), tau / 2, gather=True).item()) < 1e-10


def test_generative_term_signs_and_lambda():
    rng = np.random.default_rng(3)
    z1, z2, zs = (torch.tensor(rng.normal(size=(4, 3))) for _ in range(3))
    out = ebclr_loss(z1, z2, zs, z2, 0.3, 0.25, "2n-1", gather=True, proj_norm_weight=1e-3)
    e_data = np.mean([direct_energy(r, z2.numpy(), 0.3) for r in z1.numpy()])
    e_samples = np.mean([direct_energy(r, z2.numpy(), 0.3) for r in zs.numpy()])
    reg = 1e-3 * (np.sum(z1.numpy() ** 2) + np.sum(zs.numpy() ** 2))
    disc = direct_minus_log_q(z1.numpy(), z2.numpy(), 0.3, "2n-1")[0] + math.log(7)
    assert abs(out.total.item() - (disc + 0.25 * (e_data - e_samples + reg))) < 1e-10


# ------------------------------------------------------------------ proximal SGLD and MSGLD
def quadratic_energy(target, c):
    return lambda v: 0.5 * c * (v - target).square().flatten(1).sum(1)


def test_clamp_bounds_each_update_coordinate():
    g = torch.Generator().manual_seed(0)
    v0, target = (torch.randn(8, 1, 16, 16, generator=g, dtype=torch.float64) for _ in range(2))
    c, alpha, delta = 3.0, 0.05, 1.0
    grad = c * (v0 - target)
    assert (grad.abs() > delta).any() and (grad.abs() < delta).any()
    step = proximal_sgld(quadratic_energy(target, c), v0, 1, alpha, delta, 0.0).samples - v0
    assert step.abs().max() <= alpha * delta + 1e-12
    torch.testing.assert_close(step, -alpha * grad.clamp(-delta, delta))  # Eq. 21 without noise
    torch.manual_seed(0)
    sigma = 0.2
    noise = proximal_sgld(quadratic_energy(target, c), v0, 1, alpha, delta, sigma).samples - v0 - step
    assert abs(noise.std().item() - sigma) < 0.05 * sigma and abs(noise.mean().item()) < 0.02


def test_samples_stay_in_the_valid_pixel_range():
    cfg = load_config(None, {"method": "ebclr", "data.dataset": "digits", **EBM_MODEL})
    info = dict(dataset="digits", channels=1, image_size=28, num_classes=10, mean=[0.3], std=[0.2])
    low, high = METHODS.get("ebclr")(cfg.to_dict(), info).normalizer.bounds()
    target = torch.full((4, 1, 8, 8), 100.0)
    out = proximal_sgld(quadratic_energy(target, 1.0), torch.zeros(4, 1, 8, 8), 50, 1.0, 1.0, 0.5, (low, high))
    assert out.samples.min() >= low.item() - 1e-6 and out.samples.max() <= high.item() + 1e-6
    assert math.isclose(out.samples.max().item(), high.item(), rel_tol=1e-6)  # pushed to the bound, not past


@pytest.mark.parametrize("pixel_clamp", [True, False])
def test_sampler_clamps_to_the_pixel_range_only_when_asked(pixel_clamp):
    buffer = ReplayBuffer(4, 1.0, (1, 8, 8))
    sampler = MultiStageSGLD(
        MSGLDConfig(steps=30, step_size=1.0, sigma_min=0.0, sigma_max=0.0, pixel_clamp=pixel_clamp), buffer
    )
    low, high = torch.tensor(-1.0), torch.tensor(1.0)
    out = sampler.sample(
        quadratic_energy(torch.full((4, 1, 8, 8), 100.0), 1.0), 4, lambda n: torch.zeros(n, 1, 8, 8), bounds=(low, high)
    )
    # without the clamp the chain follows Eq. 21 alone: 30 steps of alpha * delta = 1 towards 100
    assert out.samples.max().item() == pytest.approx(1.0 if pixel_clamp else 30.0)


@pytest.mark.parametrize(
    "preset", ["fashion-mnist/ebclr-paper", "mnist/ebclr-paper", "cifar10/ebclr", "cifar100/ebclr"]
)
def test_paper_presets_do_not_clamp_sgld_iterates(preset):
    from probcl.core.presets import resolve_config_path

    assert load_config(resolve_config_path(preset)).method_args["sgld"]["pixel_clamp"] is False
    assert MSGLDConfig().pixel_clamp is True


def test_msgld_schedule_below_at_and_above_k():
    counts = torch.tensor([0, 1, 2, 3, 4, 10])
    expected = [0.05, 0.05 - 0.04 / 3, 0.05 - 0.08 / 3, 0.01, 0.01, 0.01]  # Eq. 22 with K = 3
    torch.testing.assert_close(msgld_sigma(counts, 0.01, 0.05, 3), torch.tensor(expected), atol=1e-7, rtol=0)


def test_sampler_applies_each_chains_noise_level_and_counts_uses():
    counts = torch.tensor([0, 1, 2, 3, 6])
    buffer = ReplayBuffer(5, 0.0, (1, 64, 64))
    buffer.load_state_dict({"samples": torch.zeros(5, 1, 64, 64), "counts": counts.clone()})
    sampler = MultiStageSGLD(MSGLDConfig(steps=1, sigma_min=0.01, sigma_max=0.05, decay_uses=3), buffer)
    torch.manual_seed(0)
    idx = torch.randint(5, (40,))
    torch.manual_seed(0)
    out = sampler.sample(lambda v: 0 * v.flatten(1).sum(1), 40, lambda n: None)  # flat energy: pure noise
    used = torch.bincount(idx, minlength=5) > 0
    assert torch.equal(buffer.counts, counts + used.long())  # kappa + 1 for every drawn entry
    for i, entry in enumerate(idx.tolist()):
        sigma = 0.01 + 0.04 * max(0.0, 1 - int(counts[entry]) / 3)  # Eq. 22 at the entry's kappa
        assert abs(out.samples[i].std().item() - sigma) < 0.05 * sigma


@pytest.mark.parametrize("rho", [0.2, 0.6])
def test_reinitialisation_frequency_is_rho(rho):
    torch.manual_seed(1)
    buffer = ReplayBuffer(500, rho, (1, 2, 2))
    buffer.load_state_dict({"samples": torch.zeros(500, 1, 2, 2), "counts": torch.full((500,), 3)})
    reinit_total, draws = 0, 0
    for _ in range(100):
        idx, init, counts, reinit = buffer.draw(50, lambda n: torch.ones(n, 1, 2, 2))
        assert torch.equal(init[reinit], torch.ones(int(reinit.sum()), 1, 2, 2)) and (counts[reinit] == 0).all()
        reinit_total, draws = reinit_total + int(reinit.sum()), draws + 50
    assert binomtest(reinit_total, draws, rho).pvalue > 1e-3


def test_empty_entries_start_from_the_proposal():
    buffer = ReplayBuffer(10, 0.0, (1, 2, 2))
    _, init, counts, reinit = buffer.draw(4, lambda n: torch.full((n, 1, 2, 2), 7.0))
    assert reinit.all() and (init == 7).all() and (counts == 0).all()


def test_zero_noise_sgld_lowers_the_energy_of_a_fixed_model():
    torch.manual_seed(0)
    from probcl.models.backbones import SmallCNN
    from probcl.models.heads import projection_head

    net = torch.nn.Sequential(SmallCNN(1, 4, "none", "leaky_relu"), projection_head(16, 16, 8, norm="none")).double()
    refs = net(torch.rand(16, 1, 12, 12, dtype=torch.float64) * 2 - 1).detach()
    energy_fn = lambda v: energy(net(v), refs, 0.1)  # noqa: E731
    init = torch.rand(8, 1, 12, 12, dtype=torch.float64) * 2 - 1
    out = proximal_sgld(energy_fn, init, 20, 0.05, 1.0, 0.0, (torch.tensor(-1.0), torch.tensor(1.0)))
    before, after = energy_fn(init).detach(), energy_fn(out.samples).detach()
    assert (after < before).all()
    assert all(p.grad is None for p in net.parameters())  # the sampler leaves the model alone


# ------------------------------------------------------------------ the method
def make_method(**method_args):
    cfg = load_config(
        None,
        {
            "method": "ebclr",
            "data.dataset": "digits",
            "model.width": 4,
            "model.proj_hidden": 16,
            "model.proj_out": 8,
            **EBM_MODEL,
            **{f"method_args.{k}": v for k, v in method_args.items()},
        },
    )
    info = dict(dataset="digits", channels=1, image_size=28, num_classes=10, mean=[0.5], std=[0.5])
    return METHODS.get("ebclr")(cfg.to_dict(), info)


def digits_batch(n=16):
    from probcl.data.loaders import load_dataset

    data = load_dataset("digits", "train")
    return data.images[:n], data.labels()[:n], torch.arange(n)


def test_lambda_zero_is_the_plain_contrastive_loss():
    torch.manual_seed(0)
    for others in ("2n-1", "n"):
        model = make_method(lam=0.0, others=others, temperature=0.5)
        batch = digits_batch()
        v1, v2 = model.views(batch[0])
        loss = model.step(v1, v2, batch).loss.item()
        with torch.no_grad():
            z1, z2 = (model.projector(model.backbone(v)).double().numpy() for v in (v1, v2))
        expected, n_others = direct_minus_log_q(z1, z2, 0.5, others)
        assert abs(loss - (expected + math.log(n_others))) < 1e-6
        assert model.sampler.buffer.samples is None  # no SGLD when the generative term is off


def constant_images(levels, size=28):
    """A dataset of uniform grey images, one per level (uint8): each image says which level it came from."""
    from probcl.data.sources import TensorImages

    images = torch.tensor(levels, dtype=torch.uint8).view(-1, 1, 1, 1).expand(-1, 1, size, size).clone()
    return TensorImages(images, None, "constant")


def test_reinitialised_chains_start_from_views_of_random_training_images_not_this_batch():
    """q0 = p(v) (the authors' code): with rho 1 and (almost) no SGLD move, every chain written back is a view of
    one of the training set's grey levels, several of them are drawn, and none is the batch's own level."""
    train_levels = [20, 60, 100, 140, 180, 220]
    model = make_method(
        buffer_size=64, reinit_prob=1.0, sgld={"steps": 1, "step_size": 1e-6, "sigma_min": 0.0, "sigma_max": 0.0}
    )
    model.use_training_data(constant_images(train_levels))
    batch_images = constant_images([250] * 16).images
    torch.manual_seed(0)
    model.step(*model.views(batch_images), (batch_images, torch.full((16,), -1), torch.arange(16)))
    drawn = model.sampler.buffer.samples[model.sampler.buffer.counts >= 0]
    grey = ((drawn.flatten(1).mean(1) * 0.5 + 0.5) * 255).tolist()  # symmetric normalisation undone
    nearest = [min(train_levels + [250], key=lambda level, g=g: abs(level - g)) for g in grey]
    assert all(abs(level - g) < 5 for level, g in zip(nearest, grey))  # noise std 0.03 averages out over 784 px
    assert 250 not in nearest and len(set(nearest)) >= 4


def test_the_training_set_proposal_needs_the_training_set():
    model = make_method(buffer_size=8, sgld={"steps": 1})
    batch = digits_batch()
    with pytest.raises(ConfigError, match="use_training_data"):
        model.step(*model.views(batch[0]), batch)
    assert make_method().hp.proposal == "train"


def test_buffer_survives_a_checkpoint_round_trip_exactly():
    torch.manual_seed(0)
    model = make_method(buffer_size=24, reinit_prob=0.5, sgld={"steps": 2})
    model.use_training_data(constant_images([10, 90, 170]))
    batch = digits_batch()
    for _ in range(3):
        model.step(*model.views(batch[0]), batch)
    checkpoint = {}
    model.on_save_checkpoint(checkpoint)
    stream = io.BytesIO()
    torch.save(checkpoint, stream)
    stream.seek(0)
    restored = make_method(buffer_size=24, reinit_prob=0.5, sgld={"steps": 2})
    restored.on_load_checkpoint(torch.load(stream, weights_only=False))
    saved = model.sampler.buffer
    assert (saved.counts >= 1).any()
    assert torch.equal(restored.sampler.buffer.samples, saved.samples)
    assert torch.equal(restored.sampler.buffer.counts, saved.counts)


def test_invalid_hyper_parameters_are_rejected():
    with pytest.raises(ConfigError, match="sigma_max"):
        make_method(sgld={"sigma_min": 0.1, "sigma_max": 0.05})
    with pytest.raises(ConfigError, match="reinit_prob"):
        make_method(reinit_prob=1.5)
    with pytest.raises(ConfigError, match="unknown config key"):
        make_method(sgld={"stepsize": 0.1})


# ------------------------------------------------------------------ two processes (gloo)
def _ddp_worker(rank, rendezvous, out_dir, z1, z2, zs):
    import torch.distributed as dist

    from probcl.runtime.distributed import gather_with_grad

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    mine = slice(rank * 3, (rank + 1) * 3)
    loss = ebclr_loss(
        z1[mine], z2[mine], zs[mine], gather_with_grad(z2[mine]), 0.3, 0.5, "2n-1", gather=True, proj_norm_weight=0.0
    ).total
    buffer = ReplayBuffer(2, 0.2, (1, 2, 2))
    buffer.samples, buffer.counts = torch.full((2, 1, 2, 2), 10.0 + rank), torch.tensor([rank, 5])
    state = buffer.state_dict()
    restored = ReplayBuffer(2, 0.2, (1, 2, 2))
    restored.load_state_dict(state)
    torch.save({"loss": loss, "state": state, "restored": restored.samples}, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


def test_two_processes_match_one_and_keep_one_buffer_each(tmp_path):
    import torch.multiprocessing as mp

    g = torch.Generator().manual_seed(0)
    z1, z2, zs = (torch.randn(6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mp.start_processes(
        _ddp_worker,
        args=(str(tmp_path / "rendezvous"), str(tmp_path), z1, z2, zs),
        nprocs=2,
        join=True,
        start_method="fork",
    )
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    single = ebclr_loss(z1, z2, zs, z2, 0.3, 0.5, "2n-1", gather=False, proj_norm_weight=0.0).total
    assert abs((ranks[0]["loss"] + ranks[1]["loss"]).item() / 2 - single.item()) < 1e-10
    for r, result in enumerate(ranks):  # the checkpoint holds both ranks' entries, in rank order
        assert torch.equal(result["state"]["counts"], torch.tensor([0, 5, 1, 5]))
        assert torch.equal(result["state"]["samples"][:, 0, 0, 0], torch.tensor([10.0, 10.0, 11.0, 11.0]))
        assert (result["restored"] == 10.0 + r).all()  # and each rank gets its own share back


# ------------------------------------------------------------------ training and sampling end to end
TINY = {**EBM_MODEL, "method_args.buffer_size": 64, "method_args.sgld.steps": 2, "train.limit_train_batches": 3}


def test_one_epoch_run_checkpoints_the_buffer_and_samples_a_png(tiny_config, tmp_path):
    import matplotlib.image

    from probcl.cli import main
    from probcl.core.layout import RunPaths
    from probcl.core.metrics_file import read_metrics
    from probcl.methods.ebclr import BUFFER_KEY
    from probcl.tasks.pretrain import pretrain

    root = pretrain(tiny_config("ebclr", **{**TINY, "train.limit_train_batches": 10}))  # 10 = logging interval
    meta = torch.load(RunPaths(root).last, map_location="cpu", weights_only=False)
    buffer = meta[BUFFER_KEY]
    assert buffer["samples"].shape == (64, 1, 28, 28) and int((buffer["counts"] >= 1).sum()) > 0
    assert any("train/energy_samples" in row for row in read_metrics(root))
    out = tmp_path / "grid.png"
    assert main(["sample", str(root), "--steps", "3", "--num", "5", "--reference", "16", "--out", str(out)]) == 0
    image = matplotlib.image.imread(out)
    assert image.ndim == 3 and image.shape[0] > 50
    assert main(["sample", str(root), "--steps", "2", "--num", "2", "--start", "data", "--reference", "8"]) == 0
    assert (RunPaths(root).plots / "samples.png").exists()


def test_resumed_run_continues_exactly_with_its_buffer(tiny_config):
    from probcl.core.layout import RunPaths
    from probcl.tasks.pretrain import pretrain

    same = {**TINY, "train.monitor_every_n_epochs": 0, "optim.schedule": "constant"}  # lr independent of epochs
    full = pretrain(tiny_config("ebclr", run_name="full", **same, **{"train.epochs": 2}))
    pretrain(tiny_config("ebclr", run_name="part", **same))
    part = pretrain(tiny_config("ebclr", run_name="part", **same, **{"train.epochs": 2}))
    a, b = (torch.load(RunPaths(r).last, map_location="cpu", weights_only=False) for r in (full, part))
    assert torch.equal(a["ebclr_replay_buffer"]["counts"], b["ebclr_replay_buffer"]["counts"])
    assert torch.equal(a["ebclr_replay_buffer"]["samples"], b["ebclr_replay_buffer"]["samples"])
    for name, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][name]), name


def test_exploding_gradients_stop_with_the_culprits_named(tiny_config):
    cfg = tiny_config("ebclr", run_name="boom", **TINY, **{"method_args.max_grad_norm": 1e-9})
    from probcl.tasks.pretrain import pretrain

    with pytest.raises(TrainingDivergedError, match="sgld.step_size.*clamp.*lam"):
        pretrain(cfg)
