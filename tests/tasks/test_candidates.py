"""Issue 45's candidate rule (probcl.tasks.candidates) on hand-made trial records: qualifying candidates, a tie, no
candidate qualifying, unfinished and diverged trials; the tuning file's checks of the rule and of candidates with
their own entries; the rule as the report script prints it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from tuning_files import run_script, write_tiny_tuning

from probcl.config import ConfigError
from probcl.tasks.candidates import choose
from probcl.tasks.tuning import load_tuning, select, trials_tree, tuned_tree

DIVERGED = "diverged"
RULE = "the rule in words"
LR = {"optim.lr": {"low": 1e-4, "high": 5e-3, "why": "lr"}}


def write_candidate_tuning(tmp_path: Path, **changes) -> Path:
    """A tuning file of three trials each: the seed simclr (a budget method) and two candidates of their own."""
    path = write_tiny_tuning(tmp_path, "0-5", "fashion-mnist:classes=6,7")
    tree = yaml.safe_load(path.read_text())
    space = tree["methods"]["simclr"]["space"]
    tree["trials"] = 3
    tree["methods"] = {
        "simclr": {"space": space},
        "cand-a": {"config": "fashion-mnist/simclr-pred", "space": space},
        "cand-b": {"config": "fashion-mnist/simclr", "overrides": {"model.dropout2d": 0.1}, "space": space},
    }
    tree["candidates"] = {"seed": "simclr", "candidates": ["cand-a", "cand-b"], "rule": RULE}
    for key, value in changes.items():
        tree[key] = value
    path.write_text(yaml.safe_dump(tree))
    return path


def publish(tmp_path: Path, records: dict[str, list]) -> Path:
    """Each trial's cell.json and eval.json: (linear top-1, ECE, near-OOD AUROC), DIVERGED, or None (not run)."""
    published = tmp_path / "published"
    for label, trials in records.items():
        for k, values in enumerate(trials):
            cell = published / "cells" / f"{label}-t{k}-s0"
            if values is None:
                continue
            cell.mkdir(parents=True)
            if values == DIVERGED:
                (cell / "cell.json").write_text(json.dumps({"error": "loss is nan"}))
                continue
            top1, ece, auroc = values
            (cell / "cell.json").write_text("{}")
            heldout = {"linear_top1": top1, "knn_top1": 70.0, "linear_ece": ece, "near_ood_knn10_auroc": auroc}
            (cell / "eval.json").write_text(json.dumps({"heldout": heldout}))
    return published


# the seed's winner is its trial 1 (highest linear top-1): the bar is top-1 >= 85.7, ECE <= 0.017, its AUROC 0.91
SEED = [(85.0, 0.010, 0.90), (86.0, 0.012, 0.91), (84.0, 0.020, 0.92)]


def outcome(tmp_path: Path, records: dict[str, list]):
    spec, _ = load_tuning(write_candidate_tuning(tmp_path))
    assert spec.candidates is not None
    return choose(spec.candidates, select(spec, publish(tmp_path, records)))


def test_each_candidate_takes_its_qualifying_trial_with_the_best_near_ood_and_the_best_candidate_wins(tmp_path):
    result = outcome(
        tmp_path,
        {
            "simclr": SEED,
            # t2 has the best AUROC but misses the accuracy bar; t0 beats t1 on AUROC
            "cand-a": [(85.8, 0.015, 0.95), (86.5, 0.010, 0.93), (85.0, 0.010, 0.99)],
            # t0 sits exactly on both bars (qualifies); t1 misses the ECE bar; t2 diverged
            "cand-b": [(85.7, 0.017, 0.94), (86.0, 0.030, 0.99), DIVERGED],
        },
    )
    assert result.bar is not None and result.bar.seed_trial.index == 1
    assert result.bar.accuracy == pytest.approx(85.7) and result.bar.calibration == pytest.approx(0.017)
    chosen = {c.method: (c.trial.index, c.qualifies) for c in result.choices}
    assert chosen == {"cand-a": (0, True), "cand-b": (0, True)}
    assert result.winner == "cand-a"
    assert result.note.startswith("cand-a qualifies with the highest heldout/near_ood_knn10_auroc (0.9500)")
    assert "+0.0400 against simclr's winning trial (0.9100)" in result.note


@pytest.mark.parametrize(("auroc_b", "winner"), [(0.9485, "cand-b"), (0.9470, "cand-a")])
def test_near_ood_within_the_tie_goes_to_the_more_accurate_candidate(tmp_path, auroc_b, winner):
    result = outcome(
        tmp_path,
        {
            "simclr": SEED,
            "cand-a": [(85.8, 0.015, 0.950), (80.0, 0.01, 0.5), (80.0, 0.01, 0.5)],
            "cand-b": [(86.2, 0.012, auroc_b), (80.0, 0.01, 0.5), (80.0, 0.01, 0.5)],
        },
    )
    assert result.winner == winner  # 0.9500 - 0.9485 = 0.0015 is a tie (<= 0.002); 0.0030 is not
    assert ("tied within 0.002 with cand-a and the more accurate" in result.note) == (winner == "cand-b")


def test_with_no_candidate_qualifying_each_takes_its_most_accurate_trial_and_the_smallest_shortfall_wins(tmp_path):
    result = outcome(
        tmp_path,
        {
            "simclr": SEED,
            "cand-a": [(85.0, 0.010, 0.99), (84.0, 0.010, 0.99), (83.0, 0.010, 0.99)],  # 0.7 points short
            "cand-b": [(84.0, 0.010, 0.97), (85.5, 0.030, 0.96), DIVERGED],  # 0.2 short (and ECE 0.013 above)
        },
    )
    chosen = {c.method: (c.trial.index, c.qualifies) for c in result.choices}
    assert chosen == {"cand-a": (0, False), "cand-b": (1, False)}
    shortfall = {c.method: round(c.accuracy_shortfall, 6) for c in result.choices}
    assert shortfall == {"cand-a": 0.7, "cand-b": 0.2}
    assert result.winner == "cand-b" and result.note.startswith("no candidate qualifies: cand-b")


