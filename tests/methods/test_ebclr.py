"""EBCLR: SGLD samples within the method's pixel range, the presets' clamp, the replay buffer in checkpoints, DDP,
a tiny training run and `probcl sample`, against plain re-implementations (the loss and the sampler themselves:
tests/losses/test_ebclr.py, tests/samplers/test_sgld.py)."""

import io
import math

import pytest
import torch

from probcl.config import ConfigError, load_config
from probcl.losses.ebclr import ebclr_loss
from probcl.methods import METHODS, TrainingDivergedError
from probcl.samplers.sgld import MSGLDConfig, ReplayBuffer, proximal_sgld
from tests.losses.ebclr_reference import direct_minus_log_q
from tests.samplers.helpers import quadratic_energy

EBM_MODEL = {
    "model.norm": "none",
    "model.act": "leaky_relu",
    "augment.preset": "ebclr-gray",
    "augment.normalize": "symmetric",
}


def test_samples_stay_in_the_valid_pixel_range():
    cfg = load_config(None, {"method": "ebclr", "data.dataset": "digits", **EBM_MODEL})
    info = dict(dataset="digits", channels=1, image_size=28, num_classes=10, mean=[0.3], std=[0.2])
    low, high = METHODS.get("ebclr")(cfg.to_dict(), info).normalizer.bounds()
    target = torch.full((4, 1, 8, 8), 100.0)
    out = proximal_sgld(quadratic_energy(target, 1.0), torch.zeros(4, 1, 8, 8), 50, 1.0, 1.0, 0.5, (low, high))
    assert out.samples.min() >= low.item() - 1e-6 and out.samples.max() <= high.item() + 1e-6
    assert math.isclose(out.samples.max().item(), high.item(), rel_tol=1e-6)  # pushed to the bound, not past


@pytest.mark.parametrize(
    "preset", ["fashion-mnist/ebclr-paper", "mnist/ebclr-paper", "cifar10/ebclr", "cifar100/ebclr"]
)
def test_paper_presets_do_not_clamp_sgld_iterates(preset):
    from probcl.core.presets import resolve_config_path

    assert load_config(resolve_config_path(preset)).method_args["sgld"]["pixel_clamp"] is False
    assert MSGLDConfig().pixel_clamp is True


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


def test_samples_of_a_run_with_device_views_repeat_for_a_seed(tiny_config, tmp_path):
    """The device views (augment.backend device) draw their colour order from python's random, which
    draw_samples seeds from its seed as it does torch's: one seed, one set of samples, whatever came before."""
    import random

    from probcl.tasks.pretrain import pretrain
    from probcl.tasks.sample import SampleOptions, sample_run

    views = {"augment.preset": "ebclr-color", "data.channels": 3, "augment.backend": "device"}
    root = pretrain(tiny_config("ebclr", **{**TINY, **views}))
    options = SampleOptions(num=2, steps=2, reference_size=8, start="data")
    drawn = []
    for state in (1, 2):
        random.seed(state)
        drawn.append(sample_run(root, options, out=tmp_path / f"{state}.png", device="cpu")[1].images)
    assert torch.equal(drawn[0], drawn[1])
