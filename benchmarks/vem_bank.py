"""VEM's feature-space bank before and after the Appendix D bank optimiser, at the FMNIST benchmark's budget.

    python benchmarks/vem_bank.py                  # 4 runs, ~40-60 min on 2 loaded CPU cores
    python benchmarks/vem_bank.py --runs vem-svgd-after --set train.limit_train_batches=3   # a quick check

Four pretraining runs, each the method's FMNIST preset under the ``overrides`` of
``fashion-mnist/benchmark`` (read from that preset, assembled as ``probcl benchmark`` assembles a
cell), with the online monitor off:

* ``vem-langevin-before``: Alg. 1 line 13 as printed (``bank_update: literal``) at the old FMNIST
  preset's alpha = 30, without the bank-lr schedule (the old code had none);
* ``vem-langevin-after``: the preset as it is (bank optimiser, lr 1.0, momentum 0.9);
* ``vem-svgd-before``: Alg. 2 as printed (``bank_update: literal``, ``kernel: linear``) at the old
  preset's alpha = 1.0, without the bank-lr schedule;
* ``vem-svgd-after``: the preset as it is (RBF kernel, bank optimiser).

Each is then evaluated with the ``linear`` and ``knn`` suites (probes on the benchmark's seeded
``eval.max_train`` training subset). From each run's ``metrics.jsonl`` (a row every 10 steps) the
per-epoch means of ``train/bank_query_cos`` (mean cosine between each bank row and its nearest query
of the step) and ``train/bank_displacement`` (mean angle, rad, a row moved in the step) are taken;
a callback also records both at *every* step (``RUN/bank_steps.jsonl``), with the norm of the bank's
mean row (1 = every row on one point, ~1/sqrt(M) for a uniform bank), from which the first and
last 10 steps are summarised. Note that for Langevin the displacement includes the injected noise.

Runs go to ``OUT/cells/<run>-s<seed>``; the summary to ``RESULTS/vem_bank.json`` (rewritten after
every run) and ``RESULTS/vem_bank.png``. Re-running skips finished runs; a run killed while
training resumes from its last checkpoint (its train time then counts the resumed part only).
To run a fixed copy of the package while the checkout changes (the JSON records which was used):

    git archive HEAD probcl | tar -x -C /tmp/snap
    PYTHONPATH=/tmp/snap PROBCL_COMMIT=$(git rev-parse HEAD) python benchmarks/vem_bank.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

import probcl
from probcl.config import parse_override_value, to_plain
from probcl.core.io import atomic_write_json, read_json
from probcl.core.layout import RunPaths
from probcl.core.metrics_file import read_rows
from probcl.tasks.benchmark.grid import Cell, cell_config, load_benchmark
from probcl.tasks.benchmark.results import hardware

BENCHMARK = "fashion-mnist/benchmark"
# pinned: the Langevin preset's settings before study v3's tuning changed them; the published runs ran with these
LANGEVIN_BEFORE_V3 = {"optim.lr": 2.0e-3, "method_args.temperature": 0.12, "method_args.step_size": 1.0}
# The "before" settings: the presets' bank settings before the Appendix D optimiser (commit 62c6838^1,
# `git show 62c6838^1:probcl/presets/fashion-mnist/vem-langevin.yaml`: step_size 30.0; vem-svgd.yaml:
# step_size 1.0, Algorithm 2's linear kernel); the old sampler had no bank-lr schedule either.
RUNS: dict[str, tuple[str, str, str, dict]] = {
    "vem-langevin-before": (
        "vem-langevin",
        "before",
        "fashion-mnist/vem-langevin",
        {
            **LANGEVIN_BEFORE_V3,
            "method_args.bank_update": "literal",
            "method_args.step_size": 30.0,
            "method_args.bank_lr_schedule": False,
        },
    ),
    "vem-langevin-after": ("vem-langevin", "after", "fashion-mnist/vem-langevin", LANGEVIN_BEFORE_V3),
    "vem-svgd-before": (
        "vem-svgd",
        "before",
        "fashion-mnist/vem-svgd",
        {
            "method_args.bank_update": "literal",
            "method_args.kernel": "linear",
            "method_args.step_size": 1.0,
            "method_args.bank_lr_schedule": False,
        },
    ),
    "vem-svgd-after": ("vem-svgd", "after", "fashion-mnist/vem-svgd", {}),
}
METRICS = ("bank_query_cos", "bank_displacement")
EXTRA = ("cos_before", "query_cos", "drift_displacement", "bank_mean_norm", "query_mean_norm")  # recorded by BankSteps
STEP_FILE = "bank_steps.jsonl"
RECORD_FILE = "vem_bank_run.json"
EDGE_STEPS = 10  # "first" and "last" steps summarised from the per-step record
FINAL_FILE = "vem_bank_final.json"
FINAL_IMAGES = 2048  # training images whose queries the final bank is compared with


class BankSteps(Callback):
    """Appends the step's bank diagnostics to RUN/bank_steps.jsonl at every step.

    Besides the two the method logs, it wraps the bank's ``update`` to see the step's queries and
    the bank before and after sampling, and adds: ``cos_before`` (the nearest-query cosine of the
    bank *before* this step's sampler: the sampler's own gain is ``bank_query_cos - cos_before``),
    ``query_cos`` (mean over queries of the cosine to the nearest sampled row: do the negatives
    cover the queries?), ``drift_displacement`` (Langevin only: the displacement of the same
    update with the noise switched off, since the logged displacement mostly measures the noise),
    and the norm of the bank's and the step's queries' mean row (1 = every row on one point, ~1/sqrt(M)
    for a uniform bank).
    Single process only (the queries of other ranks are not seen).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: dict = {}

    def _wrap(self, memory) -> None:
        if getattr(memory, "_vem_bank_wrapped", False):
            return
        original = memory.update

        def update(queries, seed, lr_scale=1.0):
            before = (memory.bank.detach().clone(), memory.velocity.detach().clone())
            step = original(queries, seed, lr_scale)
            self.seen = {
                "queries": queries.detach().float(),
                "bank": before[0].float(),
                "velocity": before[1],
                "lr_scale": lr_scale,
                "sampled": step.negatives.detach().float(),
            }
            return step

        memory.update = update
        memory._vem_bank_wrapped = True

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen = {}
        memory = getattr(pl_module, "memory", None)
        if memory is not None and hasattr(memory, "velocity"):
            self._wrap(memory)

    @torch.no_grad()
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_rank != 0:
            return
        logged = trainer.callback_metrics
        # metrics.jsonl's numbering: the step's 0-based index (global_step is already incremented here)
        row: dict = {"step": int(trainer.global_step) - 1, "epoch": int(trainer.current_epoch)}
        for name in (*METRICS, "loss", "key_top1", "negative_max_cos"):
            value = logged.get(f"train/{name}")
            row[name] = None if value is None else float(value)
        seen = self.seen
        if seen:
            q, bank, sampled = seen["queries"], seen["bank"], seen["sampled"]
            row["cos_before"] = float((bank @ q.T).amax(dim=1).mean())
            row["query_cos"] = float((sampled @ q.T).amax(dim=0).mean())
            row["bank_mean_norm"] = float(sampled.mean(dim=0).norm())
            row["query_mean_norm"] = float(q.mean(dim=0).norm())
            row["bank_finite"] = bool(torch.isfinite(sampled).all())
            sampler = pl_module.memory.sampler
            if sampler.method == "langevin":
                quiet = dataclasses.replace(sampler, noise_scale=0.0)
                drift, _ = quiet.run(bank, q, None, seen["velocity"].float(), seen["lr_scale"])
                row["drift_displacement"] = float((drift * bank).sum(dim=1).clamp(-1, 1).acos().mean())
        with self.path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")