@pytest.mark.parametrize(
    "records",
    [
        {"simclr": SEED, "cand-a": [(86.0, 0.01, 0.95)] * 2 + [None], "cand-b": [(86.0, 0.01, 0.95)] * 3},
        {"simclr": SEED[:2] + [None], "cand-a": [(86.0, 0.01, 0.95)] * 3, "cand-b": [(86.0, 0.01, 0.95)] * 3},
    ],
    ids=["a candidate trial not run", "a seed trial not run"],
)
def test_no_winner_while_a_trial_of_the_seed_or_a_candidate_is_unfinished(tmp_path, records):
    result = outcome(tmp_path, records)
    assert result.winner is None and result.bar is None and result.choices == []
    assert result.note.startswith("no winner until every trial has finished")


def test_a_trial_without_the_rules_readings_is_unfinished(tmp_path):
    # an eval.json of a heldout suite without linear_ece (or without near OOD) cannot be judged by the rule
    spec, _ = load_tuning(write_candidate_tuning(tmp_path))
    published = publish(tmp_path, {"simclr": SEED, "cand-a": [(86.0, 0.01, 0.95)] * 3, "cand-b": [(86, 0.01, 0.9)] * 3})
    record = published / "cells" / "cand-b-t2-s0" / "eval.json"
    record.write_text(json.dumps({"heldout": {"linear_top1": 86.0, "knn_top1": 70.0}}))
    selections = {s.method: s for s in select(spec, published)}
    assert not selections["cand-b"].complete and selections["simclr"].complete
    assert spec.candidates is not None and choose(spec.candidates, list(selections.values())).winner is None


def test_a_candidate_runs_its_own_entry_and_enters_the_tuned_study_with_it(tmp_path):
    spec, folder = load_tuning(write_candidate_tuning(tmp_path))
    cells = trials_tree(spec, folder)["methods"]
    assert cells["cand-b-t1"]["config"] == "fashion-mnist/simclr"
    assert cells["cand-b-t1"]["overrides"]["model.dropout2d"] == 0.1 and "optim.lr" in cells["cand-b-t1"]["overrides"]
    assert cells["cand-a-t0"]["config"] == "fashion-mnist/simclr-pred"
    published = publish(tmp_path, {label: SEED for label in ("simclr", "cand-a", "cand-b")})
    tuned = tuned_tree(spec, select(spec, published))["methods"]
    assert (
        tuned["cand-b"]["config"] == "fashion-mnist/simclr" and tuned["cand-b"]["overrides"]["model.dropout2d"] == 0.1
    )
    assert "config" not in tuned["simclr"]  # a budget method keeps the budget's entry


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"candidates": {"seed": "simclr", "candidates": ["cand-c"], "rule": RULE}}, "'cand-c', which is not a tuned"),
        ({"candidates": {"seed": "simclr", "candidates": ["simclr"], "rule": RULE}}, "none twice nor the seed"),
        ({"candidates": {"seed": "simclr", "candidates": ["cand-a"], "rule": " "}}, "state the rule in words"),
        (
            {"candidates": {"seed": "simclr", "candidates": ["cand-a"], "rule": RULE, "accuracy_margin": -0.3}},
            "candidates.accuracy_margin must be >= 0",
        ),
        (
            {
                "methods": {
                    "simclr": {
                        "config": "fashion-mnist/simclr",
                        "space": {"optim.lr": {"low": 1, "high": 2, "why": "x"}},
                    }
                }
            },
            "has a config of its own but 'simclr' is a method of the budget",
        ),
        (
            {
                "methods": {
                    "byol": {
                        "overrides": {"model.dropout2d": 0.1},
                        "space": {"optim.lr": {"low": 1, "high": 2, "why": "x"}},
                    }
                }
            },
            "methods.byol.overrides needs methods.byol.config",
        ),
        (
            {"methods": {"own": {"config": "fashion-mnist/simclr", "overrides": {"optim.lr": 1e-3}, "space": LR}}},
            "methods.own fixes optim.lr in overrides and draws it in space",
        ),
    ],
)
def test_the_tuning_file_refuses_a_bad_candidate_rule_or_entry(tmp_path, changes, message):
    if "methods" in changes:
        changes["candidates"] = None
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_tuning(write_candidate_tuning(tmp_path, **changes))


def test_the_report_prints_each_candidates_choice_and_the_winner(tmp_path):
    path = write_candidate_tuning(tmp_path)
    publish(tmp_path, {"simclr": SEED, "cand-a": [(85.8, 0.015, 0.95)] * 3, "cand-b": [(84.0, 0.01, 0.99)] * 3})
    done = run_script("report", "--config", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Bar (from simclr trial 1): heldout/linear_top1 >= 85.70, heldout/linear_ece <= 0.0170" in done.stdout
    assert "| cand-a **(winner)** | 0 |" in done.stdout and "| cand-b | 0 |" in done.stdout
    assert "Winner: cand-a. cand-a qualifies" in done.stdout
    record = json.loads((tmp_path / "published" / "selection.json").read_text())["candidates"]
    assert record["winner"] == "cand-a" and record["chosen"]["cand-b"] == {"trial": 0, "qualifies": False}
