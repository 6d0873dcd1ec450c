"""`probcl pretrain`: data -> method -> Lightning Trainer, with atomic checkpoints and automatic resume."""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import yaml
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.callbacks import Callback, LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException

from probcl.config import Config, ConfigError, TrainConfig, from_dict, recipe_changes, save_config
from probcl.core.io import torch_load_problem
from probcl.core.layout import RunPaths
from probcl.core.process_clock import seconds_since_process_start
from probcl.core.run_lock import RunLock, move_aside
from probcl.core.termination import sigterm_deferred
from probcl.data.info import data_info_for
from probcl.data.loaders import load_dataset
from probcl.data.sources import ImageSource, TensorImages, pretraining_indices, random_subset
from probcl.data.unreadable import UnreadableFiles
from probcl.errors import RunError
from probcl.eval.features import extract
from probcl.eval.knn import topk_accuracy, weighted_knn_scores
from probcl.methods import METHODS, SSLMethod
from probcl.runs.loggers import check_loggers, extra_loggers
from probcl.runs.metrics_log import JsonlLogger
from probcl.runs.progress_bar import LoggedStepProgressBar
from probcl.runs.resume import ExactResume, GracefulStop, ResumableLoader
from probcl.runtime.precision import PrecisionChoice, resolve_precision
from probcl.runtime.torch_files import atomic_torch_save
from probcl.tasks.startup import announce, limited_batches, steps_per_epoch, summarize

# Lightning's info lines that a run has no use for: its advertising tips, the device lines that the start-up
# summary replaces (it names the device and precision used) and its step-count estimate, printed on every run
LIGHTNING_NOISE = ("Tip:", "GPU available:", "TPU available:", "HPU available:", "Loading `train_dataloader`")


class _DropTips(logging.Filter):
    """Hide :data:`LIGHTNING_NOISE`; Lightning's other messages stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(noise in record.getMessage() for noise in LIGHTNING_NOISE)


logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_DropTips())

# Warnings of the training stack that a probcl run has already dealt with, silenced by message during
# ``trainer.fit`` (regex -> why no user needs to act on it); any other warning is shown.
HANDLED_WARNINGS = {
    ".*does not have many workers.*": "in-memory data is batched in the main process; a folder's decoding "
    "processes are --num-workers",
    ".*LeafSpec.*": "Lightning's own use of a deprecated torch pytree class",
    "Checkpoint directory .* exists and is not empty": "a run directory's checkpoints are its own: a resume "
    "continues from last.ckpt and --no-resume moves the old files aside first",
    "Be aware that when using `ckpt_path`, callbacks used to create the checkpoint": "a resume may turn the online "
    "monitor or mid-epoch checkpoints off (runtime settings); their state waits in the checkpoint for a resume "
    "that turns them on again",
    r"Found \d+ module\(s\) in eval mode": "only a method's frozen part is (tau-posthoc's backbone, whose BatchNorm "
    "statistics stay fixed): every run builds its model afresh, in train mode",
}


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write checkpoints to a temporary file and rename, so a killed run never leaves a torn file."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options: Any | None = None) -> None:
        try:
            atomic_torch_save(path, checkpoint)
        except RunError as e:
            raise RunError(f"{e} (pretraining resumes from its last checkpoint)") from None


class RunCheckpoint(ModelCheckpoint):
    """A checkpoint callback whose run folder may move (a copied run, a benchmark's new ``--out``): resuming from
    the moved folder keeps the best score and the saved paths, re-rooted in the new folder. Lightning's own
    callback drops them with a warning, after which the next monitored epoch replaces ``best.ckpt`` however
    much worse it was."""

    STATE_NAME = "ModelCheckpoint"  # the name in the checkpoint's callback state keys: runs saved before this class

    @property
    def state_key(self) -> str:
        """Lightning's key for this callback's state (its class name, then its settings), with the class name runs
        were saved under."""
        return self.STATE_NAME + super().state_key.removeprefix(type(self).__qualname__)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old = state_dict.get("dirpath")
        if old and self.dirpath and old != self.dirpath:
            state_dict = _rerooted(state_dict, Path(old), Path(self.dirpath))
        super().load_state_dict(state_dict)


def _rerooted(state: dict[str, Any], old: Path, new: Path) -> dict[str, Any]:
    """``state`` of a :class:`ModelCheckpoint` with its folder ``old`` and the paths inside it moved to ``new``."""

    def moved(path: str) -> str:
        return str(new / Path(path).relative_to(old)) if path and Path(path).is_relative_to(old) else path

    paths = ("best_model_path", "kth_best_model_path", "last_model_path")
    return {
        **state,
        **{key: moved(state[key]) for key in paths if key in state},
        "best_k_models": {moved(path): score for path, score in state.get("best_k_models", {}).items()},
        "dirpath": str(new),
    }


class MidEpochCheckpoint(RunCheckpoint):
    """Every-N-steps checkpoints, except at an epoch's last batch: the epoch-end checkpoint follows
    the epoch-end work (online monitor), so a kill during that work replays it on resume."""

    STATE_NAME = "MidEpochCheckpoint"

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx + 1 < trainer.num_training_batches:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


PRECISION_KEY = "probcl_precision"  # the checkpoint's record of the precision choice


class PrecisionRecord(Callback):
    """Keeps the run's precision choice (what ``train.precision`` resolved to on this machine, and why) in every
    checkpoint, under :data:`PRECISION_KEY`."""

    def __init__(self, choice: PrecisionChoice) -> None:
        self.choice = choice

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        checkpoint[PRECISION_KEY] = asdict(self.choice)


class StartupClock(Callback):
    """Says how long a run took to reach its first optimiser step and how long that step took (kernel warm-up makes
    it slower than the rest), on stderr from rank zero. The first run of a process counts from the process's start
    (interpreter start, imports, data and model set-up; a resumed run from its own restart): ``probcl: first step
    began 2.1 s after start and took 0.40 s``; a later run in the same process (a benchmark's next cell) from its
    own :func:`pretrain` call: ``... began 1.3 s after this run's call and took 0.21 s``."""

    first_of_process = True  # class-wide: no run of this process has reported yet

    def __init__(self, called: float) -> None:
        self.called = called  # perf_counter() when pretrain() was called
        self.began: tuple[float, float] | None = None  # (seconds since the clock's origin, perf_counter) at step one
        self.reported = False

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int):
        if self.began is None:
            now = time.perf_counter()
            since = seconds_since_process_start() if StartupClock.first_of_process else now - self.called
            self.began = (since, now)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx: int):
        if self.began is None or self.reported:
            return
        self.reported = True
        origin = "start" if StartupClock.first_of_process else "this run's call"
        StartupClock.first_of_process = False
        if _is_rank_zero():
            startup, began = self.began
            took = time.perf_counter() - began
            print(f"probcl: first step began {startup:.1f} s after {origin} and took {took:.2f} s", file=sys.stderr)


