"""TensorBoard, MLflow and W&B receive every metric of metrics.jsonl, read back from their own files;
a crashed run resumes into the same MLflow and W&B runs; a missing package names its extra."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest
from lightning.pytorch.callbacks import Callback

from probcl.core.metrics_file import read_rows
from probcl.errors import ConfigError
from probcl.tasks.pretrain import pretrain

LOGGERS = ["tensorboard", "mlflow", "wandb"]
# 128 images in batches of 32: 4 steps an epoch, and a logged row every 4 steps.
RUN = {
    "train.loggers": LOGGERS,
    "data.train_subset": 128,
    "train.limit_train_batches": None,
    "model.proj_hidden": 8,
    "model.proj_out": 8,
    "train.monitor_train_samples": 100,
    "train.monitor_test_samples": 50,
}
DIAGNOSTICS = {  # what each method logs besides its loss (see its step())
    "vem-langevin": ({"method_args.bank_size": 64, "method_args.steps": 2}, "train/bank_query_cos"),
    "ebclr": ({"method_args.buffer_size": 64, "method_args.sgld.steps": 2}, "train/energy_data"),
    "tau-simclr": ({}, "train/temperature"),
}


class Crash(Exception):
    """Stands for a crash at the start of the second epoch (after the first epoch's checkpoint)."""


class CrashInSecondEpoch(Callback):
    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == 1:
            raise Crash()


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)


def tensorboard_scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def mlflow_metrics(run: Path, run_id: str) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run / "mlruns").resolve().as_uri())
    assert client.get_experiment(client.get_run(run_id).info.experiment_id).name == "probcl"
    keys = client.get_run(run_id).data.metrics
    return {k: [(m.step, m.value) for m in client.get_metric_history(run_id, k)] for k in keys}


def wandb_records(path: Path) -> list:
    """The protobuf records of a W&B transaction log (``run-ID.wandb``: a LevelDB-style log of 32 KiB
    blocks after a 7-byte header; each chunk has a 7-byte header: crc32, length, type)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, chunks, pos, block = [], [], 7, 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack_from("<IHB", data, pos) if left >= 7 else (0, 0, 0)
        if kind == 0:  # block padding
            pos += left
            continue
        chunks.append(data[pos + 7 : pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(chunks))
            records.append(record)
            chunks = []
    return records


def wandb_history(path: Path) -> tuple[str, dict[str, list[float]]]:
    """The run id and the logged history (key -> values) of one offline W&B run."""
    run_id, history = None, {}
    for record in wandb_records(path):
        if record.HasField("run"):
            run_id = record.run.run_id
        if record.HasField("history"):
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)  # W&B splits "a/b" into a nested key
                history.setdefault(key, []).append(json.loads(item.value_json))
    assert run_id is not None
    return run_id, history


def jsonl_series(run: Path) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for row in read_rows(run / "metrics.jsonl"):
        for key, value in row.items():
            if key != "step":
                series.setdefault(key, []).append((row["step"], value))
    return series


def assert_same_series(got: dict, expected: dict, where: str) -> None:
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{where} lacks {missing}"
    for key, values in expected.items():
        got_steps, got_values = zip(*sorted(got[key]))
        steps, values = zip(*sorted(values))
        assert got_steps == steps and got_values == pytest.approx(values, rel=1e-6), f"{where}: {key}"


def test_crashed_run_resumes_into_the_same_runs_of_every_logger(tiny_config, offline):
    cfg = tiny_config("vem-langevin", **RUN, **DIAGNOSTICS["vem-langevin"][0], **{"train.epochs": 2})
    with pytest.raises(Crash):
        pretrain(cfg, callbacks=[CrashInSecondEpoch()])
    run = Path(cfg.run_dir)
    ids = json.loads((run / "loggers.json").read_text())
    pretrain(cfg)
    assert json.loads((run / "loggers.json").read_text()) == ids

    expected = jsonl_series(run)
    for key in ("train/loss", "train/bank_query_cos", "lr-Adam/pg1", "monitor/knn_top1", "monitor/probe_top1"):
        assert key in expected
    assert [step for step, _ in expected["monitor/knn_top1"]] == [3, 7]  # both epochs, across the crash
    assert_same_series(tensorboard_scalars(run), expected, "TensorBoard")
    assert_same_series(mlflow_metrics(run, ids["mlflow"]), expected, "MLflow")

    logs = sorted((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(logs) == 2  # the crashed start and the resumed one, both under the stored id
    started, resumed = (wandb_history(path) for path in logs)
    assert started[0] == resumed[0] == ids["wandb"]
    history = {k: started[1].get(k, []) + resumed[1].get(k, []) for k in {*started[1], *resumed[1]}}
    for key, values in expected.items():
        assert sorted(history[key]) == pytest.approx(sorted(v for _, v in values), rel=1e-5), f"W&B: {key}"


@pytest.mark.parametrize("method", ["ebclr", "tau-simclr"])
def test_method_diagnostics_reach_every_logger(tiny_config, offline, method):
    extra, diagnostic = DIAGNOSTICS[method]
    run = pretrain(tiny_config(method, **RUN, **extra))
    expected = jsonl_series(run)
    assert diagnostic in expected and "train/loss" in expected
    assert_same_series(tensorboard_scalars(run), expected, "TensorBoard")
    assert_same_series(
        mlflow_metrics(run, json.loads((run / "loggers.json").read_text())["mlflow"]), expected, "MLflow"
    )
    (log,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    _, history = wandb_history(log)
    assert history[diagnostic] == pytest.approx([v for _, v in expected[diagnostic]], rel=1e-5)


@pytest.mark.parametrize("name", LOGGERS)
def test_missing_logger_package_names_its_extra(tiny_config, monkeypatch, name):
    monkeypatch.setitem(sys.modules, name, None)  # `import name` fails as if it were not installed
    cfg = tiny_config("simclr", **{"train.loggers": [name]})
    with pytest.raises(ConfigError, match=rf"{name} needs the {name} package: pip install 'probcl\[{name}\]'"):
        pretrain(cfg)
    assert not Path(cfg.run_dir).exists()  # refused before any work
