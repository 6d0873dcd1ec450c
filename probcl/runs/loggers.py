"""The optional loggers of ``train.loggers``: TensorBoard, MLflow and Weights & Biases.

Each writes into the run directory (``tensorboard/``, ``mlruns/``, ``wandb/``) unless its own
environment variables point elsewhere (``MLFLOW_TRACKING_URI``; W&B online mode). The MLflow run id
and the W&B run id are kept in ``RUN/loggers.json``, so a resumed run keeps logging into the same
MLflow and W&B runs.
"""

from __future__ import annotations

import importlib
import os
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import Logger, MLFlowLogger, TensorBoardLogger, WandbLogger

from probcl.core.io import atomic_write_json, read_json
from probcl.errors import ConfigError

IDS_FILE = "loggers.json"  # in the run directory: {"mlflow": run id, "wandb": run id}


def check_loggers(names: Sequence[str]) -> None:
    """One ConfigError for the first logger whose package is missing, naming the extra that installs it.

    The module each logger needs has the logger's name, and so has probcl's extra that installs it."""
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            raise ConfigError(
                f"train.loggers: {name} needs the {name} package: pip install 'probcl[{name}]' "
                f"(or drop {name} from train.loggers)"
            ) from None


class _WandbLogger(WandbLogger):
    """Lightning's W&B logger, ending its W&B run when training ends or fails (so that a later run in this
    process starts its own; a failed run is marked so, and resumes under the same id). Lightning's
    "finished" (a SLURM requeue signal) leaves the run open: the process goes on until SLURM stops it."""

    def finalize(self, status: str) -> None:
        super().finalize(status)
        if self._experiment is not None and status in ("success", "failed"):
            self._experiment.finish(exit_code=0 if status == "success" else 1)


class _MLFlowLogger(MLFlowLogger):
    """Lightning's MLflow logger; a resumed run keeps the params logged when it started (MLflow refuses
    a changed value, and resuming may change ``train.epochs``: config.yaml holds the current config)."""

    def __init__(self, *args: Any, resumed: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resumed = resumed

    def log_hyperparams(self, params: Any) -> None:
        if not self.resumed:
            super().log_hyperparams(params)


def extra_loggers(names: Sequence[str], root: Path, resuming: bool) -> list[Logger]:
    """The loggers named in ``train.loggers`` for the run in ``root``; ``resuming``: continue the MLflow
    and W&B runs recorded in ``root/loggers.json`` (else start new ones and record them there)."""
    check_loggers(names)
    ids: dict[str, Any] = read_json(root / IDS_FILE, {}) if resuming else {}
    loggers: list[Logger] = []
    for name in names:
        if name == "tensorboard":
            loggers.append(TensorBoardLogger(root, name="tensorboard", version="", default_hp_metric=False))
        elif name == "wandb":
            ids.setdefault("wandb", secrets.token_hex(4))
            loggers.append(
                _WandbLogger(
                    save_dir=str(root),
                    name=root.name,
                    id=ids["wandb"],
                    resume="allow",
                    project=os.environ.get("WANDB_PROJECT", "probcl"),
                )
            )
        else:
            mlflow = _mlflow_logger(root, ids.get("mlflow"))
            ids["mlflow"] = mlflow.run_id  # starts the MLflow run (on rank 0; None elsewhere)
            loggers.append(mlflow)
    if ids:
        _save_ids(root / IDS_FILE, ids)
    return loggers


@rank_zero_only
def _save_ids(path: Path, ids: dict[str, Any]) -> None:
    atomic_write_json(path, ids)


def _mlflow_logger(root: Path, run_id: str | None) -> _MLFlowLogger:
    """MLflow logger: to ``$MLFLOW_TRACKING_URI`` when set, else to a file store in ``root/mlruns``
    (which MLflow 3 accepts with ``MLFLOW_ALLOW_FILE_STORE=true``, set here unless already set)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        uri = (root / "mlruns").resolve().as_uri()
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return _MLFlowLogger(
        experiment_name=os.environ.get("MLFLOW_EXPERIMENT_NAME", "probcl"),
        run_name=root.name,
        tracking_uri=uri,
        run_id=run_id,
        resumed=run_id is not None,
    )
