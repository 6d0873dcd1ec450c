"""Shared by the benchmark scripts: one optimiser step of a method outside Lightning; a timed pretraining run; the
per-run command line and resumable JSON + Markdown output of the scripts that diagnose trained runs; the JSON +
Markdown output of every script that writes both."""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def optimiser_step(
    model,
    optimizer: torch.optim.Optimizer,
    view1: torch.Tensor,
    view2: torch.Tensor,
    batch: Any = None,
    steps_done: int = 1,
    precision: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> None:
    """What Lightning's loop does per batch, minus logging: objective, backward, step, EMA/bank hooks
    (with the EMA momentum of optimiser step ``steps_done``; the step's cost does not depend on it).
    ``precision``: makes the context of the forward pass (e.g. bf16 autocast), as Lightning's precision plugin."""
    with precision():
        loss = model.step(view1, view2, batch).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    model.after_optimizer_step(steps_done)


def timed_pretrain(config: str, overrides: dict[str, Any], run_dir: Path) -> tuple[Any, float]:
    """Pretrain preset ``config`` with ``overrides`` into ``run_dir``, monitor and progress bar off (a benchmark
    times the training, not the online probe); returns the validated config and the call's wall seconds. A run
    killed mid-way resumes from its last checkpoint, and the seconds then count the resumed part only."""
    from probcl.config import load_config
    from probcl.core.presets import resolve_config_path
    from probcl.tasks.pretrain import pretrain

    settings = {
        **overrides,
        "run_dir": str(run_dir),
        "train.monitor_every_n_epochs": 0,
        "train.progress_bar": False,
    }
    cfg = load_config(resolve_config_path(config), settings)
    start = time.perf_counter()
    pretrain(cfg)
    return cfg, time.perf_counter() - start


def per_run_parser(doc: str, far: list[str], out: str) -> argparse.ArgumentParser:
    """The command line of a per-run diagnosis: runs, near/far OOD sets, probe and set sizes, seed, output."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--near", nargs="*", default=[], help="near-OOD dataset specs")
    parser.add_argument("--far", nargs="*", default=far, help="far-OOD dataset specs and generated sets")
    parser.add_argument("--max-train", type=int, default=20000)
    parser.add_argument("--max-images", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=out)
    return parser


def ood_sets(ctx: Any, specs: list[str], id_images: Any, max_images: int, seed: int) -> dict[str, Any]:
    """Each OOD set of a per-run diagnosis by its spec: a generated set (``probcl.data.ood_sets.GENERATED``) made from
    ``id_images``, else the dataset's test split, a seeded subset of at most ``max_images`` (``ctx``: the run's
    ``ModelOnData``)."""
    from probcl.data.ood_sets import GENERATED, generated_set

    return {
        spec: generated_set(spec, id_images, seed)
        if spec in GENERATED
        else ctx.dataset(spec, "test").seeded_subset(max_images, seed)
        for spec in specs
    }


def diagnose_each(
    runs: list[str], out: Path, diagnose: Callable[[str], dict], markdown: Callable[[list[dict]], str]
) -> None:
    """``diagnose`` every run not already in ``out`` (resumable), writing the JSON and its Markdown table
    (same name, ``.md``) after each run; prints the table."""
    from probcl.core.io import atomic_write_json, atomic_write_text

    previous = {r["run"]: r for r in json.loads(out.read_text())["runs"]} if out.exists() else {}
    results: list[dict] = []
    for run in runs:
        results.append(previous.get(run) or diagnose(run))
        atomic_write_json(
            out,
            {
                "created": time.strftime("%Y-%m-%d"),
                "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, CPU",
                "torch": torch.__version__,
                "runs": results,
            },
        )
        atomic_write_text(out.with_suffix(".md"), markdown(results))
    print(markdown(results))


def write_outputs(out: Path, data: dict, table: str) -> None:
    """Write ``data`` to ``out`` (JSON) and ``table`` beside it (same name, ``.md``), then print the table."""
    from probcl.core.io import atomic_write_json, atomic_write_text

    atomic_write_json(out, data)
    atomic_write_text(out.with_suffix(".md"), table)
    print(table)
