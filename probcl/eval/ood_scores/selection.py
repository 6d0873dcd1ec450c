"""The rule that chooses the default deciding OOD score, applied to saved per-image scores
(:mod:`probcl.eval.ood_scores.per_image`); written down in ``docs/ood-default-rule.md`` before any confirmation
cell exists.

A candidate is a combination of registered scores (one score: its own tail probability decides). On one cell it
is calibrated exactly as the ``ood`` suite calibrates (:class:`~probcl.eval.ood_scores.calibration.Calibration`
on the ID calibration half, the cell's seed and TPR) and judged on the held-out ID half and each OOD set against
:data:`TARGET`: per OOD set, AUROC >= the best single registered score's - ``margin``, on near-OOD sets also >=
Mahalanobis's, on far-OOD sets >= ``far_auroc``; per cell, ID acceptance within ``acceptance_tolerance`` of the
promised TPR. The target is met when each of those holds in >= ``share`` of the cells. The method's own uncertainty
scores that the default combination takes (TaU's temperature, C-SimCLR's vMF density, EBCLR's image energy) join
every candidate on the cells that saved them, as they join the default (:func:`with_own_scores`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import torch

from probcl.errors import ConfigError
from probcl.eval.ood import auroc
from probcl.eval.ood_scores.calibration import COMBINED, Calibration
from probcl.eval.ood_scores.per_image import ID_CALIBRATION, ID_TEST, PerImageScores
from probcl.eval.ood_scores.registry import SCORES, combination_knn


@dataclass(frozen=True)
class Target:
    """What the default must achieve (issue 42)."""

    margin: float = 0.005  # AUROC below the best single score's allowed
    far_auroc: float = 0.99  # AUROC every far-OOD set keeps
    acceptance_tolerance: float = 0.01  # |ID acceptance - TPR| on the held-out ID half
    share: float = 0.90  # of the cells in which each condition must hold


TARGET = Target()
MAHALANOBIS = "mahalanobis"  # the near-OOD reference detector (Lee et al. 2018)
GUARDS = ("feature_norm", "input_stats")
# The candidates, fixed before any development cell was seen; the first was probcl's default until the rule chose
# knn1_raw+mahalanobis+guards (the default since 2026-11-28).
CANDIDATES: dict[str, tuple[str, ...]] = {
    "current": ("knn10", "feature_norm", "mahalanobis", "input_stats"),
    "mahalanobis": (MAHALANOBIS,),
    "mahalanobis+guards": (MAHALANOBIS, *GUARDS),
    "knn50+mahalanobis+guards": ("knn50", MAHALANOBIS, *GUARDS),
    "rmd+guards": ("rmd", *GUARDS),
    "vim+guards": ("vim", *GUARDS),
    "knn1_raw+mahalanobis+guards": ("knn1_raw", MAHALANOBIS, *GUARDS),
}


def with_own_scores(combination: Sequence[str], saved: Collection[str]) -> tuple[str, ...]:
    """``combination`` and the method's own uncertainty scores among ``saved`` that the default takes (kind "own
    uncertainty", ``in_default``): a candidate is judged as the default would decide on that method's runs."""
    own = [name for name in saved if SCORES.get(name).kind == "own uncertainty" and SCORES.get(name).in_default]
    return tuple(dict.fromkeys([*combination, *own]))


def is_near(set_name: str, train_dataset: str) -> bool:
    """Held-out classes of the training dataset (``fashion-mnist:classes=8-9`` for a run on ``fashion-mnist`` or on
    ``fashion-mnist:classes=0-7``): near OOD; everything else far."""
    return set_name.split(":", 1)[0] == train_dataset.split(":", 1)[0] and ":classes=" in set_name


@dataclass
class CellVerdict:
    """One candidate on one cell: per OOD set (candidate, best single, Mahalanobis AUROC, near, met, shortfall: how
    far below the AUROC it had to reach) and the ID acceptance."""

    cell: str
    sets: dict[str, dict]
    acceptance: float
    acceptance_met: bool


def decision_aurocs(
    scores: PerImageScores, combination: Sequence[str], cell: str = "cell"
) -> tuple[dict[str, float], float]:
    """``combination`` (with the method's own scores: :func:`with_own_scores`) calibrated on the cell's ID
    calibration half as the ``ood`` suite calibrates: its AUROC on each OOD set against the held-out ID half, and
    the share of held-out ID images it accepts. One score ranks images by its own value (its -log p is a step
    function of it, whose ties its flags never see); a combination by its combined score."""
    missing = [s for s in combination if s not in scores.sets[ID_CALIBRATION]]
    if missing:
        raise ConfigError(f"{cell}: no saved scores for {', '.join(missing)}")
    meta = scores.meta
    names = list(scores.sets[ID_CALIBRATION])
    combination = with_own_scores(combination, names)
    calibration = Calibration.fit(scores.sets[ID_CALIBRATION], names, combination, meta["tpr"], meta["seed"])
    decide = COMBINED if len(combination) > 1 else combination[0]

    def ranked(set_name: str) -> torch.Tensor:
        if decide != COMBINED:
            return scores.sets[set_name][decide]
        return calibration.decision(scores.sets[set_name], decide)["ood_score"]

    id_decision = calibration.decision(scores.sets[ID_TEST], decide)["ood_score"]
    accepted = float((id_decision <= calibration.thresholds[decide]).double().mean())
    id_ranked = ranked(ID_TEST)
    return {name: auroc(id_ranked, ranked(name)) for name in scores.ood_sets}, accepted


