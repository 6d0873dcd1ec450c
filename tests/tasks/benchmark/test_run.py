"""`probcl benchmark`: config merging, a tiny 2 methods x 1 seed grid, and resuming without re-running."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import yaml

from probcl.cli import main
from probcl.config import ConfigError
from probcl.core.io import read_json
from probcl.core.presets import resolve_config_path
from probcl.eval.ood_scores.per_image import load_scores
from probcl.report.claims import evaluate_claims
from probcl.tasks.benchmark.grid import Cell, cell_config, grid, load_benchmark
from probcl.tasks.benchmark.run import run_benchmark

# the study's claims, as data (a benchmark config carries its claims)
STUDY_CLAIMS = yaml.safe_load(resolve_config_path("fashion-mnist/study").read_text())["claims"]
TINY = {
    "data.dataset": "digits",
    "model": {"width": 4, "proj_hidden": 16, "proj_out": 8},
    "train": {
        "epochs": 1,
        "batch_size": 32,
        "limit_train_batches": 3,
        "monitor_train_samples": 200,
        "monitor_test_samples": 100,
        "progress_bar": False,
    },
}


# a tiny study's tau-posthoc cells take model.pool from their SimCLR encoders and say so (probcl/methods/tau.py)
TAU_POSTHOC_NOTICE = pytest.mark.filterwarnings("ignore:tau-posthoc. model settings taken from the pretrained encoder")


def write(path, tree) -> str:
    path.write_text(yaml.safe_dump(tree))
    return str(path)


def test_cell_config_layers(tmp_path):
    bench_file = write(
        tmp_path / "b.yaml",
        {
            "base": "fashion-mnist/simclr",
            "methods": {
                "moco": {"config": "fashion-mnist/moco", "overrides": {"method_args.queue_size": 64}},
                "simclr": "fashion-mnist/simclr",
            },
            "overrides": {"train.epochs": 7, "model": {"width": 8}},
            "seeds": [3],
            "batch_sizes": [16],
        },
    )
    bench, base_dir = load_benchmark(bench_file)
    cfg = cell_config(bench, Cell("moco", 3, 16), tmp_path / "out", base_dir)
    preset = yaml.safe_load(resolve_config_path("fashion-mnist/moco").read_text())
    assert cfg.method == "moco"  # from the method preset, not the SimCLR base
    assert cfg.method_args == {**preset["method_args"], "queue_size": 64}  # preset + the method's override
    assert cfg.model.proj_out == preset["model"]["proj_out"]
    assert cfg.train.epochs == 7 and cfg.model.width == 8  # the common budget wins over the preset
    assert cfg.train.seed == 3 and cfg.train.batch_size == 16
    assert cfg.run_dir == str(tmp_path / "out" / "cells" / "moco-s3-b16")


def test_grid_runs_phase_by_phase_each_seed_by_seed(tmp_path):
    methods = {
        "sweep": {"config": "fashion-mnist/simclr", "seeds": [0, 1], "phase": 2},
        "control": {"config": "fashion-mnist/simclr", "seeds": [0, 1]},  # own seeds: phase 1
        "posthoc": {"config": "fashion-mnist/tau-posthoc", "init_from": "simclr"},
        "simclr": "fashion-mnist/simclr",
        "late": {"config": "fashion-mnist/byol", "seeds": [0], "phase": 1},
    }
    bench, _ = load_benchmark(write(tmp_path / "b.yaml", {"methods": methods, "seeds": [0, 1], "reference": "simclr"}))
    assert [c.name for c in grid(bench)] == [
        "simclr-s0", "posthoc-s0", "simclr-s1", "posthoc-s1",  # phase 0: reference, then what it initialises
        "control-s0", "late-s0", "control-s1",  # phase 1, seed by seed, in the listed order
        "sweep-s0", "sweep-s1",  # phase 2
    ]  # fmt: skip


@pytest.mark.parametrize(
    "tree, message",
    [
        ({"methods": {}}, "methods"),
        ({"methods": {"a": {"config": "fashion-mnist/simclr", "phase": -1}}}, "methods.a.phase must be a whole"),
        (
            {
                "methods": {
                    "a": {"config": "fashion-mnist/simclr", "phase": 3},
                    "b": {"config": "fashion-mnist/tau-posthoc", "init_from": "a"},
                }
            },
            "methods.b runs in an earlier phase than its init_from 'a'",
        ),
        ({"methods": {"a": "fashion-mnist/simclr"}, "reference": "b"}, "reference"),
        ({"methods": {"a": "fashion-mnist/simclr"}, "suites": ["nope"]}, "unknown evaluation suite"),
        ({"methods": {"a": "fashion-mnist/simclr"}, "seedz": [1]}, "unknown config key"),
        (
            {"methods": {"a": {"config": "fashion-mnist/simclr", "suites": ["ood"]}}, "suites": ["linear"]},
            r"methods.a.suites must be a non-empty list of the benchmark's suites \(linear\)",
        ),
        ({"methods": {"a": {"config": "fashion-mnist/simclr", "suites": []}}}, "methods.a.suites must be"),
        (
            {"methods": {"a": "fashion-mnist/simclr"}, "sweeps": {"line": ["a", "b"]}},
            r"sweeps.line must list two or more of the methods \(b is not one\)",
        ),
        ({"methods": {"a": "fashion-mnist/simclr"}, "sweeps": {"line": ["a"]}}, "sweeps.line must list two or more"),
    ],
)
def test_bad_benchmark_files(tmp_path, tree, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        load_benchmark(write(tmp_path / "b.yaml", tree))


def test_a_method_with_its_own_suites_runs_only_those_and_counts_as_complete(tmp_path):
    out = tmp_path / "bench"
    bench_file = write(
        tmp_path / "tiny.yaml",
        {
            "out": str(out),
            "publish": str(tmp_path / "published"),
            "methods": {
                "simclr": "fashion-mnist/simclr",
                "simclr-b16": {
                    "config": "fashion-mnist/simclr",
                    "suites": ["linear"],
                    "overrides": {"train.batch_size": 16},
                },
            },
            "overrides": TINY,
            "suites": ["linear", "knn"],
            "eval": {"max_train": 200},
        },
    )
    assert main(["benchmark", "--config", bench_file]) == 0
    assert set(read_json(out / "cells/simclr-s0/eval.json")) == {"linear", "knn"}
    assert set(read_json(out / "cells/simclr-b16-s0/eval.json")) == {"linear"}
    published = read_json(tmp_path / "published/results.json")  # complete with its own suites: published
    assert [c["name"] for c in published["cells"]] == ["simclr-s0", "simclr-b16-s0"]
    assert "knn/top1" not in published["cells"][1]["metrics"] and "linear/top1" in published["cells"][1]["metrics"]
    bench, base_dir = load_benchmark(bench_file)
    log: list[str] = []
    run_benchmark(bench, base_dir, log=log.append)
    assert not any(line.startswith("evaluated") for line in log)  # knn is not missing from simclr-b16


def test_tiny_benchmark_writes_reports_and_resumes(tmp_path):
    out = tmp_path / "bench"
    bench_file = write(
        tmp_path / "tiny.yaml",
        {
            "title": "tiny",
            "out": str(out),
            "methods": {"simclr": "fashion-mnist/simclr", "byol": "fashion-mnist/byol"},
            "overrides": TINY,
            "seeds": [0],
            "suites": ["linear", "knn", "calibration", "ood", "efficiency"],
            "suite_options": {
                "ood": {"datasets": ["noise:uniform", "inverted"], "max_images": 100, "knn_k": [10], "mc_passes": 3}
            },
            "reference": "simclr",
            "eval": {"max_train": 200},
        },
    )
    assert main(["benchmark", "--config", bench_file]) == 0
    results = read_json(out / "results.json")
    assert [c["name"] for c in results["cells"]] == ["simclr-s0", "byol-s0"]
    assert set(results["groups"]) == {"simclr", "byol"}
    # each cell's precision is the one its checkpoint records having trained in, and results.json lists them
    trained_in = {
        torch.load(out / c["run_dir"] / "checkpoints" / "last.ckpt", weights_only=False)["probcl_precision"][
            "precision"
        ]
        for c in results["cells"]
    }
    assert {c["train"]["precision"] for c in results["cells"]} == trained_in
    assert results["precisions"] == sorted(trained_in)
    assert not list(out.glob("cells/*/feature-cache"))  # cells are evaluated once: their features are not stored
    for group in results["groups"].values():
        assert group["metrics"]["linear/top1"]["n"] == 1 and group["metrics"]["linear/top1"]["std"] is None
        assert "ood/sets.inverted.msp.auroc" in group["metrics"] and "train/seconds_per_epoch" in group["metrics"]
    assert results["groups"]["simclr"]["metrics"]["efficiency/relative_efficiency.knn_top1"]["mean"] == 1.0
    md = (out / "report.md").read_text()
    assert "| simclr | 1 |" in md and "| byol | 1 |" in md
    for figure in ("plots/curve-monitor-knn-top1.png", "plots/reliability-simclr.png", "plots/ood-byol.png"):
        assert figure in md and (out / figure).exists()
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 5 and "src='plots/" not in html

    stamps = {p: p.stat().st_mtime_ns for p in out.glob("cells/*/*") if p.is_file()}
    stamps.update({p: p.stat().st_mtime_ns for p in out.glob("cells/*/checkpoints/*")})
    bench, base_dir = load_benchmark(bench_file)
    log: list[str] = []
    run_benchmark(bench, base_dir, log=log.append)
    assert not any(line.startswith("evaluated") for line in log)  # every suite was already in eval.json
    assert sum(line.startswith("results in") for line in log) == 1  # nothing changed: the report is written once
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # no checkpoint, eval.json or cell.json rewritten

    moved = tmp_path / "moved"  # a benchmark moved to another --out is the same benchmark: nothing is redone
    out.rename(moved)
    moved_stamps = {moved / p.relative_to(out): t for p, t in stamps.items()}
    log.clear()
    run_benchmark(bench, base_dir, out=moved, log=log.append)
    assert not any(line.startswith("evaluated") for line in log)
    assert {p: p.stat().st_mtime_ns for p in moved_stamps} == moved_stamps


@TAU_POSTHOC_NOTICE
def test_study_runs_seed_by_seed_publishes_each_cell_and_judges_claims(tmp_path):
    """init_from: post-hoc TaU starts from the same seed's SimCLR cell; suites run as soon as their inputs are
    trained (the ood ensemble waits for the other seed); publish mirrors small files, never checkpoints."""
    out, published = tmp_path / "study", tmp_path / "docs" / "study"
    bench_file = write(
        tmp_path / "study.yaml",
        {
            "title": "tiny study",
            "out": str(out),
            "publish": str(published),
            "methods": {
                "tau-posthoc": {"config": "fashion-mnist/tau-posthoc", "init_from": "simclr"},
                "simclr": "fashion-mnist/simclr",
            },
            "overrides": TINY,
            "seeds": [0, 1],
            "ensemble": True,
            "suites": ["linear", "ood"],
            "suite_options": {
                "ood": {"datasets": ["digits", "noise:gaussian"], "max_images": 60, "knn_k": [10], "mc_passes": 2}
            },
            "claims": {n: STUDY_CLAIMS[n] for n in ("tau-posthoc", "tau-accuracy")},
            "eval": {"max_train": 200},
        },
    )
    bench, base_dir = load_benchmark(bench_file)
    log: list[str] = []
    run_benchmark(bench, base_dir, log=log.append)
    order = [line.split()[2].rstrip(":") for line in log if line.startswith("[")]
    assert order == ["simclr-s0", "tau-posthoc-s0", "simclr-s1", "tau-posthoc-s1"]
    first_ood = next(i for i, line in enumerate(log) if line.startswith("evaluated simclr-s0") and "ood" in line)
    assert log.index("evaluated simclr-s0: linear") < log.index(next(x for x in log if "trained simclr-s1" in x))
    assert first_ood > log.index(next(x for x in log if "trained simclr-s1" in x))  # ensemble member trained first
    for seed in (0, 1):
        cfg = read_json(out / "cells" / f"tau-posthoc-s{seed}" / "cell.json")["config"]
        assert cfg["init"] == str(out / "cells" / f"simclr-s{seed}")
    assert sorted(p.name for p in (published / "cells" / "simclr-s0").iterdir()) == [
        "cell.json",
        "config.yaml",
        "eval.json",
        "metrics.jsonl",
        "ood-scores.npz",  # every registered score of every image the ood suite scored: travels with the cell
    ]
    saved = load_scores(published / "cells" / "simclr-s0")
    assert saved.meta["run"] == str(out / "cells" / "simclr-s0") and "mahalanobis" in saved.sets["id_test"]
    assert not list(published.rglob("*.ckpt"))
    results = read_json(published / "results.json")
    assert {c["name"] for c in results["cells"]} == {"simclr-s0", "simclr-s1", "tau-posthoc-s0", "tau-posthoc-s1"}
    md = (published / "report.md").read_text()
    assert "## Claims" in md and "post-hoc TaU temperature AUROC - 0.5, digits" in md
    posthoc, accuracy = evaluate_claims(results, ["tau-posthoc", "tau-accuracy"])
    assert accuracy.verdict == "missing"  # no tau-simclr cell in this grid
    digits = next(c for c in posthoc.comparisons if c.label.endswith("digits"))
    aurocs = [
        read_json(out / "cells" / f"tau-posthoc-s{s}" / "eval.json")["ood"]["sets"]["digits"]["uncertainty:neg_u"][
            "auroc"
        ]
        for s in (0, 1)
    ]
    assert digits.seeds == [0, 1] and digits.differences == pytest.approx([a - 0.5 for a in aurocs])

    import shutil

    shutil.rmtree(out)  # a later session on a fresh checkout: only the published files are left
    log.clear()
    run_benchmark(bench, base_dir, log=log.append)
    assert sorted(line for line in log if line.startswith("restored")) == [
        f"restored {name} from {published / 'cells' / name}"
        for name in ("simclr-s0", "simclr-s1", "tau-posthoc-s0", "tau-posthoc-s1")
    ]
    assert not list(out.rglob("*.ckpt")) and not any(line.startswith("evaluated") for line in log)
    assert read_json(published / "results.json")["groups"] == results["groups"]
    # today's default, recomputed from the saved per-image scores, is what the ood suite decided live with it
    for row in results["cells"]:
        m = row["metrics"]
        assert m["ood/sets.digits.default.auroc"] == pytest.approx(m["ood/sets.digits.combined.auroc"], abs=2e-3)
        assert m["ood/default.id_accepted"] == pytest.approx(m["ood/id_accepted"], abs=0.02)
    # a checkout with the published cells alone: --report-only rebuilds their results by this code
    shutil.rmtree(out)
    (published / "results.json").unlink()
    assert main(["benchmark", "--config", bench_file, "--report-only"]) == 0
    assert read_json(published / "results.json")["groups"] == results["groups"]
    assert not (out / "cells").exists()
    assert digits.interval is not None and digits.verdict in (
        "reproduced",
        "contradicted",
        "not reproduced",
        "inconclusive at this budget",
    )


@TAU_POSTHOC_NOTICE
def test_a_cell_that_fails_unexpectedly_lets_the_others_finish_and_is_retried(tmp_path, monkeypatch):
    """A bug in one cell (not bad input, not divergence) must not cost a long study its other cells: the
    failure is recorded with its traceback, cells initialised from it wait, the command fails at the end
    naming it, and the next run retries it."""
    import probcl.tasks.pretrain as pretrain_module
    from probcl.errors import RunError

    out = tmp_path / "study"
    bench_file = write(
        tmp_path / "b.yaml",
        {
            "out": str(out),
            "methods": {
                "simclr": "fashion-mnist/simclr",
                "bad": "fashion-mnist/simclr",
                "posthoc": {"config": "fashion-mnist/tau-posthoc", "init_from": "bad"},
            },
            "overrides": TINY,
            "suites": ["linear"],
            "eval": {"max_train": 200},
        },
    )
    bench, base_dir = load_benchmark(bench_file)
    real = pretrain_module.pretrain

    def flaky(cfg):
        if cfg.run_dir.endswith("bad-s0"):
            raise RuntimeError("boom\n" + "tensor([...])\n" * 50)
        return real(cfg)

    monkeypatch.setattr(pretrain_module, "pretrain", flaky)
    log: list[str] = []
    with pytest.raises(RunError, match=r"1 cell\(s\) failed unexpectedly: bad-s0"):
        run_benchmark(bench, base_dir, log=log.append)
    record = read_json(out / "cells" / "bad-s0" / "cell.json")
    assert record["retry"] and record["error"].startswith("RuntimeError: boom (traceback in ")
    assert "Traceback" in (out / "cells" / "bad-s0" / "error.log").read_text()
    assert "[3/3] skipped posthoc-s0: the cell it starts from (bad) has not trained" in log
    assert "evaluated simclr-s0: linear" in log
    results = read_json(out / "results.json")
    assert [c["name"] for c in results["cells"] if c["error"]] == ["bad-s0"]

    monkeypatch.setattr(pretrain_module, "pretrain", real)
    log.clear()
    run_benchmark(bench, base_dir, log=log.append)  # the fixed cell and the one waiting for it now train
    assert [line for line in log if line.startswith("evaluated")] == [  # trained now: nothing else needs it
        "evaluated bad-s0: linear",
        "evaluated posthoc-s0: linear",
    ]
    assert not read_json(out / "cells" / "bad-s0" / "cell.json").get("error")
    assert {c["name"] for c in read_json(out / "results.json")["cells"] if not c["error"]} == {
        "simclr-s0",
        "bad-s0",
        "posthoc-s0",
    }


def test_a_seed_ensemble_forms_when_the_last_seed_lands_and_training_metrics_enter_the_results(tmp_path):
    """No training: cells written by hand. The ensemble's AUROC is scikit-learn's on the mean of the seeds'
    probe outputs; a training metric is the mean over the last epoch of metrics.jsonl."""
    import json

    import torch
    from sklearn.metrics import roc_auc_score

    from probcl.eval.ood import PROBE_OUTPUTS
    from probcl.tasks.benchmark.results import collect

    bench_file = write(
        tmp_path / "b.yaml",
        {
            "methods": {"simclr": "fashion-mnist/simclr"},
            "seeds": [0, 1],
            "suites": ["ood"],
            "seed_ensembles": ["simclr"],
            "training_metrics": ["train/bank_query_cos"],
        },
    )
    bench, _ = load_benchmark(bench_file)
    cells = grid(bench)
    g = torch.Generator().manual_seed(0)
    outputs = []
    for cell, rows in zip(cells, ([(0, 0.1), (1, 0.5), (1, 0.7)], [(0, 0.2), (1, 0.9)])):
        run = tmp_path / "cells" / cell.name
        run.mkdir(parents=True)
        (run / "cell.json").write_text(json.dumps({"config": {}}))
        (run / "eval.json").write_text(json.dumps({"ood": {"id_accepted": 0.95}}))
        lines = [json.dumps({"step": i, "epoch": e, "train/bank_query_cos": v}) for i, (e, v) in enumerate(rows)]
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        probs = {"id": torch.softmax(torch.randn(20, 3, generator=g) * 3, 1), "digits": torch.rand(15, 3, generator=g)}
        outputs.append({k: v / v.sum(1, keepdim=True) for k, v in probs.items()})
        if cell.seed == 0:
            assert "ood/sets.digits.ensemble_msp.auroc" not in collect(bench, cells, tmp_path)["cells"][0]["metrics"]
        torch.save({k: v.half() for k, v in outputs[-1].items()}, run / PROBE_OUTPUTS)
    results = collect(bench, cells, tmp_path)
    mean = {k: torch.stack([o[k].half().float() for o in outputs]).mean(0) for k in ("id", "digits")}
    expected = roc_auc_score([0] * 20 + [1] * 15, torch.cat([-mean["id"].amax(1), -mean["digits"].amax(1)]))
    for row in results["cells"]:
        assert row["metrics"]["ood/sets.digits.ensemble_msp.auroc"] == pytest.approx(expected, abs=1e-9)
    assert results["ensembles"] == {"simclr": {"seeds": [0, 1]}}
    assert [r["metrics"]["train/bank_query_cos"] for r in results["cells"]] == pytest.approx([0.6, 0.9])


def test_seeds_split_a_grid_between_machines_and_no_report_leaves_the_report_to_the_end(tmp_path):
    """`--seeds 1 --no-report` trains only seed 1's cells and writes no report; `--seeds 0` then the rest, and one
    `--report-only` reports all; an unknown or malformed seed is one clear error before any work."""
    out = tmp_path / "bench"
    bench_file = write(
        tmp_path / "split.yaml",
        {
            "title": "split",
            "out": str(out),
            "methods": {"simclr": "fashion-mnist/simclr"},
            "overrides": TINY,
            "seeds": [0, 1],
            "suites": ["knn"],
            "eval": {"max_train": 200},
        },
    )
    assert main(["benchmark", "--config", bench_file, "--seeds", "1", "--no-report"]) == 0
    assert sorted(p.name for p in (out / "cells").iterdir()) == ["simclr-s1"]
    assert read_json(out / "cells" / "simclr-s1" / "eval.json")["knn"]["top1"] >= 0  # trained and evaluated
    assert not (out / "results.json").exists() and not (out / "report.md").exists()
    assert main(["benchmark", "--config", bench_file, "--seeds", "0", "--no-report"]) == 0
    assert main(["benchmark", "--config", bench_file, "--report-only"]) == 0
    assert [c["name"] for c in read_json(out / "results.json")["cells"]] == ["simclr-s0", "simclr-s1"]
    for bad in ("7", "0,x", ","):
        assert main(["benchmark", "--config", bench_file, "--seeds", bad]) != 0


def test_a_resumed_cell_records_its_rate_over_the_epochs_it_trained(tmp_path, monkeypatch):
    """A cell resumed from its checkpoint at epoch 3 of 5, whose call took 60 s: 30 s per epoch trained, not 12 s
    over all 5 (nor no rate, as cells recorded before), and the record says it was resumed."""
    import probcl.tasks.benchmark.run as run_module
    import probcl.tasks.pretrain as pretrain_module
    from probcl.core.layout import RunPaths

    bench, base_dir = load_benchmark(
        write(
            tmp_path / "b.yaml",
            {"methods": {"simclr": "fashion-mnist/simclr"}, "overrides": {**TINY, "train.epochs": 5}, "seeds": [0]},
        )
    )
    cfg = cell_config(bench, Cell("simclr", 0), tmp_path / "out", base_dir)
    paths = RunPaths(tmp_path / "out" / "cells" / "simclr-s0")
    paths.last.parent.mkdir(parents=True)
    torch.save({"epoch": 3}, paths.last)  # what a worker stopped after epoch 3 leaves
    clock = iter([100.0, 160.0])
    monkeypatch.setattr(run_module, "time", SimpleNamespace(perf_counter=lambda: next(clock)))  # this module's clock
    monkeypatch.setattr(pretrain_module, "pretrain", lambda cfg: None)  # the 2 remaining epochs, in 60 s
    record, trained = run_module.train_cell(cfg)
    assert trained and record["started_at_epoch"] == 3 and record["seconds"] == 60
    assert record["seconds_per_epoch"] == 30
    assert "resumed at epoch 3" in record["timing"]