class OnlineMonitor(Callback):
    """Per-epoch weighted kNN (k=200, T=0.1, cosine, backbone features) and online-probe accuracy
    on a fixed labeled test subset, against a fixed labeled training subset (clean images).

    Its cost is kept small by default (5,000 + 2,000 images, see ``TrainConfig``) and logged as
    ``monitor/seconds``, next to ``monitor/share`` (its fraction of the wall time so far)."""

    K, T = 200, 0.1

    def __init__(self, train: TensorImages, test: TensorImages, every_n_epochs: int = 1) -> None:
        self.train, self.test, self.every = train, test, max(1, every_n_epochs)
        self.spent = 0.0
        self.started = time.perf_counter()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.spent, self.started = 0.0, time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert isinstance(pl_module, SSLMethod)
        epoch = trainer.current_epoch + 1
        if epoch % self.every and epoch != trainer.max_epochs:
            return
        start = time.perf_counter()
        metrics = self.measure(pl_module)
        seconds = time.perf_counter() - start
        self.spent += seconds
        metrics["monitor/seconds"] = seconds
        metrics["monitor/share"] = self.spent / max(time.perf_counter() - self.started, 1e-9)
        pl_module.log_dict(metrics, on_epoch=True, prog_bar=True, sync_dist=True)  # equal on all ranks
        rank_zero_only(print)(
            f"monitor (epoch {epoch}): kNN {metrics['monitor/knn_top1']:.2f} %, {seconds:.1f} s "
            f"({100 * metrics['monitor/share']:.1f} % of the run's time so far)"
        )

    def measure(self, pl_module: SSLMethod) -> dict[str, float]:
        """kNN and online-probe top-1 of the current encoder on the monitor sets."""
        was_training = pl_module.training
        pl_module.eval()
        device = pl_module.device
        train_f, train_y = extract(pl_module.embed, self.train, device=device, description="monitor: train features")
        test_f, test_y = extract(pl_module.embed, self.test, device=device, description="monitor: test features")
        classes = pl_module.data_info.num_classes
        assert classes is not None  # monitor sets are made only for labeled data
        knn = topk_accuracy(weighted_knn_scores(train_f, train_y, test_f, classes, self.K, self.T), test_y)
        metrics = {"monitor/knn_top1": knn["top1"], "monitor/knn_top5": knn.get("top5", knn["top1"])}
        if pl_module.online_probe is not None:
            with torch.no_grad():
                logits = pl_module.online_probe(test_f.to(pl_module.device)).cpu()
            metrics["monitor/probe_top1"] = topk_accuracy(logits, test_y, (1,))["top1"]
        pl_module.train(was_training)
        return metrics


