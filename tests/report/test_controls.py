"""Controls: the paired difference and its seed-noise band against hand-computed values (numpy), the
readings, the config checks, and the generated tables."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import stats

from probcl.config import ConfigError
from probcl.report.benchmark_report import study_summary_markdown
from probcl.report.controls import read_controls

GRID = {"base": [80.0, 81.0, 83.0], "ctl": [84.0], "two": [79.0, 82.5], "single": [70.0]}


def results_of(values: dict[str, list[float]], controls: dict) -> dict:
    """A results.json-shaped dict: one metric ``m`` per cell, seeds 0.., groups with numpy's mean/std."""
    cells = [
        {"name": f"{g}-s{s}", "group": g, "seed": s, "error": None, "metrics": {"m": v}}
        for g, vs in values.items()
        for s, v in enumerate(vs)
    ]
    groups = {
        g: {
            "cells": [f"{g}-s{s}" for s in range(len(vs))],
            "metrics": {
                "m": {
                    "mean": float(np.mean(vs)),
                    "n": len(vs),
                    "std": float(np.std(vs, ddof=1)) if len(vs) > 1 else None,
                }
            },
        }
        for g, vs in values.items()
    }
    config = {"controls": controls, "headline": {"my metric": "m"}, "claims": []}
    return {"title": "t", "cells": cells, "groups": groups, "config": config}


def test_one_seed_control_difference_and_band_against_a_hand_computed_case():
    results = results_of(GRID, {"ctl": {"against": ["base"], "asks": "q", "metrics": ["m"]}})
    [r] = read_controls(results)
    assert r.seeds == [0] and r.difference == pytest.approx(84.0 - 80.0)
    s = np.std([80.0, 81.0, 83.0], ddof=1)  # 1.5275
    assert r.band == pytest.approx(2 * math.sqrt(2) * s)  # 4.32 > 4: within noise
    assert r.reading == "within seed noise"


def test_paired_seeds_get_the_t_interval_of_their_differences():
    results = results_of(GRID, {"two": {"against": ["base"], "asks": "q", "metrics": ["m"]}})
    [r] = read_controls(results)
    diffs = [79 - 80, 82.5 - 81]
    assert r.seeds == [0, 1] and r.difference == pytest.approx(np.mean(diffs))
    reference = stats.t.interval(0.95, 1, loc=np.mean(diffs), scale=stats.sem(diffs))
    assert r.interval == pytest.approx(reference) and r.band is None
    assert r.reading == "includes 0" and r.spread.startswith("[")


def test_readings_beyond_noise_missing_and_without_a_noise_scale():
    values = {**GRID, "far": [90.0], "flat": [0.0, 0.0, 0.0]}
    controls = {
        "far": {"against": ["base", "single", "flat", "absent"], "asks": "q", "metrics": ["m"]},
    }
    readings = read_controls(results_of(values, controls))
    assert [r.reading for r in readings] == [
        "beyond seed noise",  # +10 vs a band of 4.32
        "no noise scale (the compared method has one seed, or its seeds agree exactly)",
        "no noise scale (the compared method has one seed, or its seeds agree exactly)",
        "missing",  # the compared cells have not run
    ]


def test_summary_block_shows_the_controls_table_with_headline_names():
    results = results_of(GRID, {"ctl": {"against": ["base"], "asks": "does it help?", "metrics": ["m"]}})
    text = study_summary_markdown(results)
    row = next(line for line in text.splitlines() if line.startswith("| `ctl`"))
    assert "does it help?" in row and "| base | my metric | 0 | +4 | ±4.32 | within seed noise |" in row
    results["config"]["controls"]["ctl"]["metrics"] = {"own title": "m"}  # a control may name its metrics
    assert "| base | own title | 0 | +4 |" in study_summary_markdown(results)


@pytest.mark.parametrize(
    "controls, message",
    [
        ({"nope": {"against": ["simclr"], "asks": "q"}}, "controls.nope is not one of the methods"),
        ({"ctl": {"against": ["missing"], "asks": "q"}}, "controls.ctl.against must name other methods"),
        ({"ctl": {"against": ["ctl"], "asks": "q"}}, "controls.ctl.against must name other methods"),
        (
            {"ctl": {"against": ["simclr"], "asks": "q", "colour": 1}},
            "unknown config key(s) benchmark.controls.ctl.colour",
        ),
        ({"ctl": {"against": ["simclr"]}}, "missing config key(s) benchmark.controls.ctl.asks"),
    ],
)
def test_bad_controls_fail_with_one_clear_error(tmp_path, controls, message):
    import yaml

    from probcl.tasks.benchmark.grid import load_benchmark

    path = tmp_path / "bench.yaml"
    spec = {"methods": {"simclr": "fashion-mnist/simclr", "ctl": "fashion-mnist/simclr"}, "controls": controls}
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_benchmark(path)
