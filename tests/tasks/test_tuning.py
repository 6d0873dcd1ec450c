"""Equal-budget tuning on held-out training images (probcl.tasks.tuning, the heldout suite, data_protocol heldout):
the draw, the committed trial files, the protocol's refusals, and an end-to-end trial that must open no test file
and load no class it is told never to load."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import yaml
from tuning_files import run_script, write_tiny_tuning

from probcl.config import ConfigError
from probcl.core.presets import resolve_config_path
from probcl.eval.heldout import heldout_ece, heldout_indices
from probcl.tasks.benchmark.grid import grid, load_benchmark
from probcl.tasks.tuning import (
    Parameter,
    draw_trials,
    latin_hypercube,
    load_tuning,
    select,
    trials_tree,
    tuned_tree,
)

MAIN_GRID = {
    "simclr",
    "moco",
    "byol",
    "simsiam",
    "vem-langevin",
    "vem-svgd",
    "ebclr",
    "tau-simclr",
    "c-simclr",
    "c-byol",
}
TUNING_FILES = ["fashion-mnist/study-v3-tuning", "fashion-mnist/dev-tuning"]


def test_latin_hypercube_puts_one_point_in_each_stratum_of_every_dimension():
    points = latin_hypercube(8, 3, "46:simclr")
    assert len(points) == 8 and all(len(p) == 3 for p in points)
    for d in range(3):
        assert sorted(math.floor(p[d] * 8) for p in points) == list(range(8))
    assert latin_hypercube(8, 3, "46:simclr") == points  # seeded
    assert latin_hypercube(8, 3, "46:moco") != points


@pytest.mark.parametrize(
    ("parameter", "u", "expected"),
    [
        (Parameter(1e-4, 1e-2, "why"), 0.5, 1e-3),  # geometric midpoint
        (Parameter(0.0, 2.0, "why", scale="linear"), 0.25, 0.5),
        (Parameter(0.9, 0.999, "why", scale="log-complement"), 0.5, 0.99),  # 1 - sqrt(0.1 * 0.001)
        (Parameter(0.05, 0.5, "why"), 0.0, 0.05),
    ],
)
def test_a_quantile_maps_onto_the_parameter_scale(parameter, u, expected):
    assert parameter.value(u) == pytest.approx(expected, rel=1e-3)


def test_every_main_grid_method_gets_the_same_trials_within_its_declared_ranges():
    spec, _ = load_tuning("fashion-mnist/study-v3-tuning")
    assert set(spec.methods) == MAIN_GRID and spec.trials == 8 and spec.never_load_classes == [8, 9]
    for label, trials in draw_trials(spec).items():
        assert len(trials) == 8 and len({tuple(t.values()) for t in trials}) == 8
        for trial in trials:
            for key, value in trial.items():
                p = spec.methods[label].space[key]
                assert p.low <= value <= p.high and p.why.strip()
    bench, _ = load_benchmark("fashion-mnist/study-v3-tuning-trials")
    cells = grid(bench)
    assert len(cells) == 90
    # trial 0 of every method first, then trial 1, ...: stopped anywhere, the budgets differ by one trial at most
    assert {c.method for c in cells[:10]} == {f"{m}-t0" for m in MAIN_GRID}
    # then each method's preset control (tests/tasks/test_preset_controls.py), which is not a trial
    assert {c.method for c in cells[80:]} == {f"{m}-preset" for m in MAIN_GRID}
    assert "simclr" not in bench.methods  # SimCLR's hand-tuned preset is not a trial


@pytest.mark.parametrize("name", TUNING_FILES)
def test_the_committed_trials_file_is_the_one_the_tuning_file_draws(name):
    spec, folder = load_tuning(name)
    committed = yaml.safe_load((folder / spec.trials_file).read_text())
    assert committed == yaml.safe_load(yaml.safe_dump(trials_tree(spec, folder)))


def test_the_dev_split_trains_on_classes_0_5_and_scores_near_ood_on_training_images_of_6_7():
    bench, _ = load_benchmark("fashion-mnist/dev-tuning-trials")
    assert bench.data_protocol == "heldout" and set(bench.never_load_classes) >= {8, 9}
    assert bench.overrides["data.dataset"] == "fashion-mnist:classes=0-5"
    assert bench.suite_options["heldout"]["near_ood"] == "fashion-mnist:classes=6,7"


def test_the_dev_split_gives_each_of_issue_45s_candidates_simclrs_eight_trials_and_writes_the_rule():
    spec, folder = load_tuning("fashion-mnist/dev-tuning")
    rule = spec.candidates
    assert rule is not None and rule.seed == "simclr"
    assert rule.candidates == ["simclr-pred", "simclr-lowdrop", "simclr-pred-lowdrop"]
    assert (rule.accuracy_margin, rule.calibration_margin, rule.tie) == (0.3, 0.005, 0.002)
    assert (rule.metric, rule.calibration) == ("heldout/near_ood_knn10_auroc", "heldout/linear_ece")
    shared = {k: (p.low, p.high) for k, p in spec.methods["simclr"].space.items()}
    for label in rule.candidates:
        assert {k: (p.low, p.high) for k, p in spec.methods[label].space.items() if k in shared} == shared
    bench, base_dir = load_benchmark(folder / spec.trials_file)
    cells = {c.name: cell_settings(bench, base_dir, c) for c in grid(bench)}
    assert len(cells) == 4 * 8
    for k in range(8):
        pred, drop, both = (cells[f"{m}-t{k}-s0"] for m in rule.candidates)
        assert pred["method"] == both["method"] == "simclr-pred" and drop["method"] == "simclr"
        assert 0.1 <= pred["method_args"]["predictor_weight"] <= 10 and pred["model"]["dropout2d"] == 0.0
        assert 0.02 <= drop["model"]["dropout2d"] <= 0.25 and 0.02 <= both["model"]["dropout2d"] <= 0.25
        # every candidate at the study's budget, as SimCLR's trials: 2x2 grid, 936 steps of batch 128 on classes 0-5
        for cell in (pred, drop, both, cells[f"simclr-t{k}-s0"]):
            assert (cell["model"]["pool"], cell["train"]["epochs"], cell["train"]["batch_size"]) == (2, 6, 128)
            assert cell["data"]["dataset"] == "fashion-mnist:classes=0-5"


def heldout_bench(tmp_path: Path, **changes) -> Path:
    tree = {
        "data_protocol": "heldout",
        "never_load_classes": [8, 9],
        "suites": ["heldout"],
        "overrides": {"data.dataset": "fashion-mnist:classes=0-7", "train.monitor_every_n_epochs": 0},
        "methods": {"simclr-t0": "fashion-mnist/simclr"},
    }
    for key, value in changes.items():
        tree[key] = value
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"suites": ["heldout", "linear"]}, "only the heldout suite"),
        ({"overrides": {"data.dataset": "fashion-mnist:classes=0-7"}}, "online monitor"),
        ({"overrides": {"data.dataset": "fashion-mnist", "train.monitor_every_n_epochs": 0}}, "not a class filter"),
        (
            {"overrides": {"data.dataset": "fashion-mnist:classes=0-8", "train.monitor_every_n_epochs": 0}},
            "loads class(es) [8]",
        ),
        (
            {"suites": ["heldout"], "suite_options": {"heldout": {"near_ood": "fashion-mnist:classes=6,9"}}},
            "near_ood",
        ),
    ],
)
def test_the_heldout_protocol_refuses_anything_that_could_read_test_images_or_held_out_classes(
    tmp_path, changes, message
):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_benchmark(heldout_bench(tmp_path, **changes))


def test_heldout_indices_score_unseen_images_and_fit_on_others():
    pretrained = torch.arange(0, 100, 2)  # the even images were pretrained on
    fit, score = heldout_indices(100, pretrained, fit_images=40, score_images=30, split_seed=3)
    assert len(fit) == 40 and len(score) == 30
    assert not set(fit.tolist()) & set(score.tolist())
    assert all(i % 2 == 1 for i in score.tolist())
    with pytest.raises(ConfigError, match="cannot give"):
        heldout_indices(100, pretrained, fit_images=10, score_images=51, split_seed=3)


def test_the_heldout_ece_is_the_calibration_suites_twenty_bin_ece_computed_by_hand():
    # two classes; (probability of class 0, label): confidence max(p, 1 - p), correct when the argmax is the label
    cases = [(0.9, 0), (0.9, 1), (0.23, 1), (0.62, 0), (0.66, 0), (0.31, 0)]
    p = torch.tensor([c for c, _ in cases], dtype=torch.float64)
    logits = torch.stack([p.log(), (1 - p).log()], dim=1)
    labels = torch.tensor([y for _, y in cases])
    # bins of width 0.05: {0.9, 0.9}: accuracy 1/2; {0.77}: 1; {0.62}: 1; [0.65, 0.7) holds 0.66 (right) and 0.69
    # (wrong, it predicts class 1): accuracy 1/2, confidence 0.675 (15 bins would split them at 2/3)
    expected = (2 * abs(0.5 - 0.9) + abs(1 - 0.77) + abs(1 - 0.62) + 2 * abs(0.5 - 0.675)) / 6
    assert heldout_ece(logits, labels) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(("classes", "near_ood"), [("0-7", None), ("0-5", "fashion-mnist:classes=6,7")])
def test_a_tuning_run_opens_no_test_file_loads_no_held_out_class_and_selects_by_its_rule(
    tmp_path, monkeypatch, classes, near_ood
):
    import probcl.data.builtin as builtin
    import probcl.data.loaders as loaders
    from probcl.core.io import read_json
    from probcl.tasks.benchmark.run import run_benchmark

    opened: list[str] = []
    kept: list[int] = []
    idx_file, keep_classes = builtin._idx_file, loaders.keep_classes

    def spy_idx_file(folder, stem):
        opened.append(stem)
        return idx_file(folder, stem)

    def spy_keep_classes(data, wanted, spec):
        kept.extend(wanted)
        return keep_classes(data, wanted, spec)

    monkeypatch.setattr(builtin, "_idx_file", spy_idx_file)
    monkeypatch.setattr(loaders, "keep_classes", spy_keep_classes)

    spec, folder = load_tuning(write_tiny_tuning(tmp_path, classes, near_ood))
    (folder / spec.trials_file).write_text(yaml.safe_dump(trials_tree(spec, folder)))
    bench, base_dir = load_benchmark(folder / spec.trials_file)
    run_benchmark(bench, base_dir, log=lambda _: None)

    assert opened and all(stem.startswith("train-") for stem in opened), opened  # never t10k-*
    assert kept and not {8, 9} & set(kept)
    published = Path(spec.publish)
    scores = {}
    for cell in sorted((published / "cells").iterdir()):
        result = read_json(cell / "eval.json")["heldout"]
        assert result["protocol"]["score_images"] == 200 and result["protocol"]["fit_images"] == 300
        assert ("near_ood_knn10_auroc" in result) == (near_ood is not None)
        assert 0.0 <= result["linear_ece"] <= 1.0 and "20 equal-width bins" in result["protocol"]["ece"]
        scores[cell.name] = (result["linear_top1"], result["knn_top1"])
    assert len(scores) == 4
    selections = select(spec, published)
    for s in selections:  # the rule, computed here from eval.json: max linear, then kNN, then the lower trial
        best = max(range(2), key=lambda k: (*scores[f"{s.method}-t{k}-s0"], -k))
        assert s.complete and s.winner is not None and s.winner.index == best
    tuned = tuned_tree(spec, selections)
    assert tuned["extends"] == "budget.yaml" and tuned["publish"] is None and tuned["out"] == "runs/tuned"
    simclr = next(s for s in selections if s.method == "simclr")
    assert simclr.winner is not None
    assert tuned["methods"]["simclr"]["overrides"] == draw_trials(spec)["simclr"][simclr.winner.index]


def test_tuned_settings_are_refused_while_trials_are_unfinished(tmp_path):
    spec, _ = load_tuning(write_tiny_tuning(tmp_path, "0-7", None))
    with pytest.raises(ConfigError, match="tuning is not finished for byol, simclr"):
        tuned_tree(spec, select(spec, tmp_path / "nothing-published"))


def test_a_tuning_file_naming_a_method_the_budget_lacks_is_refused(tmp_path):
    path = write_tiny_tuning(tmp_path, "0-7", None)
    tree = yaml.safe_load(path.read_text())
    tree["methods"]["ebclr"] = tree["methods"]["simclr"]
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(ConfigError, match="'ebclr' is not a method of the budget"):
        load_tuning(path)


def test_the_study_tuning_file_is_a_preset():
    assert resolve_config_path("fashion-mnist/study-v3-tuning").is_file()


PRESETS = Path(__file__).resolve().parents[2] / "probcl" / "presets" / "fashion-mnist"


def v3_with_tuned_settings(tmp_path: Path) -> tuple[Path, dict[str, dict]]:
    """The v3 study files in a folder beside a study-v3-tuned.yaml generated (by the tuning code) from published
    trials whose scores make trial k = (method's index + 3) % 8 each method's winner; returns the folder and each
    method's winning settings."""
    spec, _ = load_tuning("fashion-mnist/study-v3-tuning")
    drawn = draw_trials(spec)
    published = tmp_path / "published"
    winners = {}
    for i, label in enumerate(spec.methods):
        best = (i + 3) % spec.trials
        winners[label] = drawn[label][best]
        for k in range(spec.trials):
            cell = published / "cells" / f"{label}-t{k}-s0"
            cell.mkdir(parents=True)
            (cell / "cell.json").write_text("{}")
            score = 80.0 + (5.0 if k == best else k * 0.1)
            (cell / "eval.json").write_text(f'{{"heldout": {{"linear_top1": {score}, "knn_top1": 70.0}}}}')
    folder = tmp_path / "presets"
    folder.mkdir()
    (folder / spec.tuned_file).write_text(yaml.safe_dump(tuned_tree(spec, select(spec, published))))
    for name in ("study-v3.yaml", "study-v3-long.yaml", "study-v3-split2.yaml", "study-v3-split2-long.yaml"):
        (folder / name).write_text((PRESETS / name).read_text())
    return folder, winners


def cell_settings(bench, base_dir, cell) -> dict:
    from probcl.config import to_plain
    from probcl.tasks.benchmark.grid import cell_config

    return to_plain(cell_config(bench, cell, Path("runs"), base_dir).to_dict())


def test_v3_studies_take_the_tuning_winners_six_seeds_and_a_second_split(tmp_path):
    from probcl.tasks.benchmark.grid import Cell, method_seeds

    folder, winners = v3_with_tuned_settings(tmp_path)
    six, three = [0, 1, 2, 3, 4, 5], [0, 1, 2]

    tuned, _ = load_benchmark(folder / "study-v3-tuned.yaml")
    assert tuned.publish is None and tuned.out == "runs/study-v3-tuned"  # never the v2 study's folders
    bench, base = load_benchmark(folder / "study-v3.yaml")
    assert all(method_seeds(bench, m) == six for m in bench.methods)
    assert bench.overrides["train.epochs"] == 6 and bench.overrides["data.dataset"] == "fashion-mnist:classes=0-7"
    simclr = cell_settings(bench, base, Cell("simclr", 4))
    assert simclr["optim"]["lr"] == winners["simclr"]["optim.lr"]
    assert simclr["method_args"]["temperature"] == winners["simclr"]["method_args.temperature"]
    dropout = cell_settings(bench, base, Cell("simclr-dropout", 5))
    assert dropout["model"]["dropout2d"] == 0.5 and dropout["optim"]["lr"] == winners["simclr"]["optim.lr"]
    svgd = cell_settings(bench, base, Cell("vem-svgd", 0))
    assert (
        svgd["method_args"]["bank_size"] == 1024
        and svgd["method_args"]["step_size"] == (winners["vem-svgd"]["method_args.step_size"])
    )
    ebclr = cell_settings(bench, base, Cell("ebclr", 0))
    assert ebclr["method_args"]["sgld"]["step_size"] == winners["ebclr"]["method_args.sgld.step_size"]
    assert set(bench.claims) >= {"ebclr-accuracy", "vem-accuracy", "tau-ood", "ceb-accuracy"}

    long, base = load_benchmark(folder / "study-v3-long.yaml")
    deciding = {"simclr", "vem-langevin", "c-simclr", "byol", "c-byol", "simclr-pred"}  # + issue 45's own method
    assert {m for m in long.methods if method_seeds(long, m) == six} == deciding
    assert all(method_seeds(long, m) == three for m in set(long.methods) - deciding)
    assert long.overrides["train.epochs"] == 30
    assert cell_settings(long, base, Cell("tau-posthoc", 0))["train"]["epochs"] == 10
    assert (
        cell_settings(long, base, Cell("c-byol", 5))["method_args"]["w_byol"] == winners["c-byol"]["method_args.w_byol"]
    )

    split2, base = load_benchmark(folder / "study-v3-split2.yaml")
    assert set(split2.methods) == {"simclr", "tau-simclr", "simclr-dropout", "ebclr", "c-simclr", "simclr-pred"}
    assert all(method_seeds(split2, m) == six for m in split2.methods) and split2.seed_ensembles == ["simclr"]
    assert split2.overrides["data.dataset"] == "fashion-mnist:classes=0,1,3,4,5,7,8,9"
    assert split2.suite_options["ood"]["datasets"] == ["fashion-mnist:classes=2,6", "digits"]
    assert set(split2.claims) == {"tau-ood-split2", "own-method-split2"}
    assert list(split2.budgets.values()) == ["fashion-mnist/study-v3-split2", "fashion-mnist/study-v3-split2-long"]
    assert not any("8-9" in str(v) for v in split2.headline.values())
    tau = cell_settings(split2, base, Cell("tau-simclr", 3))
    assert tau["optim"]["lr"] == winners["tau-simclr"]["optim.lr"]
    assert tau["data"]["dataset"] == "fashion-mnist:classes=0,1,3,4,5,7,8,9"

    # the split at 4,680 steps: only the own method's split-2 claim and its cells, six seeds, 5x the epochs
    split2_long, base = load_benchmark(folder / "study-v3-split2-long.yaml")
    assert set(split2_long.methods) == {"simclr", "tau-simclr", "ebclr", "c-simclr", "simclr-pred"}
    assert all(method_seeds(split2_long, m) == six for m in split2_long.methods)
    assert set(split2_long.claims) == {"own-method-split2"} and split2_long.overrides["train.epochs"] == 30
    ebclr = cell_settings(split2_long, base, Cell("ebclr", 4))
    assert ebclr["method_args"]["sgld"]["step_size"] == winners["ebclr"]["method_args.sgld.step_size"]
    assert ebclr["data"]["dataset"] == "fashion-mnist:classes=0,1,3,4,5,7,8,9"


def test_extends_null_removes_a_base_key_but_sets_a_value_under_overrides():
    from probcl.tasks.benchmark.extends import deep_merge

    base = {"budgets": {"a": "x"}, "suite_options": {"ood": {"k": 1}, "lipschitz": {"k": 2}}, "overrides": {"m": 1}}
    top = {"budgets": None, "suite_options": {"lipschitz": None}, "overrides": {"m": None}}
    assert deep_merge(base, top, null_removes=True) == {"suite_options": {"ood": {"k": 1}}, "overrides": {"m": None}}
    assert deep_merge(base, top)["budgets"] is None  # without null_removes, null is a value as before


def test_extends_claims_keeps_only_the_named_claims_of_the_base(tmp_path):
    (tmp_path / "child.yaml").write_text(
        yaml.safe_dump({"extends": {"config": "fashion-mnist/study", "claims": ["tau-ood"]}, "out": "x"})
    )
    bench, _ = load_benchmark(tmp_path / "child.yaml")
    assert set(bench.claims) == {"tau-ood"}
    (tmp_path / "bad.yaml").write_text(
        yaml.safe_dump({"extends": {"config": "fashion-mnist/study", "claims": ["nope"]}})
    )
    with pytest.raises(ConfigError, match="extends.claims names nope"):
        load_benchmark(tmp_path / "bad.yaml")


def test_the_script_reports_unfinished_trials_and_refuses_the_settings_until_all_have_run(tmp_path):
    path = write_tiny_tuning(tmp_path, "0-7", None)
    done = run_script("report", "--config", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "published" / "selection.md").read_text()
    assert table.count("0 of 2 trials finished; no winner until every trial has finished") == 2
    refused = run_script("settings", "--config", str(path), cwd=tmp_path)
    assert refused.returncode == 2 and "tuning is not finished for byol, simclr" in refused.stderr
    assert not (tmp_path / "tuned.yaml").exists()
