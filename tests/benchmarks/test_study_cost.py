"""benchmarks/study_cost.py: CPU-hours per group from the cells' own records, checked on hand-computed cells."""

import json

import pytest

from benchmarks.study_cost import COSTS_MARKERS, cost_of, group_of, main


def _cell(root, name, seconds, eval_seconds=(), threads=1, gpu=None, started=0, per_epoch=None, epochs=6):
    folder = root / "cells" / name
    folder.mkdir(parents=True)
    record = {
        "seconds": seconds,
        "epochs": epochs,
        "started_at_epoch": started,
        "seconds_per_epoch": per_epoch,
        "provenance": {"cpu": "AMD EPYC", "torch_threads": threads, "gpu": gpu},
    }
    (folder / "cell.json").write_text(json.dumps(record))
    if eval_seconds:
        suites = {f"suite{i}": {"protocol": {"seconds": s}} for i, s in enumerate(eval_seconds)}
        (folder / "eval.json").write_text(json.dumps(suites))


def test_groups_drop_the_seed_and_the_trial():
    assert group_of("simclr-b16-authors-s3") == "simclr-b16-authors"
    assert group_of("byol-t4-s0") == group_of("byol-preset-s0") == group_of("byol-s5") == "byol"


def test_hours_by_hand(tmp_path):
    _cell(tmp_path, "simclr-s0", 3600, (1800, 1800))  # fresh: 1 h training, 1 h evaluation
    _cell(tmp_path, "simclr-s1", 100, threads=2, started=3, per_epoch=600)  # resumed: 600 s x 6 epochs x 2 threads
    _cell(tmp_path, "simclr-s2", 0, started=6)  # resumed with nothing left: the group's median rate (600 s) x 6
    _cell(tmp_path, "moco-s0", 120, (60,), gpu="NVIDIA H200")  # on a GPU: 3 cell-minutes, no CPU-hours
    _cell(tmp_path, "ebclr-s0", 1200, started=4)  # resumed, no rate recorded: 1200 s over its 2 epochs, x 6 = 1 h
    cost = cost_of(tmp_path)
    simclr, moco, ebclr = cost["groups"]["simclr"], cost["groups"]["moco"], cost["groups"]["ebclr"]
    assert simclr["cpu_cells"] == 3 and simclr["gpu_cells"] == 0 and simclr["estimated"] == 2  # both resumed
    assert simclr["cpu_hours_train"] == pytest.approx(1 + 2 * 1 + 1)
    assert simclr["cpu_hours_eval"] == pytest.approx(1)
    assert (moco["gpu_cells"], moco["cpu_hours_train"], moco["gpu_minutes"]) == (1, 0, pytest.approx(3))
    assert (ebclr["cpu_hours_train"], ebclr["estimated"]) == (pytest.approx(1), 1)
    assert cost["total"]["cpu_hours_train"] == pytest.approx(5)


def test_writes_json_and_markdown_and_refuses_a_folder_without_cells(tmp_path, capsys):
    _cell(tmp_path / "study", "simclr-s0", 3600, (3600,))
    out = tmp_path / "cost.json"
    assert main([str(tmp_path / "study"), "--out", str(out)]) == 0
    assert "All folders: **2.0 CPU-hours**" in capsys.readouterr().out
    assert json.loads(out.read_text())["folders"][0]["total"]["cpu_hours_eval"] == pytest.approx(1)
    assert "| simclr | 1 | 1.00 | 1.00 | 0 | 0.0 |" in out.with_suffix(".md").read_text()
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nowhere")])