def _monitor_sets(
    cfg: Config, train: ImageSource, seed: int, unreadable: UnreadableFiles
) -> tuple[TensorImages, TensorImages] | None:
    """Seeded subsets of the labeled training images and of the test set, in memory (streamed folders decoded
    once, in ``data.num_workers`` processes)."""
    labels = train.labels()
    if labels is None or not (labels >= 0).any():
        return None
    d = cfg.data
    test = load_dataset(d.dataset, "test", d.root, d.download, d.image_size, train.channels, unreadable=unreadable)
    if test.labels() is None:
        return None
    t, workers = cfg.train, cfg.data.num_workers
    labeled = torch.nonzero(labels >= 0).flatten()  # all of them but STL-10's unlabeled images
    train_mon = train.subset(labeled[random_subset(len(labeled), min(len(labeled), t.monitor_train_samples), seed)])
    test_mon = test.subset(random_subset(len(test), min(len(test), t.monitor_test_samples), seed))
    return train_mon.to_memory(workers), test_mon.to_memory(workers)


DAMAGED = (
    "probcl writes it atomically, so it was changed outside probcl: restore it from a copy, or start over "
    "with --no-resume (moves this run's files aside)"
)


def _checkpoint_config(path: Path) -> dict | None:
    """The config a checkpoint was trained with (None when it records none); a checkpoint that cannot be read
    (cut short, garbled) is one RunError, refusing the resume."""
    try:  # mmap: the tensors are not read; a cut-short or garbled archive still fails here
        checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing here
        raise RunError(f"cannot resume from {path}: {torch_load_problem(path, e)}. {DAMAGED}") from None
    saved = checkpoint.get("hyper_parameters", {}).get("config") if isinstance(checkpoint, dict) else None
    return saved if isinstance(saved, dict) else None


def _check_resume_config(paths: RunPaths, cfg: Config, in_checkpoint: dict | None) -> None:
    """Refuse to resume a run whose saved recipe differs from the requested one (epochs may grow; locations,
    hardware, logging and checkpoint frequency may change: :func:`probcl.config.recipe`): the one in config.yaml
    (a damaged one is one RunError), then the one in the checkpoint itself (config.yaml edited by hand)."""
    if paths.config.exists():
        try:
            tree = yaml.safe_load(paths.config.read_text())
        except (yaml.YAMLError, OSError, ValueError) as e:
            raise RunError(f"cannot read {paths.config} to resume: {' '.join(str(e).split())}. {DAMAGED}") from None
        if not isinstance(tree, dict):
            raise RunError(f"cannot read {paths.config} to resume: it holds no config mapping. {DAMAGED}")
        _refuse_recipe_changes(from_dict(Config, tree), cfg, str(paths.root))
    if in_checkpoint is not None:
        try:
            recorded = from_dict(Config, in_checkpoint)
        except ConfigError:
            return  # a checkpoint of an older probcl whose keys changed since: config.yaml's check stands
        _refuse_recipe_changes(recorded, cfg, f"{paths.last}, whose saved config was changed by hand,")


def _refuse_recipe_changes(saved_config: Config, cfg: Config, holder: str) -> None:
    saved, new = saved_config.to_dict(), cfg.to_dict()
    saved["train"]["epochs"] = new["train"]["epochs"]
    changes = recipe_changes(saved, new)
    if changes:
        raise ConfigError(
            f"{holder} holds a run trained with other settings: {'; '.join(changes)}. "
            f"Resume with the saved settings, use a new --run-dir, or --no-resume to start over in this one."
        )