def step_rows(run_dir: Path) -> list[dict]:
    """The per-step record, one row per global step (the latest, after a resume)."""
    return [row for _, row in sorted({r["step"]: r for r in read_rows(run_dir / STEP_FILE)}.items())]


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def per_epoch(rows: list[dict], key: str = "{}", names: tuple[str, ...] = METRICS) -> list[dict]:
    """Per epoch: mean of each of ``names`` over ``rows`` (that have the first metric) and how many rows."""
    epochs: dict[int, list[dict]] = {}
    for row in rows:
        if row.get(key.format(METRICS[0])) is not None:
            epochs.setdefault(int(row["epoch"]), []).append(row)
    return [
        {"epoch": e + 1, "rows": len(rs), **{m: _mean([r.get(key.format(m)) for r in rs]) for m in names}}
        for e, rs in sorted(epochs.items())
    ]


def summarise(run_dir: Path) -> dict:
    """Per-epoch means from metrics.jsonl and from the per-step record, first/last steps, NaN and collapse checks."""
    logged = [r for r in read_rows(RunPaths(run_dir).metrics) if "train/bank_query_cos" in r]
    steps = step_rows(run_dir)
    out: dict = {
        "per_epoch_metrics_jsonl": per_epoch(logged, "train/{}"),
        "per_epoch_all_steps": per_epoch(steps, names=(*METRICS, *EXTRA)),
    }
    if steps:
        for name, part in (("first_steps", steps[:EDGE_STEPS]), ("last_steps", steps[-EDGE_STEPS:])):
            out[name] = {
                "steps": [part[0]["step"], part[-1]["step"]],
                **{m: _mean([r.get(m) for r in part]) for m in (*METRICS, *EXTRA)},
            }
        values = [r.get(m) for r in steps for m in (*METRICS, "loss")]
        out["non_finite_values"] = sum(1 for v in values if v is not None and not math.isfinite(v))
        out["bank_ever_non_finite"] = any(r.get("bank_finite") is False for r in steps)
        out["steps"] = [
            {k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in r.items() if k != "bank_finite"}
            for r in steps
        ]
    return out


