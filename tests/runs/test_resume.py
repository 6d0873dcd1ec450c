"""A run killed at any step and resumed ends bit-identical (CPU) to the uninterrupted run.

Kills are placed by step count: mid-epoch (before a batch whose predecessor was not
checkpointed), during the epoch-end online monitor, inside a checkpoint write, and (in a
subprocess) by SIGKILL. The reference is the uninterrupted run with the same seed; the
comparison covers every tensor of the checkpoint (weights, EMA/target networks, queues,
banks, replay buffers, optimiser and scheduler state) and the metrics.jsonl rows.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from conftest import reproducible_rows
from lightning.pytorch.callbacks import Callback

from probcl.core.io import atomic_write
from probcl.core.layout import RunPaths
from probcl.tasks.pretrain import AtomicCheckpointIO, pretrain

# 2 epochs x 4 batches of 16, a checkpoint every 2 steps: the last.ckpt before step k is at 2 * (k // 2).
RUN = {
    "train.epochs": 2,
    "train.limit_train_batches": 4,
    "train.batch_size": 16,
    "train.checkpoint_every_n_steps": 2,
    "train.monitor_train_samples": 100,
    "train.monitor_test_samples": 50,
    "model.proj_hidden": 8,
    "model.proj_out": 8,
}
METHODS = {
    "simclr": {},
    "moco": {"method_args.queue_size": 64},
    "byol": {},
    "vem-langevin": {"method_args.bank_size": 64, "method_args.steps": 2},
    "ebclr": {"method_args.buffer_size": 64, "method_args.sgld.steps": 2},
    "tau-simclr": {},
}


class Killed(BaseException):
    """Stands for the process dying: nothing after it runs (not even Lightning's exception handling
    of ordinary errors matters, as the run is resumed by a new ``pretrain`` call)."""


class KillAt(Callback):
    """Dies when the loop reaches global step ``step`` at ``where``: a batch start or the epoch end
    (this callback runs before the online monitor's results are checkpointed)."""

    def __init__(self, step: int, where: str) -> None:
        self.step, self.where = step, where

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.where == "batch" and trainer.global_step == self.step:
            raise Killed()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.where == "epoch_end" and trainer.global_step == self.step:
            raise Killed()


def _tensors(tree) -> list[torch.Tensor]:
    return [x for x in torch.utils._pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def assert_same_run(reference: Path, resumed: Path) -> None:
    """Every tensor of the final checkpoints is equal, and so are the metrics rows."""
    a = torch.load(RunPaths(reference).last, map_location="cpu", weights_only=False)
    b = torch.load(RunPaths(resumed).last, map_location="cpu", weights_only=False)
    assert a["global_step"] == b["global_step"]
    assert a["state_dict"].keys() == b["state_dict"].keys()
    different = [k for k, v in a["state_dict"].items() if not torch.equal(v, b["state_dict"][k])]
    assert not different, f"state differs after resume: {different[:5]}"
    for part in ("optimizer_states", "lr_schedulers"):
        ta, tb = _tensors(a[part]), _tensors(b[part])
        assert len(ta) == len(tb) and all(torch.equal(x, y) for x, y in zip(ta, tb)), part
    assert a["lr_schedulers"][0]["last_epoch"] == b["lr_schedulers"][0]["last_epoch"]
    assert reproducible_rows(RunPaths(resumed).metrics.read_text()) == reproducible_rows(
        RunPaths(reference).metrics.read_text()
    )


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """The uninterrupted run of every method, made once."""
    from probcl.config import load_config
    from tests.conftest import tiny_overrides

    root = tmp_path_factory.mktemp("reference")
    return {
        m: pretrain(load_config(None, tiny_overrides(root / m, method=m, **RUN, **extra)))
        for m, extra in METHODS.items()
    }


@pytest.mark.parametrize(
    ("method", "step", "where"),
    [
        ("simclr", 4, "epoch_end"),  # during the online monitor: replays batches 3-4 and the monitor
        ("moco", 3, "batch"),  # mid-epoch: queue and key encoder from step 2
        ("byol", 5, "batch"),  # first batch of epoch 1, resumed from the epoch-end checkpoint
        ("vem-langevin", 8, "epoch_end"),
        ("ebclr", 6, "batch"),  # replay buffer and SGLD noise
        ("tau-simclr", 7, "batch"),
    ],
)
def test_killed_run_resumes_bit_identical(tiny_config, references, method, step, where):
    cfg = tiny_config(method, run_name=f"{method}-{where}-{step}", **RUN, **METHODS[method])
    with pytest.raises(Killed):
        pretrain(cfg, callbacks=[KillAt(step, where)])
    pretrain(cfg)
    assert_same_run(references[method], Path(cfg.run_dir))


@pytest.mark.parametrize(("method", "step"), [("simclr", 3), ("ebclr", 6)])
def test_a_bf16_mixed_run_resumes_bit_identical(tiny_config, method, step):
    """Under bf16 autocast on the CPU too (the SGLD chain and replay buffer stay float32)."""
    settings = {**RUN, **METHODS[method], "train.precision": "bf16-mixed"}
    reference = pretrain(tiny_config(method, run_name=f"{method}-bf16-reference", **settings))
    assert torch.load(RunPaths(reference).last, weights_only=False)["probcl_precision"]["precision"] == "bf16-mixed"
    cfg = tiny_config(method, run_name=f"{method}-bf16-resumed", **settings)
    with pytest.raises(Killed):
        pretrain(cfg, callbacks=[KillAt(step, "batch")])
    pretrain(cfg)
    assert_same_run(reference, Path(cfg.run_dir))


def test_a_run_with_device_views_resumes_bit_identical_and_a_kornia_run_resumes_with_them(tiny_config):
    """augment.backend device (auto's choice on CUDA) draws its jitter order from python's random, which the
    exact resume re-seeds before every step as it does torch's. The backend is not part of the recipe, and the
    state dict is the same under both: a run made with kornia's views resumes with the device's."""
    views = {"augment.preset": "byol", "data.channels": 3}  # jitter, grayscale, blur; solarize has kornia state
    device = {**RUN, **views, "augment.backend": "device"}
    reference = pretrain(tiny_config(run_name="device-reference", **device))
    cfg = tiny_config(run_name="device-resumed", **device)
    with pytest.raises(Killed):
        pretrain(cfg, callbacks=[KillAt(3, "batch")])
    pretrain(cfg)
    assert_same_run(reference, Path(cfg.run_dir))

    kornia = tiny_config(run_name="kornia-then-device", **{**RUN, **views, "augment.backend": "kornia"})
    with pytest.raises(Killed):
        pretrain(kornia, callbacks=[KillAt(3, "batch")])
    resumed = pretrain(tiny_config(run_name="kornia-then-device", **device))
    assert torch.load(RunPaths(resumed).last, weights_only=False)["global_step"] == 8


def test_kill_inside_a_checkpoint_write_keeps_the_previous_one(tiny_config, references, monkeypatch):
    """The epoch-end checkpoint write (step 4) dies half-way: last.ckpt stays the step-2 one."""
    cfg = tiny_config("simclr", run_name="torn", **RUN)
    real = AtomicCheckpointIO.save_checkpoint

    def torn(fh) -> None:
        fh.write(b"half a checkpoint")
        raise Killed()

    def dying_save(self, checkpoint, path, storage_options=None):
        if checkpoint["global_step"] == 4 and Path(path).name == "last.ckpt":
            atomic_write(path, torn)
        real(self, checkpoint, path, storage_options)

    monkeypatch.setattr(AtomicCheckpointIO, "save_checkpoint", dying_save)
    with pytest.raises(Killed):
        pretrain(cfg)
    monkeypatch.undo()
    assert torch.load(RunPaths(cfg.run_dir).last, weights_only=False)["global_step"] == 2
    pretrain(cfg)
    assert_same_run(references["simclr"], Path(cfg.run_dir))


SIGKILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from lightning.pytorch.callbacks import Callback
    from probcl.config import load_config
    from probcl.tasks.pretrain import pretrain
    from tests.conftest import tiny_overrides
    from tests.runs.test_resume import RUN

    class SigKill(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == int(sys.argv[2]):
                os.kill(os.getpid(), signal.SIGKILL)

    pretrain(load_config(None, tiny_overrides(sys.argv[1], method="simclr", **RUN)), callbacks=[SigKill()])
""")


def test_sigkill_mid_epoch_then_resume(tiny_config, references, tmp_path):
    cfg = tiny_config("simclr", run_name="sigkill", **RUN)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            str(p) for p in (Path(__file__).resolve().parents[2], Path(__file__).resolve().parents[1])
        ),
        "PROBCL_NO_PROGRESS": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", SIGKILL_SCRIPT, cfg.run_dir, "7"],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert torch.load(RunPaths(cfg.run_dir).last, weights_only=False)["global_step"] == 6
    pretrain(cfg)
    assert_same_run(references["simclr"], Path(cfg.run_dir))


class SignalAt(Callback):
    """Sends ``signum`` to this process during the batch of global step ``step`` (as SLURM or Ctrl-C would)."""

    def __init__(self, signum: int, step: int) -> None:
        self.signum, self.step = signum, step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_checkpoint_the_current_step(tiny_config, references, signum):
    from probcl.errors import RunError

    cfg = tiny_config("simclr", run_name=f"signal-{signum}", **RUN)
    before = signal.getsignal(signal.SIGINT)  # default_int_handler, or SIG_IGN when started in the background
    with pytest.raises(RunError, match=f"stopped by {signal.Signals(signum).name} after step 6.*Run the same") as e:
        pretrain(cfg, callbacks=[SignalAt(signum, 5)])  # the batch of step 5 finishes, then the stop
    assert e.value.exit_code == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum]  # as a shell reports the signal
    assert torch.load(RunPaths(cfg.run_dir).last, weights_only=False)["global_step"] == 6  # not the step-4 one
    assert signal.getsignal(signal.SIGINT) is before  # the stop handler is uninstalled
    pretrain(cfg)
    assert_same_run(references["simclr"], Path(cfg.run_dir))


class CtrlCTwiceAt(SignalAt):
    """Two Ctrl-Cs in the batch of global step ``step``: the second interrupts at once."""

    def __init__(self, step: int) -> None:
        super().__init__(signal.SIGINT, step)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)


def test_a_second_ctrl_c_stops_at_once_keeping_the_last_saved_state(tiny_config, references):
    from probcl.errors import StoppedBySignal

    cfg = tiny_config("simclr", run_name="twice", **RUN)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(StoppedBySignal, match="stopped by a second Ctrl-C at step 5, before that step's state") as e:
        pretrain(cfg, callbacks=[CtrlCTwiceAt(5)])
    assert e.value.exit_code == 130
    assert f"{RunPaths(cfg.run_dir).last} holds the last state saved and is intact" in str(e.value)
    assert torch.load(RunPaths(cfg.run_dir).last, weights_only=False)["global_step"] == 4  # every 2 steps: 4
    assert signal.getsignal(signal.SIGINT) is before  # not Lightning's SIG_IGN, nor the stop's handlers
    pretrain(cfg)
    assert_same_run(references["simclr"], Path(cfg.run_dir))


def test_ctrl_c_twice_before_any_checkpoint_says_the_run_starts_over(tiny_config):
    from probcl.errors import StoppedBySignal

    cfg = tiny_config("simclr", run_name="early", **RUN)
    with pytest.raises(StoppedBySignal, match="at step 0, .*no checkpoint had been written yet. Run the same"):
        pretrain(cfg, callbacks=[CtrlCTwiceAt(0)])
    assert not RunPaths(cfg.run_dir).last.exists()


# Lightning's own checkpoint callback would warn that the folder moved, and drop the best score with it
@pytest.mark.filterwarnings("error:The dirpath has changed")
def test_a_moved_run_resumes_as_the_same_run(tiny_config, tmp_path):
    """Moving a run directory (or a benchmark's --out) changes no setting: the moved copy resumes exactly
    as the run left in place does."""
    pretrain(tiny_config(run_name="here", **{"train.epochs": 1}))
    shutil.copytree(tmp_path / "here", tmp_path / "moved")
    pretrain(tiny_config(run_name="here", **{"train.epochs": 2}))
    pretrain(tiny_config(run_name="moved", **{"train.epochs": 2}))
    assert_same_run(tmp_path / "here", tmp_path / "moved")


def test_a_moved_runs_checkpoint_callback_keeps_its_best_score_and_paths_in_the_new_folder(tmp_path):
    """Lightning's ModelCheckpoint drops the best score of a moved run, and the next monitored epoch then replaces
    best.ckpt however much worse it is; probcl's keeps the score and re-roots the paths."""
    from probcl.tasks.pretrain import RunCheckpoint

    old, new = tmp_path / "old" / "checkpoints", tmp_path / "new" / "checkpoints"
    state = {
        "monitor": "monitor/knn_top1",
        "best_model_score": torch.tensor(81.5),
        "best_model_path": str(old / "best.ckpt"),
        "current_score": torch.tensor(79.0),
        "dirpath": str(old),
        "best_k_models": {str(old / "best.ckpt"): torch.tensor(81.5)},
        "kth_best_model_path": str(old / "best.ckpt"),
        "kth_value": torch.tensor(81.5),
        "last_model_path": "",
    }
    callback = RunCheckpoint(dirpath=new, filename="best", monitor="monitor/knn_top1", mode="max", save_top_k=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        callback.load_state_dict(state)
    assert callback.best_model_score == 81.5 and callback.kth_value == 81.5
    assert Path(callback.best_model_path) == new / "best.ckpt" == Path(callback.kth_best_model_path)
    assert {Path(p): float(v) for p, v in callback.best_k_models.items()} == {new / "best.ckpt": 81.5}
    assert callback.last_model_path == ""  # no path: nothing to move


def test_probcls_checkpoint_callbacks_keep_the_state_keys_runs_were_saved_under():
    """A run saved before RunCheckpoint existed holds ModelCheckpoint's and MidEpochCheckpoint's state keys: a new
    class name would leave that state unread on resume (and the best score with it)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from probcl.tasks.pretrain import MidEpochCheckpoint, RunCheckpoint

    best = {"monitor": "monitor/knn_top1", "mode": "max", "save_top_k": 1}
    assert RunCheckpoint(**best).state_key == ModelCheckpoint(**best).state_key
    assert RunCheckpoint(filename="last").state_key == ModelCheckpoint(filename="last").state_key
    every = MidEpochCheckpoint(filename="last", every_n_train_steps=50).state_key
    assert every == ModelCheckpoint(filename="last", every_n_train_steps=50).state_key.replace(
        "ModelCheckpoint", "MidEpochCheckpoint", 1
    )