def _is_rank_zero() -> bool:
    """True in the process that writes the run directory."""
    return rank_zero_only.rank == 0  # type: ignore[attr-defined]  # set on the function by Lightning


def _trainer(**kwargs: Any) -> pl.Trainer:
    """``pl.Trainer(**kwargs)``, with Lightning's refusals of the hardware settings as ConfigError."""
    try:
        return pl.Trainer(**kwargs)
    except (MisconfigurationException, ValueError, RuntimeError, ImportError) as e:  # ImportError: tpu, no torch_xla
        raise ConfigError(
            f"train settings rejected by Lightning: {e}. Check --accelerator, --devices, --strategy and --precision"
        ) from None


def _trains_on_gpu(t: TrainConfig) -> bool:
    """Whether the run's accelerator setting resolves to CUDA GPUs on this machine."""
    return t.accelerator in ("gpu", "cuda") or (t.accelerator == "auto" and torch.cuda.is_available())


def _single_gpu(t: TrainConfig) -> torch.device | None:
    """The one CUDA device a single-process run trains on, or None (CPU, several devices or machines)."""
    if not _trains_on_gpu(t) or t.num_nodes > 1:
        return None
    devices = t.devices
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    if devices == 1 or (devices == "auto" and torch.cuda.device_count() == 1):
        return torch.device("cuda", 0)
    if isinstance(devices, (list, tuple)) and len(devices) == 1 and isinstance(devices[0], int):
        return torch.device("cuda", devices[0])
    return None


def resolve_deterministic(t: TrainConfig) -> tuple[bool, str]:
    """``train.deterministic`` for this machine, with the reason the run prints: ``auto`` is on for CPUs (it costs
    nothing there and keeps a resumed run bit-identical) and off on CUDA (cuDNN's autotuner then picks the fastest
    convolution kernels, at the price of run-to-run bit differences)."""
    gpu = _trains_on_gpu(t)
    if t.deterministic == "auto":
        if gpu:
            return False, (
                "deterministic auto -> off on CUDA: cuDNN's autotuner picks the fastest kernels; a seeded run is "
                "then not bit-identical on GPU (--train.deterministic true for that; its cost: docs/speed.md)"
            )
        return True, "deterministic auto -> on (CPU: costs nothing; a seeded or resumed run is bit-identical)"
    on = bool(t.deterministic)
    return on, f"deterministic {'on' if on else 'off'} (train.deterministic {str(on).lower()})"


def check_devices(t: TrainConfig) -> None:
    """Refuse ``train.devices`` beyond what this machine has (GPUs when used, else CPU cores)."""
    gpu = _trains_on_gpu(t)
    have = torch.cuda.device_count() if gpu else (os.cpu_count() or 1)
    kind = "GPUs" if gpu else "CPU cores"
    devices = t.devices
    if isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        devices = int(devices)
    if isinstance(devices, int) and not isinstance(devices, bool):
        wanted = have if devices == -1 else devices
        if not 1 <= wanted <= have:
            raise ConfigError(
                f"train.devices={t.devices} but this machine has {have} {kind}; use 1..{have}, -1 (all) or auto"
            )
    elif isinstance(devices, (list, tuple)):
        bad = [d for d in devices if not isinstance(d, int) or not 0 <= d < have]
        if bad or not devices:
            raise ConfigError(f"train.devices={t.devices}: ids must be in 0..{have - 1} ({have} {kind} here)")
    elif devices != "auto":
        raise ConfigError(f"train.devices={t.devices!r}: use a count, a list of ids, -1 or auto")


