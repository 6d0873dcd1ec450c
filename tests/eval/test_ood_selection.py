"""The default-score rule applied to tiny synthetic cells of saved per-image scores: the per-image file round-trips
(float16 where it fits), the confirmation table's AUROCs are scikit-learn's, its verdicts follow the target, and
the rule picks the candidate with the most (set, cell) hits."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from probcl.errors import ConfigError
from probcl.eval.ood_scores.per_image import ID_CALIBRATION, ID_TEST, PerImageScores, load_scores, save_scores
from probcl.eval.ood_scores.selection import CANDIDATES, TARGET, is_near, judge_cell, with_own_scores

ROOT = Path(__file__).resolve().parents[2]
NEAR, FAR = "fashion-mnist:classes=8-9", "noise:gaussian"
SCORES = sorted({s for combination in CANDIDATES.values() for s in combination})
# how far each OOD set moves each score (in ID standard deviations); the rest stay at 0
SHIFTS = {NEAR: {"mahalanobis": 1.5, "knn10": 0.8, "knn50": 0.9, "rmd": 1.2}, FAR: {"input_stats": 8.0, "vim": 3.0}}


def rule_script():
    spec = importlib.util.spec_from_file_location("ood_default_rule", ROOT / "benchmarks" / "ood_default_rule.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_cell(folder: Path, seed: int) -> PerImageScores:
    g = torch.Generator().manual_seed(seed)

    def draw(n: int, shifts: dict[str, float]) -> dict[str, torch.Tensor]:
        return {s: torch.randn(n, generator=g) + shifts.get(s, 0.0) for s in SCORES}

    sets = {ID_CALIBRATION: draw(800, {}), ID_TEST: draw(800, {}), NEAR: draw(300, SHIFTS[NEAR])}
    sets[FAR] = draw(300, SHIFTS[FAR])
    scores = PerImageScores(sets, {"dataset": "fashion-mnist", "tpr": 0.95, "seed": seed, "run": folder.name})
    folder.mkdir(parents=True)
    save_scores(folder / "ood-scores.npz", scores)
    return scores


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    root = tmp_path_factory.mktemp("cells")
    develop = {f"dev-s{i}": make_cell(root / f"dev-s{i}", i) for i in range(2)}
    confirm = {f"conf-s{i}": make_cell(root / f"conf-s{i}", 10 + i) for i in range(3)}
    return root, develop, confirm


def test_per_image_scores_round_trip_compactly(tmp_path):
    near = "npz:/data/held-out.npz"  # a set name with slashes
    sets = {ID_TEST: {"knn10": torch.rand(50), "input_stats": torch.tensor([1e6, 2.0])}, near: {"knn10": torch.ones(3)}}
    scores = PerImageScores(sets, {"x": 1})
    size = save_scores(tmp_path / "ood-scores.npz", scores)
    back = load_scores(tmp_path)  # the folder holding ood-scores.npz, or the file itself
    assert size == (tmp_path / "ood-scores.npz").stat().st_size and back.meta["x"] == 1
    with np.load(tmp_path / "ood-scores.npz") as npz:
        assert npz[f"{ID_TEST}/knn10"].dtype == np.float16  # fits float16
        assert npz[f"{ID_TEST}/input_stats"].dtype == np.float32  # 1e6 does not
    torch.testing.assert_close(back.sets[ID_TEST]["knn10"], scores.sets[ID_TEST]["knn10"].double(), atol=5e-4, rtol=0)
    assert back.sets[ID_TEST]["input_stats"].tolist() == [1e6, 2.0] and back.sets[near]["knn10"].tolist() == [1.0] * 3
    with pytest.raises(ConfigError, match="saved by the ood suite"):
        load_scores(tmp_path / "missing")


def test_near_sets_are_held_out_classes_of_the_training_data():
    assert (
        is_near(NEAR, "fashion-mnist") and not is_near(FAR, "fashion-mnist") and not is_near("mnist", "fashion-mnist")
    )
    # a run on a class filter of the dataset (the study's cells: classes 0-7) holds the other classes out
    assert (
        is_near(NEAR, "fashion-mnist:classes=0-7")
        and is_near("fashion-mnist:classes=2,6", "fashion-mnist:classes=0,1,3,4,5,7,8,9")
        and not is_near(FAR, "fashion-mnist:classes=0-7")
        and not is_near("mnist:classes=0-1", "fashion-mnist:classes=0-7")
    )


def test_confirmation_table_follows_the_target_with_scikit_learn_aurocs(cells, tmp_path):
    root, develop, confirm = cells
    script = rule_script()
    folders = lambda names: [str(root / n) for n in names]  # noqa: E731
    result = script.apply_rule(folders(develop), folders(confirm), None)
    json.dumps(result)  # plain JSON
    table = result["confirmation"]["cells"]
    assert set(table) == set(confirm)
    met_counts: dict[str, int] = {}
    for cell, verdict in table.items():
        id_test = confirm[cell].sets[ID_TEST]
        for name, row in verdict["sets"].items():
            ood = confirm[cell].sets[name]
            labels = np.r_[np.zeros(len(id_test["mahalanobis"])), np.ones(len(ood["mahalanobis"]))]
            sk = {s: roc_auc_score(labels, np.r_[id_test[s].numpy(), ood[s].numpy()]) for s in SCORES}
            best = max(sk, key=sk.__getitem__)
            # the file's float16 values can tie where float32 did not: AUROC to float16's resolution
            assert row["best_single"] == best and row["best_auroc"] == pytest.approx(sk[best], abs=2e-3)
            assert row["mahalanobis"] == pytest.approx(sk["mahalanobis"], abs=2e-3)
            floor = max(row["best_auroc"] - TARGET.margin, row["mahalanobis"] if row["near"] else TARGET.far_auroc)
            assert row["met"] == (row["auroc"] >= floor) and row["near"] == (name == NEAR)
            assert row["shortfall"] == pytest.approx(max(0.0, floor - row["auroc"]))
            met_counts[name] = met_counts.get(name, 0) + int(row["met"])
        assert verdict["acceptance_met"] == (abs(verdict["acceptance"] - 0.95) <= TARGET.acceptance_tolerance)
        assert abs(verdict["acceptance"] - 0.95) < 0.04  # split-conformal on 400 threshold images, 800 held out
    summary = result["confirmation"]["summary"]
    assert {n: e["met"] for n, e in summary["sets"].items()} == met_counts
    # the rule's choice: of the candidates meeting the target on development, the most hits; if none does, the
    # smallest worst shortfall
    ranking = {r["candidate"]: r["summary"] for r in result["development"]["ranking"]}
    assert set(ranking) == set(CANDIDATES)
    hits = {c: sum(e["met"] for e in s["sets"].values()) + s["acceptance"]["met"] for c, s in ranking.items()}
    worst = {c: max(e["worst_shortfall"] for e in s["sets"].values()) for c, s in ranking.items()}
    meeting = [c for c, s in ranking.items() if s["met"]]
    if meeting:
        assert hits[result["candidate"]] == max(hits[c] for c in meeting) and result["candidate"] in meeting
    else:
        assert worst[result["candidate"]] == min(worst.values())

    markdown = script.markdown(result)
    assert markdown.count("| conf-s") == 3 * 3  # two OOD sets and the acceptance row per cell
    assert all(f"| {candidate} |" in markdown for candidate in CANDIDATES)  # the development ranking
    with pytest.raises(ConfigError, match="unknown candidate"):
        script.apply_rule([], folders(confirm), "nope")


def test_without_confirmation_cells_the_script_reports_the_choice_alone(cells):
    root, develop, _ = cells
    script = rule_script()
    folders = [str(root / n) for n in develop]
    alone = script.apply_rule(folders, [], None)
    assert "confirmation" not in alone
    assert alone["candidate"] == script.apply_rule(folders, folders, None)["candidate"]  # the same choice
    markdown = script.markdown(alone)
    assert f"Chosen on the development cells: **{alone['candidate']}**" in markdown
    assert "no confirmation cell judged yet" in markdown and "| cell | OOD set |" not in markdown


def test_a_methods_own_uncertainty_joins_every_candidate_as_it_joins_the_default(tmp_path):
    """TaU's temperature separates the near set perfectly here and Mahalanobis barely: judged with the temperature
    (as the default combination decides on TaU's runs), the one-score candidate becomes a combination that
    reaches the separation; a score the default does not take (knn50) does not join."""
    g = torch.Generator().manual_seed(3)
    own = "uncertainty:neg_u"
    names = ["mahalanobis", "knn50", own]

    def draw(n: int, shift: dict[str, float]) -> dict[str, torch.Tensor]:
        return {s: torch.randn(n, generator=g) + shift.get(s, 0.0) for s in names}

    sets = {ID_CALIBRATION: draw(800, {}), ID_TEST: draw(800, {}), NEAR: draw(300, {"mahalanobis": 0.3, own: 8.0})}
    scores = PerImageScores(sets, {"dataset": "fashion-mnist:classes=0-7", "tpr": 0.95, "seed": 0, "run": "tau"})
    assert with_own_scores(("mahalanobis",), names) == ("mahalanobis", own)
    row = judge_cell("tau-s0", scores, CANDIDATES["mahalanobis"]).sets[NEAR]
    labels = np.r_[np.zeros(800), np.ones(300)]
    alone = roc_auc_score(labels, np.r_[sets[ID_TEST]["mahalanobis"].numpy(), sets[NEAR]["mahalanobis"].numpy()])
    assert row["near"] and row["mahalanobis"] == pytest.approx(alone, abs=2e-3) and alone < 0.7
    assert row["auroc"] > 0.99  # the combined score, with the temperature


def test_the_written_rule_names_the_candidates_and_target_the_code_applies():
    import re

    page = (ROOT / "docs" / "ood-default-rule.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| (`.*?) \|$", page, re.M)
    written = {name: tuple(re.findall(r"`([^`]+)`", scores)) for name, scores in rows}
    assert written == CANDIDATES
    for phrase in ("- 0.005", ">= 0.99", "within 1 point of the promised 95 %", ">= 90 % of the cells"):
        assert phrase in page
    assert (TARGET.margin, TARGET.far_auroc, TARGET.acceptance_tolerance, TARGET.share) == (0.005, 0.99, 0.01, 0.9)


def test_cells_of_two_studies_with_one_name_are_judged_apart(tmp_path):
    """simclr-s1 of the main grid and of the second split are two confirmation cells, not one (a dict keyed by the
    folder's name once kept only the last)."""
    script = rule_script()
    folders = [tmp_path / study / "cells" / "simclr-s1" for study in ("study-a", "study-b")]
    for seed, folder in enumerate(folders):
        make_cell(folder, seed)
    assert script.cell_labels([str(f) for f in folders]) == ["study-a/simclr-s1", "study-b/simclr-s1"]
    result = script.apply_rule([], [str(f) for f in folders], "mahalanobis")
    assert sorted(result["confirmation"]["cells"]) == ["study-a/simclr-s1", "study-b/simclr-s1"]
    with pytest.raises(ConfigError, match="named twice"):
        script.cell_labels([str(folders[0]), str(folders[0])])


def test_the_default_combination_is_the_candidate_the_rule_chose_on_the_development_cells():
    """`probcl score`'s and the ood suite's default decides as the published development choice says
    (docs/results/ood-default/development.json), with the method's own scores joining it."""
    from probcl.eval.ood_scores import SCORES as REGISTRY

    chosen = json.loads((ROOT / "docs" / "results" / "ood-default" / "development.json").read_text())["candidate"]
    every = [e.name for e in REGISTRY.entries()]
    default = REGISTRY.default_combination(every)
    own = [name for name in default if REGISTRY.get(name).kind == "own uncertainty"]
    assert sorted(set(default) - set(own)) == sorted(CANDIDATES[chosen])
    assert with_own_scores(CANDIDATES[chosen], every) == tuple([*CANDIDATES[chosen], *own])


def test_side_by_side_counts_cells_at_or_above_mahalanobis_and_averages_by_hand():
    script = rule_script()

    def result(name, aurocs):
        cells = {
            f"c{i}": {"sets": {NEAR: {"auroc": a, "mahalanobis": 0.8, "near": True}}} for i, a in enumerate(aurocs)
        }
        summary = {"sets": {NEAR: {"cells": 2, "met": 1, "worst_shortfall": 0.1, "near": True}}}
        summary["acceptance"] = {"met": 2, "cells": 2}
        return {"candidate": name, "confirmation": {"cells": cells, "summary": summary}}

    table = script.side_by_side([result("a", [0.9, 0.7]), result("b", [0.8, 0.6])])
    assert "1 / 2 (0.100); 0.800; >= Mahalanobis in 1" in table  # 0.9 >= 0.8, 0.7 < 0.8
    assert "1 / 2 (0.100); 0.700; >= Mahalanobis in 1" in table  # 0.8 >= 0.8 (ties count)
    assert table.splitlines()[2].endswith("| 0.800 |")  # Mahalanobis alone
    with pytest.raises(ConfigError, match="same cells"):
        script.side_by_side([result("a", [0.9, 0.7]), result("b", [0.8])])


def test_default_decision_metrics_judge_the_default_and_nothing_when_its_knn_was_not_saved(cells):
    from probcl.eval.ood_scores.selection import default_decision_metrics

    _, develop, _ = cells
    scores = develop["dev-s0"]
    metrics = default_decision_metrics(scores)
    verdict = judge_cell("dev-s0", scores, CANDIDATES["knn1_raw+mahalanobis+guards"])
    assert metrics[f"sets.{NEAR}.default.auroc"] == verdict.sets[NEAR]["auroc"]
    assert metrics[f"sets.{FAR}.default.auroc"] == verdict.sets[FAR]["auroc"]
    assert metrics["default.id_accepted"] == verdict.acceptance
    older = PerImageScores(
        {name: {s: v for s, v in values.items() if s != "knn1_raw"} for name, values in scores.sets.items()},
        scores.meta,
    )
    assert default_decision_metrics(older) == {}