def _effective_rank(x: torch.Tensor) -> float:
    """exp(entropy) of the normalised squared singular values of the centred rows: how many directions they span."""
    s = torch.linalg.svdvals(x - x.mean(dim=0)).pow(2)
    p = s / s.sum()
    return float(torch.exp(-(p * p.clamp_min(1e-12).log()).sum()))


@torch.no_grad()
def final_state(cfg, run_dir: Path, images: int = FINAL_IMAGES) -> dict:
    """The last checkpoint's bank against the queries of the trained encoder on ``images`` training images
    (augmented view 1, BN in training mode, batches of train.batch_size: as the bank saw them), cached in
    RUN/vem_bank_final.json. Each bank row gets the class of its nearest query: a bank that has collapsed
    onto a few modes covers few classes."""
    path = run_dir / FINAL_FILE
    if path.exists():
        return read_json(path)
    from probcl.data.info import data_info_for
    from probcl.data.loaders import load_dataset
    from probcl.data.sources import TensorImages, random_subset
    from probcl.methods import METHODS

    d = cfg.data
    train = load_dataset(d.dataset, "train", d.root, d.download, d.image_size)
    if d.train_subset is not None and isinstance(train, TensorImages) and d.train_subset < len(train):
        train = train.subset(random_subset(len(train), d.train_subset, cfg.train.seed))
    method = METHODS.get(cfg.method)
    model = method(cfg, data_info_for(cfg, train), method.params(cfg))
    state = torch.load(RunPaths(run_dir).last, map_location="cpu", weights_only=False)["state_dict"]
    model.load_state_dict(state)
    model.train()
    torch.manual_seed(cfg.train.seed)
    idx = random_subset(len(train), min(images, len(train)), cfg.train.seed + 1)
    labels = train.labels()
    assert labels is not None, f"{d.dataset} has no labels: the bank diagnosis needs them"
    queries, ys = [], []
    for chunk in idx.split(cfg.train.batch_size):
        view1, _ = model.training_views(torch.stack([train[i][0] for i in chunk.tolist()]))
        queries.append(model.query(view1)[1].float())
        ys.append(labels[chunk])
    q, y = torch.cat(queries), torch.cat(ys)
    bank = model.memory.bank.float()
    sims = bank @ q.T
    classes = int(y.max()) + 1
    share = torch.bincount(y[sims.argmax(dim=1)], minlength=classes).float() / bank.shape[0]
    data_share = torch.bincount(y, minlength=classes).float() / len(y)

    def pairwise(x: torch.Tensor) -> float:  # mean off-diagonal cosine of unit rows
        n = x.shape[0]
        return float((x.sum(dim=0).pow(2).sum() - n) / (n * (n - 1)))

    out = {
        "images": len(y),
        "bank_rows": bank.shape[0],
        "bank_finite": bool(torch.isfinite(bank).all()),
        "bank_to_query_cos": float(sims.amax(dim=1).mean()),
        "query_to_bank_cos": float(sims.amax(dim=0).mean()),
        "bank_mean_norm": float(bank.mean(dim=0).norm()),
        "query_mean_norm": float(q.mean(dim=0).norm()),
        "bank_pairwise_cos": pairwise(bank),
        "query_pairwise_cos": pairwise(q),
        "bank_effective_rank": _effective_rank(bank),
        "query_effective_rank": _effective_rank(q),
        "bank_class_share": [round(float(v), 4) for v in share],
        "query_class_share": [round(float(v), 4) for v in data_share],
        "bank_classes_covered": int((share >= 0.01).sum()),
    }
    atomic_write_json(path, out)
    return out


