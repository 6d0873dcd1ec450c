"""metrics.jsonl rows are strict JSON: a diverged (non-finite) value is written null and read back as nan."""

from __future__ import annotations

import json
import math

from probcl.core.metrics_file import read_rows, row_line


def _strict(constant: str):
    raise ValueError(f"{constant} is not JSON")  # what jq or a browser's JSON.parse say of NaN / Infinity


def test_non_finite_values_are_written_as_null_and_read_back_as_nan(tmp_path):
    row = {"step": 3, "train/loss": math.inf, "train/grad_norm": -math.inf, "lr": math.nan, "train/acc": 0.5}
    line = row_line(row)
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line, parse_constant=_strict) == {
        "step": 3,
        "train/loss": None,
        "train/grad_norm": None,
        "lr": None,
        "train/acc": 0.5,
    }
    path = tmp_path / "metrics.jsonl"
    path.write_text(line + '{"step": 4, "train/loss": NaN}\n{"step": 5, "train/lo')  # an old row; a torn last line
    rows = read_rows(path)
    assert [r["step"] for r in rows] == [3, 4]
    assert math.isnan(rows[0]["train/loss"]) and math.isnan(rows[1]["train/loss"]) and rows[0]["train/acc"] == 0.5
