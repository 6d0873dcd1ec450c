"""The README's study block is generated from the published results (never edited by hand), and the verdict
table names the comparison that decides each claim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from probcl.core.io import read_json
from probcl.report.benchmark_report import verdict_table
from probcl.report.claim_stats import ClaimResult, judge
from probcl.report.document import Document
from scripts.readme_study import BEGIN, END
from tests.report.test_claims import study_claims

ROOT = Path(__file__).resolve().parents[2]


def test_readme_and_docs_study_blocks_match_the_published_results():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the checkout under test, whatever an editable install points at
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_study.py"), "--check"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_readme_short_view_keeps_the_full_tables_rows():
    """The README's short table is the docs' full table restricted to its methods and columns: every cell of it
    appears, under the same method and column title, in the study page's table."""

    def table(text: str) -> dict[tuple[str, str], str]:
        block = text.split(BEGIN)[1].split(END)[0].strip().split("\n\n")[0].splitlines()
        header = [h.strip() for h in block[0].strip("|").split("|")]
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in block[2:]]
        return {(row[0], title): cell for row in rows for title, cell in zip(header, row)}

    short, full = table((ROOT / "README.md").read_text()), table((ROOT / "docs" / "study.md").read_text())
    assert len(short) >= 11 * 5 and all(full[key] == cell for key, cell in short.items())


def test_verdict_table_shows_the_weakest_comparison_and_its_reason():
    claim = study_claims()["vem-accuracy"]  # VEM-Langevin - SimCLR, then VEM-SVGD - SimCLR, linear top-1
    by_seed = {
        s: {
            "simclr": {"linear/top1": 80.0 + s / 100},
            "vem-langevin": {"linear/top1": 81.0 + s / 10},
            "vem-svgd": {"linear/top1": v},
        }
        for s, v in enumerate([78.0, 77.5, 78.4])
    }
    result = ClaimResult("vem-accuracy", claim, [judge(c, by_seed) for c in claim.comparisons])
    assert [c.verdict for c in result.comparisons] == ["reproduced", "contradicted"]
    assert result.verdict == "contradicted"
    doc = Document("t")
    verdict_table(doc, [result])
    row = doc.to_markdown(Path("."), title=False).splitlines()[2]
    # VEM-SVGD - SimCLR: -2, -2.51, -1.62 -> mean -2.04; a hand-checked sign and the reason's wording
    assert "**contradicted**" in row and "VEM-SVGD - SimCLR, linear top-1: -2.04 points, paired [" in row
    assert "both lie below 0" in row


FIXTURES = ROOT / "tests" / "report" / "fixtures" / "budgets"


