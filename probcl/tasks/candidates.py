"""Choosing among new candidates against a seed method (issue 45's development split; the rule is the tuning
file's ``candidates``, written before any candidate trial runs).

The bar is the seed method's winner under the tuning rule (e.g. SimCLR's trial with the best held-out linear
top-1): its ``accuracy`` minus ``accuracy_margin`` and its ``calibration`` plus ``calibration_margin``. A trial
*qualifies* when it clears both. Within each candidate, the chosen trial is its qualifying trial with the highest
``metric`` (then the higher accuracy, then the lower trial number); if none qualifies, its trial with the highest
accuracy. The winner is the qualifying chosen trial with the highest ``metric``, where chosen trials within ``tie``
of the best tie and the higher accuracy wins (then the candidate listed first); if no candidate qualifies, the
candidate with the smallest accuracy shortfall below the bar (then the smallest calibration excess, then the
higher ``metric``), and the note says that none qualified. There is no winner until every trial of the seed and
of every candidate has finished.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from probcl.tasks.tuning import CandidateRule, MethodSelection, Trial

TOLERANCE = 1e-9  # a reading exactly on the bar clears it (the bar is a difference of rounded floats)


@dataclass
class Bar:
    """What a candidate's trial must clear: from the seed method's winning trial."""

    seed_trial: Trial
    accuracy: float  # the lowest accuracy that qualifies
    calibration: float  # the highest calibration error that qualifies
    seed_metric: float  # the seed winner's own metric (what a candidate should beat)


@dataclass
class Choice:
    """A candidate's chosen trial and how it stands against the bar."""

    method: str
    trial: Trial
    qualifies: bool
    accuracy_shortfall: float  # points below the bar's accuracy (0 when cleared; inf for a diverged trial)
    calibration_excess: float  # above the bar's calibration error (0 when cleared; inf for a diverged trial)
    metric: float  # the trial's metric (-inf for a diverged trial)
    accuracy: float  # the trial's accuracy (-inf for a diverged trial)


@dataclass
class Outcome:
    """Every candidate's choice and the winner (None, with an empty list of choices, until all trials finished)."""

    bar: Bar | None
    choices: list[Choice]
    winner: str | None
    note: str


def _accuracy(rule: CandidateRule, t: Trial) -> float:
    return -math.inf if t.diverged else t.mean(rule.accuracy)


def _qualifies(rule: CandidateRule, bar: Bar, t: Trial) -> bool:
    return (
        not t.diverged
        and t.mean(rule.accuracy) >= bar.accuracy - TOLERANCE
        and t.mean(rule.calibration) <= bar.calibration + TOLERANCE
    )


def _choice(rule: CandidateRule, bar: Bar, selection: MethodSelection) -> Choice:
    qualifying = [t for t in selection.trials if _qualifies(rule, bar, t)]
    if qualifying:
        trial = max(qualifying, key=lambda t: (t.mean(rule.metric), t.mean(rule.accuracy), -t.index))
    else:
        trial = max(selection.trials, key=lambda t: (_accuracy(rule, t), -t.index))
    if trial.diverged:
        return Choice(selection.method, trial, False, math.inf, math.inf, -math.inf, -math.inf)
    accuracy, calibration = trial.mean(rule.accuracy), trial.mean(rule.calibration)
    return Choice(
        selection.method,
        trial,
        bool(qualifying),
        max(0.0, bar.accuracy - accuracy),
        max(0.0, calibration - bar.calibration),
        trial.mean(rule.metric),
        accuracy,
    )


def choose(rule: CandidateRule, selections: list[MethodSelection]) -> Outcome:
    """The rule of the module docstring applied to the tuning's selections (which hold the seed and candidates)."""
    by_method = {s.method: s for s in selections}
    judged = [by_method[label] for label in (rule.seed, *rule.candidates)]
    unfinished = [s.method for s in judged if not s.complete]
    if unfinished:
        return Outcome(None, [], None, f"no winner until every trial has finished ({', '.join(unfinished)} unfinished)")
    seed = by_method[rule.seed].winner
    assert seed is not None
    if seed.diverged:
        return Outcome(None, [], None, f"no winner: every trial of the seed method {rule.seed} diverged")
    bar = Bar(
        seed,
        seed.mean(rule.accuracy) - rule.accuracy_margin,
        seed.mean(rule.calibration) + rule.calibration_margin,
        seed.mean(rule.metric),
    )
    choices = [_choice(rule, bar, by_method[label]) for label in rule.candidates]
    order = {label: i for i, label in enumerate(rule.candidates)}
    qualified = [c for c in choices if c.qualifies]
    if qualified:
        best = max(c.metric for c in qualified)
        tied = [c for c in qualified if best - c.metric <= rule.tie + TOLERANCE]
        winner = max(tied, key=lambda c: (c.accuracy, c.metric, -order[c.method]))
        note = f"{winner.method} qualifies with the highest {rule.metric} ({winner.metric:.4f})"
        if len(tied) > 1:
            others = ", ".join(c.method for c in tied if c is not winner)
            note += f", tied within {rule.tie} with {others} and the more accurate"
    else:
        winner = min(choices, key=lambda c: (c.accuracy_shortfall, c.calibration_excess, -c.metric, order[c.method]))
        note = (
            f"no candidate qualifies: {winner.method} has the smallest shortfall ({winner.accuracy_shortfall:.2f} "
            f"points of {rule.accuracy} below the bar, {rule.calibration} {winner.calibration_excess:.4f} above it)"
        )
    beats = winner.metric - bar.seed_metric
    note += f"; {rule.metric} {beats:+.4f} against {rule.seed}'s winning trial ({bar.seed_metric:.4f})"
    return Outcome(bar, choices, winner.method, note)


def outcome_markdown(rule: CandidateRule, outcome: Outcome) -> str:
    """The candidate rule, the bar, each candidate's chosen trial and the winner (markdown)."""
    lines = ["## Candidates", "", f"Rule: {rule.rule.strip()}", ""]
    if outcome.bar is None:
        return "\n".join([*lines, outcome.note.capitalize() + ".", ""])
    bar = outcome.bar
    lines += [
        f"Bar (from {rule.seed} trial {bar.seed_trial.index}): {rule.accuracy} >= {bar.accuracy:.2f}, "
        f"{rule.calibration} <= {bar.calibration:.4f}; {rule.seed}'s {rule.metric} {bar.seed_metric:.4f}.",
        "",
        f"| candidate | chosen trial | settings | {rule.accuracy} | {rule.calibration} | {rule.metric} | qualifies |",
        "| --- | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for c in outcome.choices:
        settings = ", ".join(f"{k} {v:g}" for k, v in c.trial.settings.items())
        if c.trial.diverged:
            readings = "diverged | - | -"
        else:
            readings = f"{c.accuracy:.2f} | {c.trial.mean(rule.calibration):.4f} | {c.metric:.4f}"
        mark = " **(winner)**" if c.method == outcome.winner else ""
        lines.append(
            f"| {c.method}{mark} | {c.trial.index} | {settings} | {readings} | {'yes' if c.qualifies else 'no'} |"
        )
    return "\n".join([*lines, "", f"Winner: {outcome.winner}. {outcome.note}.", ""])