def run_config(bench, base_dir: Path, label: str, seed: int, root: Path, extra: dict):
    """The validated config of one run: exactly how `probcl benchmark` builds a cell, plus our overrides."""
    _, _, preset, overrides = RUNS[label]
    methods = {label: {"config": preset, "overrides": {**overrides, "train.monitor_every_n_epochs": 0, **extra}}}
    return cell_config(dataclasses.replace(bench, methods=methods), Cell(label, seed), root, base_dir)


def run_one(bench, base_dir: Path, label: str, args: argparse.Namespace, extra: dict) -> dict:
    """Pretrain (unless done) and evaluate (unless done) one run; returns its record."""
    from probcl.tasks.evaluate import EvaluateSettings, evaluate_run
    from probcl.tasks.pretrain import pretrain

    cfg = run_config(bench, base_dir, label, args.seed, Path(args.out), extra)
    run_dir = Path(cfg.run_dir)
    record_path = run_dir / RECORD_FILE
    wanted = to_plain(cfg.to_dict())
    record = read_json(record_path) or {"config": wanted}
    if record["config"] != wanted:
        raise SystemExit(f"{run_dir} was trained with a different config; delete that folder or use another --out")
    if "train_seconds" not in record:
        paths = RunPaths(run_dir)
        record["resumed"] = paths.last.exists()
        start = time.perf_counter()
        run_dir.mkdir(parents=True, exist_ok=True)
        pretrain(cfg, callbacks=[BankSteps(run_dir / STEP_FILE)])
        record["train_seconds"] = round(time.perf_counter() - start, 1)
        atomic_write_json(record_path, record)
    done = read_json(RunPaths(run_dir).eval, {}) or {}
    if not {"linear", "knn"} <= set(done):
        start = time.perf_counter()
        settings = EvaluateSettings(
            device=bench.eval.device,
            batch_size=bench.eval.batch_size,
            max_train=bench.eval.max_train,
            data_root=bench.eval.data_root,
            figures=False,
            report=False,
        )
        evaluate_run(run_dir, ["linear", "knn"], settings)
        record["eval_seconds"] = round(time.perf_counter() - start, 1)
        atomic_write_json(record_path, record)
        done = read_json(RunPaths(run_dir).eval, {})
    method, variant, preset, overrides = RUNS[label]
    return {
        "method": method,
        "variant": variant,
        "preset": preset,
        "overrides": overrides,
        "run_dir": str(run_dir),
        "method_args": wanted["method_args"],
        "train_seconds": record["train_seconds"],
        "eval_seconds": record.get("eval_seconds"),
        "resumed": record.get("resumed", False),
        "linear_top1": round(done["linear"]["top1"], 2),
        "knn_top1": round(done["knn"]["top1"], 2),
        **summarise(run_dir),
        "final_state": final_state(cfg, run_dir),
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(head: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [head, ["---"] * len(head), *rows])


def table(runs: dict) -> str:
    """Markdown: per-epoch cosine and displacement (metrics.jsonl means), first/last steps, linear and kNN."""
    epochs = max((len(r["per_epoch_metrics_jsonl"]) for r in runs.values()), default=0)
    head = (
        ["run"]
        + [f"cos ep{e + 1}" for e in range(epochs)]
        + [f"disp ep{e + 1} (rad)" for e in range(epochs)]
        + ["cos first/last 10", "disp first/last 10", "|mean row| last", "linear %", "kNN %", "train s", "eval s"]
    )
    rows = []
    for label, r in runs.items():
        ep = r["per_epoch_metrics_jsonl"] + [{}] * (epochs - len(r["per_epoch_metrics_jsonl"]))
        first, last = r.get("first_steps", {}), r.get("last_steps", {})
        cells = (
            [label]
            + [_fmt(e.get("bank_query_cos"), ".3f") for e in ep]
            + [_fmt(e.get("bank_displacement"), ".3g") for e in ep]
            + [
                f"{_fmt(first.get('bank_query_cos'), '.3f')} / {_fmt(last.get('bank_query_cos'), '.3f')}",
                f"{_fmt(first.get('bank_displacement'), '.3g')} / {_fmt(last.get('bank_displacement'), '.3g')}",
                _fmt(last.get("bank_mean_norm"), ".3f"),
                f"{r['linear_top1']:.2f}",
                f"{r['knn_top1']:.2f}",
                f"{r['train_seconds']:.0f}",
                _fmt(r.get("eval_seconds"), ".0f"),
            ]
        )
        rows.append(cells)
    return markdown(head, rows)


def step_table(runs: dict) -> str:
    """Markdown: per-epoch means over every step (the BankSteps record), with the extra diagnostics."""
    names = {
        "bank_query_cos": "cos",
        "cos_before": "cos before sampling",
        "query_cos": "query-to-bank cos",
        "bank_displacement": "disp (rad)",
        "drift_displacement": "drift-only disp (rad)",
        "bank_mean_norm": "|mean row|",
        "query_mean_norm": "|mean query|",
    }
    rows = [
        [label, str(e["epoch"]), str(e["rows"])]
        + [_fmt(e.get(m), ".3g" if "displacement" in m else ".3f") for m in names]
        for label, r in runs.items()
        for e in r.get("per_epoch_all_steps", [])
    ]
    return markdown(["run", "epoch", "steps", *names.values()], rows)


def final_table(runs: dict) -> str:
    """Markdown: the final bank against the final encoder's queries (see :func:`final_state`)."""
    names = {
        "bank_to_query_cos": "bank-to-query cos",
        "query_to_bank_cos": "query-to-bank cos",
        "bank_pairwise_cos": "bank pairwise cos",
        "query_pairwise_cos": "query pairwise cos",
        "bank_classes_covered": "classes with >= 1 % of rows",
        "max_class_share": "largest class share",
    }
    rows = []
    for label, r in runs.items():
        f = dict(r.get("final_state") or {})
        if "bank_class_share" in f:
            f["max_class_share"] = max(f["bank_class_share"])
        rows.append([label] + [str(f[m]) if isinstance(f.get(m), int) else _fmt(f.get(m), ".3f") for m in names])
    return markdown(["run", *names.values()], rows)


def plot(path: Path, runs: dict) -> None:
    """Cosine (top) and displacement (bottom, log scale) per step, before vs after, one column per method;
    dotted: each query's cosine to its nearest row (top) and the noise-free displacement (bottom, Langevin)."""
    from matplotlib.figure import Figure

    from probcl.report.plots import save_figure

    extras = {
        "bank_query_cos": ("query_cos", "each query to its nearest row"),
        "bank_displacement": ("drift_displacement", "without the noise"),
    }
    methods = list(dict.fromkeys(r["method"] for r in runs.values()))
    fig = Figure(figsize=(4.8 * len(methods), 6.4))
    axes = fig.subplots(2, len(methods), squeeze=False)
    for col, method in enumerate(methods):
        mine = [r for r in runs.values() if r["method"] == method and r.get("steps")]
        for r in mine:
            style = {"before": "--", "after": "-"}[r["variant"]]
            for row, metric in enumerate(METRICS):
                pts = [(s["step"], s[metric]) for s in r["steps"] if s.get(metric) is not None]
                if not pts:
                    continue
                (line,) = axes[row][col].plot(
                    *zip(*pts), style, label=f"{r['variant']}: linear {r['linear_top1']:.1f}, kNN {r['knn_top1']:.1f}"
                )
                key, what = extras[metric]
                more = [(s["step"], s[key]) for s in r["steps"] if s.get(key)]
                if more:
                    axes[row][col].plot(*zip(*more), ":", color=line.get_color(), label=f"{r['variant']}: {what}")
        axes[0][col].set_title(method, fontsize=10)
        axes[0][col].set_ylabel("cosine: bank row to nearest query")
        axes[1][col].set_ylabel("bank displacement per step (rad)")
        axes[1][col].set_yscale("log")
        axes[1][col].set_xlabel("training step (grey: epoch boundary)")
        starts = {
            min(s["step"] for s in r["steps"] if s["epoch"] == e)
            for r in mine
            for e in {s["epoch"] for s in r["steps"]}
            if e > 0
        }
        for ax in axes[:, col]:
            ax.grid(alpha=0.3)
            for x in sorted(starts):
                ax.axvline(x - 0.5, color="grey", lw=0.8, alpha=0.5)
            ax.legend(fontsize=7)
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of: {', '.join(RUNS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override applied to every run (e.g. for a quick check)",
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default="runs/vem-bank", help="folder of the runs")
    parser.add_argument("--results", default="docs/results/vem-bank", help="folder of vem_bank.json and .png")
    args = parser.parse_args()
    os.environ.setdefault("PROBCL_NO_PROGRESS", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    labels = [s.strip() for s in args.runs.split(",") if s.strip()]
    unknown = set(labels) - set(RUNS)
    if unknown:
        parser.error(f"unknown run(s) {', '.join(sorted(unknown))}; valid: {', '.join(RUNS)}")
    extra = {k: parse_override_value(v) for k, v in (s.split("=", 1) for s in args.set)}
    bench, base_dir = load_benchmark(BENCHMARK)
    results = Path(args.results)
    path = results / "vem_bank.json"
    state = read_json(path) or {}
    state.update(
        {
            "benchmark": BENCHMARK,
            "benchmark_overrides": bench.overrides,
            "seed": args.seed,
            "extra_overrides": extra,
            "eval": dataclasses.asdict(bench.eval),
            "hardware": hardware(),
            "monitor": "off (train.monitor_every_n_epochs=0)",
            "probcl": str(Path(probcl.__file__).parent),
            "probcl_commit": os.environ.get("PROBCL_COMMIT"),
        }
    )
    state.setdefault("runs", {})
    for label in labels:
        state["runs"][label] = r = run_one(bench, base_dir, label, args, extra)
        state["runs"] = {k: state["runs"][k] for k in RUNS if k in state["runs"]}
        atomic_write_json(path, state)
        eps = ", ".join(
            f"ep{e['epoch']} cos {_fmt(e['bank_query_cos'], '.3f')} disp {_fmt(e['bank_displacement'], '.3g')}"
            for e in r["per_epoch_metrics_jsonl"]
        )
        print(
            f"{label}: train {r['train_seconds']:.0f} s, linear {r['linear_top1']:.2f} %, "
            f"kNN {r['knn_top1']:.2f} %; {eps}",
            flush=True,
        )
    plot(results / "vem_bank.png", state["runs"])
    print()
    print(table(state["runs"]))
    print()
    print("Per epoch, every step:")
    print(step_table(state["runs"]))
    print()
    print(f"Final bank against the final encoder's queries of {FINAL_IMAGES} training images:")
    print(final_table(state["runs"]))


if __name__ == "__main__":
    main()