def default_decision_metrics(scores: PerImageScores) -> dict[str, float]:
    """What today's default decision (:meth:`ScoreRegistry.default_combination`) achieves on a cell's saved
    per-image scores: ``sets.NAME.default.auroc`` per OOD set and ``default.id_accepted``, recomputed with this
    code whatever the default was when the cell was evaluated (its ``combined`` entries keep that one). Nothing
    when the cell did not save the default's kNN distance (its scores predate it): no stand-in is judged."""
    names = list(scores.sets[ID_CALIBRATION])
    if combination_knn() not in names:
        return {}
    combination = SCORES.default_combination(names)
    values, accepted = decision_aurocs(scores, combination)
    return {**{f"sets.{name}.default.auroc": v for name, v in values.items()}, "default.id_accepted": accepted}


def judge_cell(
    cell: str,
    scores: PerImageScores,
    combination: Sequence[str],
    target: Target = TARGET,
    near: Collection[str] = (),
) -> CellVerdict:
    """Calibrate ``combination`` (with the method's own scores: :func:`with_own_scores`) on the cell's ID
    calibration half and judge it on the rest (module docstring); ``near`` names near-OOD sets besides the held-out
    classes of the training dataset."""
    meta = scores.meta
    names = list(scores.sets[ID_CALIBRATION])
    values, accepted = decision_aurocs(scores, combination, cell)
    sets = {}
    for name in scores.ood_sets:
        singles = {s: auroc(scores.sets[ID_TEST][s], scores.sets[name][s]) for s in names}
        best = max(singles, key=singles.__getitem__)
        value = values[name]
        near_set = name in near or is_near(name, meta["dataset"])
        maha = singles.get(MAHALANOBIS)
        floors = [singles[best] - target.margin]  # AUROCs the candidate must reach on this set
        floors.append((maha if maha is not None else 0.0) if near_set else target.far_auroc)
        shortfall = max(0.0, *(floor - value for floor in floors))
        sets[name] = {"auroc": value, "best_single": best, "best_auroc": singles[best], "mahalanobis": maha}
        sets[name].update({"near": near_set, "met": shortfall == 0.0, "shortfall": shortfall})
    within = abs(accepted - meta["tpr"]) <= target.acceptance_tolerance
    return CellVerdict(cell, sets, accepted, within)


def summarise(verdicts: Sequence[CellVerdict], target: Target = TARGET) -> dict:
    """Per OOD set: cells meeting the target, the share, the worst shortfall; ID acceptance likewise; ``met``."""
    per_set: dict[str, dict] = {}
    for verdict in verdicts:
        for name, row in verdict.sets.items():
            entry = per_set.setdefault(name, {"cells": 0, "met": 0, "worst_shortfall": 0.0, "near": row["near"]})
            entry["cells"] += 1
            entry["met"] += int(row["met"])
            entry["worst_shortfall"] = max(entry["worst_shortfall"], row["shortfall"])
    for entry in per_set.values():
        entry["share"] = entry["met"] / entry["cells"]
    accepted = sum(v.acceptance_met for v in verdicts)
    acceptance = {"cells": len(verdicts), "met": accepted, "share": accepted / max(1, len(verdicts))}
    met = all(e["share"] >= target.share for e in per_set.values()) and acceptance["share"] >= target.share
    return {"sets": per_set, "acceptance": acceptance, "met": met}


def choose(
    development: Mapping[str, PerImageScores],
    candidates: Mapping[str, Sequence[str]] = CANDIDATES,
    near: Collection[str] = (),
) -> dict:
    """The rule (``docs/ood-default-rule.md``), on the development cells: among the candidates that meet the
    target, the one meeting it on the most (set, cell) pairs and acceptance cells (ties: the smaller worst
    shortfall); when none meets it, the one with the smallest worst shortfall (ties: the most hits). Further ties:
    the fewer scores, then the order of :data:`CANDIDATES`. Candidates whose scores a cell lacks are left out."""
    ranked = []
    for order, (name, combination) in enumerate(candidates.items()):
        if any(s not in cell.sets[ID_CALIBRATION] for cell in development.values() for s in combination):
            continue
        verdicts = [judge_cell(cell, scores, combination, near=near) for cell, scores in development.items()]
        summary = summarise(verdicts)
        hits = sum(e["met"] for e in summary["sets"].values()) + summary["acceptance"]["met"]
        worst = max((e["worst_shortfall"] for e in summary["sets"].values()), default=0.0)
        primary = (-hits, worst) if summary["met"] else (worst, -hits)
        ranked.append(((not summary["met"], *primary, len(combination), order), name, summary))
    if not ranked:
        raise ConfigError("no candidate's scores are saved in every development cell")
    ranked.sort(key=lambda r: r[0])
    return {"chosen": ranked[0][1], "ranking": [{"candidate": n, "summary": s} for _, n, s in ranked]}
