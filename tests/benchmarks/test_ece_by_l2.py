"""benchmarks/ece_by_l2.py: cells grouped by the probe's selected L2, checked on hand-made eval.json files."""

import json

import pytest

from benchmarks.ece_by_l2 import by_l2, main


def _cell(root, name, l2, ece, held_out, scaled=None, top1=87.0):
    folder = root / "cells" / name
    folder.mkdir(parents=True)
    calibration = {"ece": ece}
    if scaled is not None:
        calibration["temperature_scaling"] = {"after": {"ece": scaled}}
    linear = {"top1": top1, "protocol": {"l2": l2, "validation_top1": held_out}}
    (folder / "eval.json").write_text(json.dumps({"linear": linear, "calibration": calibration}))


def test_groups_leads_and_within_method_rows(tmp_path):
    _cell(tmp_path, "simclr-s0", 1e-3, 0.01, {"0.001": 88.0, "0.0001": 87.7}, scaled=0.012)
    _cell(tmp_path, "simclr-s1", 1e-4, 0.03, {"0.001": 87.5, "0.0001": 87.6}, scaled=0.011, top1=86.0)
    _cell(tmp_path, "moco-s0", 1e-3, 0.02, {"0.001": 85.0, "0.0001": 84.0})
    (tmp_path / "cells" / "byol-s0").mkdir()  # no eval.json: not counted
    summary = by_l2(tmp_path)
    strong, weak = summary["groups"]["0.001"], summary["groups"]["0.0001"]
    assert strong["cells"] == 2 and strong["ece_median"] == pytest.approx(0.015)
    assert (strong["ece_min"], strong["ece_max"]) == (0.01, 0.02)
    assert strong["ece_scaled_median"] == pytest.approx(0.012)  # the one cell with a scaled ECE
    assert strong["lead_median"] == pytest.approx((0.3 + 1.0) / 2)
    assert weak["lead_median"] == pytest.approx(0.1) and weak["top1_median"] == 86.0
    assert summary["methods"] == {"simclr": {"0.0001": [0.03], "0.001": [0.01]}}  # moco: one L2 only


def test_writes_both_files_and_refuses_a_folder_without_results(tmp_path, capsys):
    _cell(tmp_path, "simclr-s0", 1e-3, 0.01, {"0.001": 88.0, "0.0001": 87.7})
    assert main([str(tmp_path)]) == 0
    assert "| 0.001 | 1 | 0.0100 (0.0100-0.0100) | — | 87.00 | 0.30 |" in (tmp_path / "ece-by-l2.md").read_text()
    assert json.loads((tmp_path / "ece-by-l2.json").read_text())["cells"]["simclr-s0"]["l2"] == 1e-3
    (tmp_path / "empty" / "cells").mkdir(parents=True)
    with pytest.raises(SystemExit):
        main([str(tmp_path / "empty")])