def _study(path: Path, publish: Path, **extra) -> Path:
    """A two-method study config (the fixtures' claims) published to ``publish``."""
    import yaml

    tree = {
        "methods": {"simclr": "fashion-mnist/simclr", "ebclr": "fashion-mnist/ebclr"},
        "seeds": [0, 1, 2],
        "publish": str(publish),
        "claims": read_json(FIXTURES / "short" / "results.json")["config"]["claims"],
        **extra,
    }
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def test_the_script_shows_every_budget_from_hand_made_results(tmp_path):
    """Short and long budgets from the fixtures (test_budgets.py computes their intervals by hand), a third budget
    with no results.json: the README block is the headline of --results, then the verdicts at every budget (no
    single-budget verdict table: --results are the short budget's)."""
    longer = tmp_path / "docs" / "results" / "longer"
    budgets = {"936 steps": str(tmp_path / "short.yaml"), "4,680 steps": str(tmp_path / "long.yaml"),
               "9,360 steps": str(tmp_path / "longer.yaml")}  # fmt: skip
    _study(tmp_path / "short.yaml", FIXTURES / "short", budgets=budgets)
    _study(tmp_path / "long.yaml", FIXTURES / "long", extends="short.yaml", overrides={"train.epochs": 30})
    _study(tmp_path / "longer.yaml", longer, extends="short.yaml", overrides={"train.epochs": 60})
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "study.md").write_text(f"# study\n\n{BEGIN}\n{END}\n")
    (tmp_path / "README.md").write_text(f"# probcl\n\nintro\n\n{BEGIN}\nold\n{END}\n\nrest\n")
    script = [sys.executable, str(ROOT / "scripts" / "readme_study.py"), "--root", str(tmp_path)]
    script += ["--results", str(FIXTURES / "short" / "results.json"), "--study", str(tmp_path / "short.yaml")]
    script += ["--methods", "simclr,ebclr", "--columns", "linear top-1 %,kNN top-1 %", "--split", "none"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(script, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    expected = f"""# probcl

intro

{BEGIN}
| method | seeds | linear top-1 % | kNN top-1 % |
|---|---:|---:|---:|
| simclr | 3 | 80.00 ± 0.00 | 70.00 ± 0.00 |
| ebclr | 3 | 82.00 ± 1.00 | 67.00 ± 1.00 |

The same claims at each budget (936 steps: {FIXTURES / "short"} (6 of 6 cells); 4,680 steps: {FIXTURES / "long"} \
(6 of 6 cells); 9,360 steps: {longer} (not run yet: 0 of 6 cells)), each judged on that budget's own cells. Each \
comparison shows its paired and its Welch (unpaired) interval; it is reproduced or contradicted only when both agree, \
and the intervals of the comparisons that decide a claim are Holm-corrected for their number (the level and the \
number are shown when above one). The claim is then compared across budgets on one comparison, the one deciding it \
at the last budget with a verdict: *moved with budget* compares that comparison's verdicts, once each rests on two \
or more seeds; a budget still running gives a verdict from the seeds it has, marked *provisional* while one of the \
claim's comparisons rests on fewer seeds than the config plans, compares a seed whose arms have not all run, or \
has no data yet.

| claim | verdict at 936 steps (6 of 6 cells) | verdict at 4,680 steps (6 of 6 cells) | verdict at 9,360 steps \
(not run yet: 0 of 6 cells) | compared at every budget: the comparison deciding the claim at the last budget with a \
verdict | at 936 steps: mean difference, paired and Welch intervals: its verdict | at 4,680 steps: mean difference, \
paired and Welch intervals: its verdict | at 9,360 steps: mean difference, paired and Welch intervals: its verdict \
| this comparison moved with budget |
|---|---:|---:|---:|---:|---:|---:|---:|---:|
| EBCLR: Higher linear accuracy than SimCLR. | **inconclusive at this budget** | **reproduced** | not run yet | \
EBCLR - SimCLR, linear top-1 | +2 points, paired [-0.484, +4.48], Welch [-0.484, +4.48]; the comparator is one \
number in every seed (80): inconclusive at this budget | +4 points, paired [+1.52, +6.48], Welch [+1.52, +6.48]; the \
comparator is one number in every seed (85): reproduced | — | yes: inconclusive at this budget → reproduced |
| EBCLR: Higher kNN accuracy than SimCLR. | **contradicted** | **contradicted** | not run yet | EBCLR - SimCLR, kNN \
top-1 | -3 points, paired [-5.48, -0.516], Welch [-5.48, -0.516]; the comparator is one number in every seed (70): \
contradicted | -5 points, paired [-7.48, -2.52], Welch [-7.48, -2.52]; the comparator is one number in every seed \
(75): contradicted | — | no |
{END}

rest
"""
    assert (tmp_path / "README.md").read_text() == expected
    done = subprocess.run([*script, "--check"], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "match" in done.stdout


def test_budgets_are_read_from_each_config_and_the_reported_results_stand_for_their_own(tmp_path):
    from probcl.tasks.benchmark.budgets import load_budgets
    from probcl.tasks.benchmark.grid import load_benchmark

    budgets = {"short": str(tmp_path / "short.yaml"), "later": str(tmp_path / "later.yaml")}
    short = _study(tmp_path / "short.yaml", FIXTURES / "short", budgets=budgets)
    _study(tmp_path / "later.yaml", tmp_path / "nowhere", extends="short.yaml", methods={"byol": "fashion-mnist/byol"})
    current = {**read_json(FIXTURES / "short" / "results.json"), "cells": []}
    mine, later = load_budgets(load_benchmark(short)[0], current=current)
    assert mine.results is current and (mine.planned, mine.groups) == (6, frozenset({"simclr", "ebclr"}))
    assert later.results is None and later.planned == 9 and later.status == "not run yet: 0 of 9 cells"
    assert later.source == str(tmp_path / "nowhere") and set(later.claims) == {"ebclr-linear", "ebclr-knn"}
