"""DDP equivalence on CPU: 2 gloo processes with per-rank batch B against one process with batch 2B.

The same views are fed to both. SimCLR's gathered negatives and MoCo's queue must give the
same loss, the same (DDP-averaged) parameter gradients and the same parameters after an SGD
step and a momentum update as the single process; MoCo's queue must be identical on every
rank and equal to the single process's. With BatchNorm, MoCo's shuffle-BN must compute each
key with the statistics of the sub-batch it was shuffled into, as a reference built from the
broadcast permutation does by hand.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from probcl.config import load_config
from probcl.methods import METHODS

WORLD, B = 2, 4
SHUFFLE_SEED = 123
DATA_INFO = dict(dataset="digits", channels=1, image_size=12, num_classes=None, mean=[0.5], std=[0.5])
SCENARIOS = {  # name: (method, model.norm, method_args)
    "simclr": ("simclr", "none", {"temperature": 0.5}),
    "moco": ("moco", "none", {"queue_size": 24, "temperature": 0.2, "momentum": 0.9}),
    "moco-shuffle-bn": ("moco", "bn", {"queue_size": 24, "shuffle_bn": True}),
}


def make_model(name: str):
    method, norm, args = SCENARIOS[name]
    overrides = {
        "method": method,
        "model.backbone": "cnn",
        "model.width": 4,
        "model.norm": norm,
        "model.proj_hidden": 16,
        "model.proj_out": 8,
        "train.batch_size": B,
        **{f"method_args.{k}": v for k, v in args.items()},
    }
    torch.manual_seed(0)
    return METHODS.get(method)(load_config(None, overrides).to_dict(), DATA_INFO).train()


def global_views() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(WORLD * B, 1, 12, 12, generator=g), torch.randn(WORLD * B, 1, 12, 12, generator=g)


class Objective(nn.Module):
    """DDP wraps a module whose forward is the method's training objective."""

    def __init__(self, method) -> None:
        super().__init__()
        self.method = method

    def forward(self, view1: torch.Tensor, view2: torch.Tensor) -> torch.Tensor:
        return self.method.step(view1, view2, None).loss


def train_step(model, view1, view2, wrap) -> dict:
    """One objective evaluation, backward, SGD step and momentum update; what we compare."""
    objective = DistributedDataParallel(Objective(model)) if wrap else Objective(model)
    torch.manual_seed(SHUFFLE_SEED)
    loss = objective(view1, view2)
    loss.backward()
    reported = loss.detach().clone()
    if wrap:
        dist.all_reduce(reported)
        reported /= WORLD
    params = [p for _, p in model.trainable_named_parameters()]
    grads = {n: p.grad.clone() for n, p in model.trainable_named_parameters()}
    torch.optim.SGD(params, lr=0.5).step()
    model.after_optimizer_step(1)
    state = {n: t.detach().clone() for n, t in model.state_dict().items()}
    return {"loss": reported, "grads": grads, "state": state}


def worker(rank: int, rendezvous: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=WORLD)
    mine = slice(rank * B, (rank + 1) * B)
    results: dict = {}
    with warnings.catch_warnings(record=True) as caught:  # what a user's DDP run would print
        warnings.simplefilter("always")
        for name in SCENARIOS:
            view1, view2 = global_views()
            results[name] = train_step(make_model(name), view1[mine], view2[mine], wrap=True)
    results["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    torch.save(results, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    mp.start_processes(worker, args=(str(out / "rendezvous"), str(out)), nprocs=WORLD, join=True, start_method="fork")
    return [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]


@pytest.mark.parametrize("name", ["simclr", "moco"])
def test_two_processes_match_one_process_with_the_global_batch(ranks, name):
    single = train_step(make_model(name), *global_views(), wrap=False)
    for result in (r[name] for r in ranks):
        assert result["loss"].item() == pytest.approx(single["loss"].item(), abs=1e-5)
        assert result["grads"].keys() == single["grads"].keys()
        for key, grad in single["grads"].items():
            torch.testing.assert_close(result["grads"][key], grad, atol=1e-6, rtol=1e-5, msg=key)
        for key, value in single["state"].items():  # after the SGD step and the momentum update
            torch.testing.assert_close(result["state"][key], value, atol=1e-6, rtol=1e-5, msg=key)


def test_no_rank_warns(ranks):
    """No deprecation notice (torch.distributed.nn.functional.all_gather) or other warning per step and rank."""
    assert [r["warnings"] for r in ranks] == [[], []]


def test_moco_queue_is_identical_on_every_rank_and_holds_the_global_keys(ranks):
    model = make_model("moco")
    queue0 = model.key_queue.queue.clone()
    _, view2 = global_views()
    with torch.no_grad():
        keys = nn.functional.normalize(model.key_encoder.projector(model.key_encoder.backbone(view2)), dim=1)
    for result in (r["moco"] for r in ranks):
        queue = result["state"]["key_queue.queue"]
        torch.testing.assert_close(queue[: WORLD * B], keys, atol=1e-6, rtol=1e-5)
        assert torch.equal(queue[WORLD * B :], queue0[WORLD * B :])
        assert int(result["state"]["key_queue.ptr"]) == WORLD * B
    assert torch.equal(ranks[0]["moco"]["state"]["key_queue.queue"], ranks[1]["moco"]["state"]["key_queue.queue"])


def test_moco_shuffle_bn_uses_the_broadcast_permutation(ranks):
    model = make_model("moco-shuffle-bn")
    _, view2 = global_views()
    torch.manual_seed(SHUFFLE_SEED)
    order = torch.randperm(WORLD * B)  # rank 0 draws it first thing in the step, then broadcasts it
    keys = torch.empty(WORLD * B, model.key_queue.queue.shape[1])
    with torch.no_grad():
        for chunk in order.view(WORLD, B):  # each rank's BatchNorm sees one shuffled sub-batch
            keys[chunk] = nn.functional.normalize(
                model.key_encoder.projector(model.key_encoder.backbone(view2[chunk])), dim=1
            )
    for result in (r["moco-shuffle-bn"] for r in ranks):
        torch.testing.assert_close(result["state"]["key_queue.queue"][: WORLD * B], keys, atol=1e-6, rtol=1e-5)
    # Without the shuffle the keys would differ: BatchNorm statistics of the unshuffled halves.
    with torch.no_grad():
        plain = torch.cat([model.key_encoder.projector(model.key_encoder.backbone(half)) for half in view2.split(B)])
    assert not torch.allclose(nn.functional.normalize(plain, dim=1), keys, atol=1e-3)