def check_nodes(t: TrainConfig) -> None:
    """Refuse ``train.num_nodes`` > 1 where nothing tells the processes where the other machines are: no cluster
    environment Lightning detects (torchrun, SLURM, LSF, MPI) and no ``MASTER_ADDR`` (which Kubeflow and a manual
    set-up give). Lightning would wait for the missing nodes with no end."""
    if t.num_nodes == 1 or os.environ.get("MASTER_ADDR"):
        return
    from lightning.fabric.plugins.environments import (
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    clusters = (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment)
    if not any(cluster.detect() for cluster in clusters):
        raise ConfigError(
            f"train.num_nodes={t.num_nodes}, but nothing says where the other machines are: start the command on "
            f"every node under torchrun (--nnodes, --node-rank, --master-addr) or SLURM's srun, or set MASTER_ADDR, "
            f"MASTER_PORT and NODE_RANK on each (docs/how-to/distributed.md); on one machine use --num-nodes 1"
        )


def pretrain(cfg: Config, resume: bool | None = None, callbacks: Sequence[Callback] = ()) -> Path:
    """Train ``cfg.method``; resumes from ``last.ckpt`` when it exists (unless ``resume=False``).

    ``callbacks`` are extra Lightning callbacks (e.g. for custom logging).
    """
    called = time.perf_counter()
    cfg = METHODS.get(cfg.method).prepare_config(cfg)
    paths = RunPaths(Path(cfg.run_dir))
    check_devices(cfg.train)
    check_nodes(cfg.train)
    check_loggers(cfg.train.loggers)
    with RunLock(paths.root, "pretrain") if _is_rank_zero() else nullcontext():
        if resume is False and _is_rank_zero():
            moved = move_aside(paths)
            if moved is not None:
                print(f"probcl: --no-resume: the previous run's files were moved to {moved}", file=sys.stderr)
        return _pretrain(cfg, paths, resume, callbacks, called)


def _pretrain(cfg: Config, paths: RunPaths, resume: bool | None, callbacks: Sequence[Callback], called: float) -> Path:
    ckpt_path = _checkpoint_to_resume(cfg, paths, resume)
    method_cls = METHODS.get(cfg.method)
    hp = method_cls.params(cfg)  # validated once, before loading data; the model receives it
    pl.seed_everything(cfg.train.seed, workers=True, verbose=False)
    unreadable = UnreadableFiles(cfg.data.on_unreadable)
    train = _training_set(cfg, unreadable)
    info = data_info_for(cfg, train)
    model = method_cls(cfg, info, hp)
    model.use_training_data(train)
    t = cfg.train
    if t.compile:
        model.backbone.compile()  # in place: parameter names (and checkpoints) stay as they are

    metrics_log = JsonlLogger(paths.metrics)
    stop = GracefulStop(paths.last)
    loader = ResumableLoader(
        train,
        t.batch_size,
        t.seed,
        num_workers=cfg.data.num_workers,
        persistent_workers=cfg.data.num_workers > 0,
        pin_memory=torch.cuda.is_available(),
    )
    gpu = _single_gpu(t)
    if gpu is not None and loader.hold_on(gpu) and _is_rank_zero():
        print(f"probcl: the training set is held on {gpu}: batches are made there", file=sys.stderr)
    precision = resolve_precision(t.precision, t.accelerator)
    deterministic, deterministic_reason = resolve_deterministic(t)
    callbacks = [
        *callbacks,
        ExactResume(loader, t.seed, metrics_log),
        stop,
        PrecisionRecord(precision),
        StartupClock(called),
        *_checkpoint_callbacks(paths, t),
        *_monitor_callbacks(cfg, train, paths, unreadable),
        *([LoggedStepProgressBar()] if t.progress_bar else []),
    ]
    loggers: list[Logger] = [metrics_log, *extra_loggers(t.loggers, paths.root, resuming=ckpt_path is not None)]
    if _is_rank_zero():
        unreadable.report(paths.unreadable)
        print(f"probcl: {precision.line()}", file=sys.stderr)
        print(f"probcl: {deterministic_reason}", file=sys.stderr)
    trainer = _configured_trainer(cfg, paths, loggers, callbacks, precision.precision, len(loader), deterministic)
    if _is_rank_zero():  # once Lightning took the settings; a resumed run records those it continues with
        paths.root.mkdir(parents=True, exist_ok=True)
        save_config(cfg, paths.config)
        announce(summarize(cfg, train, trainer))
    with warnings.catch_warnings():
        for message in HANDLED_WARNINGS:
            warnings.filterwarnings("ignore", message)
        try:
            with sigterm_deferred():  # Lightning's connector takes SIGTERM here: stop after this step, state saved
                trainer.fit(model, loader, ckpt_path=str(ckpt_path) if ckpt_path else None, weights_only=False)
        except SIGTERMException:
            raise stop.stopped(trainer.global_step) from None
        except SystemExit as e:  # Lightning's exit after a KeyboardInterrupt (its message is printed already)
            if not isinstance(e.__context__, KeyboardInterrupt):
                raise
            raise stop.interrupted(trainer.global_step) from None
        finally:
            stop.restore_sigint()
    return paths.root


def _checkpoint_to_resume(cfg: Config, paths: RunPaths, resume: bool | None) -> Path | None:
    """``last.ckpt`` when the run resumes (it exists and ``resume`` is not False), checked against the config;
    ``--resume`` without one is an error."""
    ckpt_path = paths.last if paths.last.exists() and resume is not False else None
    if resume and ckpt_path is None:
        raise ConfigError(f"--resume given but {paths.last} does not exist")
    if ckpt_path is not None:
        _check_resume_config(paths, cfg, _checkpoint_config(ckpt_path))
    return ckpt_path


def _training_set(cfg: Config, unreadable: UnreadableFiles) -> ImageSource:
    """The pretraining images (``data.train_subset``: a seeded subset), each folder checked once for unreadable
    files; a batch the data cannot fill is refused here, before any model is built."""
    d = cfg.data
    channels = None if d.channels == "auto" else d.channels
    train = load_dataset(d.dataset, "pretrain", d.root, d.download, d.image_size, channels, unreadable=unreadable)
    indices = pretraining_indices(len(train), d.train_subset, cfg.train.seed)
    if len(indices) < len(train):
        train = train.subset(indices)
    steps_per_epoch(len(train), cfg.train.batch_size, limit=cfg.train.limit_train_batches)
    return train


def _checkpoint_callbacks(paths: RunPaths, t: TrainConfig) -> list[Callback]:
    """``last.ckpt``: the latest state, every epoch (and every N steps when asked), replaced atomically."""
    callbacks: list[Callback] = [
        RunCheckpoint(dirpath=paths.checkpoints, filename="last", save_top_k=1, enable_version_counter=False),
        LearningRateMonitor(logging_interval="epoch"),
    ]
    if t.checkpoint_every_n_steps:
        callbacks.append(
            MidEpochCheckpoint(
                dirpath=paths.checkpoints,
                filename="last",
                save_top_k=1,
                enable_version_counter=False,
                every_n_train_steps=t.checkpoint_every_n_steps,
            )
        )
    return callbacks


def _monitor_callbacks(cfg: Config, train: ImageSource, paths: RunPaths, unreadable: UnreadableFiles) -> list:
    """The online kNN monitor and the ``best.ckpt`` it selects, when the data has labels and it is asked for."""
    if cfg.train.monitor_every_n_epochs <= 0:  # the test split is not even loaded (held-out tuning relies on it)
        return []
    monitor_sets = _monitor_sets(cfg, train, cfg.train.seed, unreadable)
    if monitor_sets is None:
        return []
    best = RunCheckpoint(
        dirpath=paths.checkpoints,
        filename="best",
        monitor="monitor/knn_top1",
        mode="max",
        save_top_k=1,
        enable_version_counter=False,
    )
    return [OnlineMonitor(*monitor_sets, every_n_epochs=cfg.train.monitor_every_n_epochs), best]


def _configured_trainer(
    cfg: Config,
    paths: RunPaths,
    loggers: list[Logger],
    callbacks: list,
    precision: str,
    batches: int,
    deterministic: bool,
) -> pl.Trainer:
    """The Lightning trainer of a run: its hardware, precision, determinism and epoch limits (``batches`` per
    epoch before ``train.limit_train_batches``), our checkpoint I/O; sync BatchNorm on CPU refused."""
    t = cfg.train
    limit = t.limit_train_batches
    trainer = _trainer(
        max_epochs=t.epochs,
        accelerator=t.accelerator,
        devices=t.devices,
        strategy=t.strategy,
        num_nodes=t.num_nodes,
        precision=precision,
        sync_batchnorm=t.sync_batchnorm,
        deterministic="warn" if deterministic else False,
        benchmark=not deterministic,  # cuDNN's autotuner (ignored on CPU)
        default_root_dir=str(paths.root),
        logger=loggers,
        callbacks=callbacks,
        plugins=[AtomicCheckpointIO()],
        limit_train_batches=(int(limit) if limit is not None and float(limit).is_integer() else limit),
        log_every_n_steps=max(1, min(10, limited_batches(batches, limit))),  # Lightning warns above an epoch
        enable_progress_bar=t.progress_bar,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,  # ResumableLoader shards by rank itself
    )
    if t.sync_batchnorm and trainer.world_size > 1 and isinstance(trainer.accelerator, CPUAccelerator):
        raise ConfigError(
            "train.sync_batchnorm needs GPUs (torch's SyncBatchNorm has no CPU kernel); drop "
            "--sync-batchnorm on CPU (MoCo keeps method_args.shuffle_bn instead)"
        )
    return trainer