def test_per_method_sums_every_folder(tmp_path, capsys):
    _cell(tmp_path / "tuning", "simclr-t3-s0", 3600)  # a trial: 1 h
    _cell(tmp_path / "tuning", "moco-preset-s0", 60, gpu="NVIDIA H200")  # 1 cell-minute
    _cell(tmp_path / "study", "simclr-s0", 1800, (1800,))  # 0.5 h + 0.5 h
    _cell(tmp_path / "study", "moco-s0", 7200)  # 2 h
    out = tmp_path / "cost.json"
    assert main([str(tmp_path / "tuning"), str(tmp_path / "study"), "--out", str(out)]) == 0
    per_method = json.loads(out.read_text())["per_method"]
    simclr, moco = per_method["groups"]["simclr"], per_method["groups"]["moco"]
    assert (simclr["cpu_cells"], simclr["cpu_hours_train"], simclr["cpu_hours_eval"]) == (2, 1.5, 0.5)
    assert (moco["cpu_cells"], moco["gpu_cells"], moco["cpu_hours_train"]) == (1, 1, 2.0)
    assert moco["gpu_minutes"] == pytest.approx(1)
    assert per_method["total"]["cpu_hours_train"] == pytest.approx(3.5)
    text = capsys.readouterr().out
    assert "### every folder, per method" in text and "| simclr | 2 | 1.50 | 0.50 | 0 | 0.0 |" in text
    assert "All folders: **4.0 CPU-hours**" in text


def _page(path):
    path.write_text(f"# Costs\n\nbefore\n\n{COSTS_MARKERS[0]}\nstale\n{COSTS_MARKERS[1]}\n\nafter\n")
    return path


def test_doc_block_rows_come_from_the_cells_and_the_config(tmp_path, capsys):
    _cell(tmp_path / "study", "simclr-s0", 3600, (1800,))  # 1 h + 0.5 h on the CPU
    _cell(tmp_path / "study", "moco-s0", 120, (60,), gpu="NVIDIA H200")  # 3 cell-minutes on a GPU
    config = {"methods": {"simclr": "simclr", "moco": "moco-v2"}, "seeds": [0, 1, 2]}  # lists 6 cells
    (tmp_path / "study" / "results.json").write_text(json.dumps({"title": "A study", "config": config}))
    (tmp_path / "study" / "report.md").write_text("# report\n")
    _cell(tmp_path / "tuning", "simclr-t0-s0", 1800)  # no results.json: its name, its published cells
    (tmp_path / "docs").mkdir()
    page = _page(tmp_path / "docs" / "page.md")
    assert main([str(tmp_path / "study"), str(tmp_path / "tuning"), "--doc", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Costs\n\nbefore\n\n") and text.endswith(f"{COSTS_MARKERS[1]}\n\nafter\n")
    assert "stale" not in text
    assert "| [A study](../study/report.md) | 2 of 6 | 1 | 1.00 + 0.50 | 1 (3.0) |" in text
    assert "| tuning | 1 of 1 | 1 | 0.50 + 0.00 | 0 (0.0) |" in text
    assert "| **all** | 3 of 7 | 2 | **2.0** (1.50 + 0.50) | 1 (3.0) |" in text
    assert "**2.0 CPU-hours in all** over 2 CPU cells, 0 of them" in text and "lent GPU (NVIDIA H200)." in text
    capsys.readouterr()
    assert main([str(tmp_path / "study"), str(tmp_path / "tuning"), "--doc", str(page), "--check"]) == 0
    _cell(tmp_path / "study", "simclr-s1", 3600)  # a newly published cell makes the page stale
    assert main([str(tmp_path / "study"), str(tmp_path / "tuning"), "--doc", str(page), "--check"]) == 1
    assert "out of date" in capsys.readouterr().out and page.read_text() == text  # --check writes nothing


def test_a_page_without_the_markers_is_refused(tmp_path):
    _cell(tmp_path / "study", "simclr-s0", 3600)
    page = tmp_path / "page.md"
    page.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="study-costs:begin"):
        main([str(tmp_path / "study"), "--doc", str(page)])
    assert page.read_text() == "# no markers\n"


def test_published_costs_match_the_published_cells():
    """docs/study.md's Costs block and docs/results/study-v3-cost.json are regenerated at every publish."""
    assert main(["--check"]) == 0


def test_a_damaged_record_is_one_error_naming_the_file(tmp_path, capsys):
    _cell(tmp_path / "study", "simclr-s0", 3600)
    (tmp_path / "study" / "cells" / "simclr-s0" / "cell.json").write_text('{"seconds": 36')  # cut short
    with pytest.raises(SystemExit) as stopped:
        main([str(tmp_path / "study")])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "simclr-s0/cell.json" in err and "Traceback" not in err
