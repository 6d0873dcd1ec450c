"""``extends``: a benchmark config as another one plus changes (probcl.tasks.benchmark.extends)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from probcl.config import ConfigError, dotted
from probcl.tasks.benchmark.extends import deep_merge
from probcl.tasks.benchmark.grid import cell_config, grid, load_benchmark

BASE = {
    "title": "base",
    "out": "runs/base",
    "methods": {
        "simclr": "fashion-mnist/simclr",
        "moco": {"config": "fashion-mnist/moco", "overrides": {"method_args.queue_size": 64}},
        "byol": "fashion-mnist/byol",
        "ctrl": {"config": "fashion-mnist/simclr", "seeds": [0], "overrides": {"method_args.temperature": 0.1}},
    },
    "overrides": {"train.epochs": 6, "train.batch_size": 128},
    "seeds": [0, 1],
    "reference": "simclr",
    "suites": ["linear", "ood"],
    "seed_ensembles": ["simclr", "moco"],
    "sweeps": {"simclr and byol": ["simclr", "byol"], "with moco": ["simclr", "moco"]},
    "controls": {
        "ctrl": {"against": ["simclr"], "asks": "lower temperature?"},
    },
    "headline": {"linear": "linear/top1"},
}


def write(path: Path, tree: dict) -> str:
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return str(path)


def test_deep_merge_merges_mappings_and_never_splits_dotted_keys():
    base = {"overrides": {"train.epochs": 6, "model.width": 32}, "seeds": [0, 1, 2], "title": "a"}
    top = {"overrides": {"train.epochs": 30}, "seeds": [0]}
    assert deep_merge(base, top) == {
        "overrides": {"train.epochs": 30, "model.width": 32},
        "seeds": [0],
        "title": "a",
    }
    assert base["overrides"]["train.epochs"] == 6  # the base is not changed


def test_a_longer_budget_keeps_everything_but_its_changes(tmp_path):
    write(tmp_path / "base.yaml", BASE)
    child = write(
        tmp_path / "long.yaml",
        {
            "extends": "base.yaml",  # beside the extending file
            "title": "long",
            "out": "runs/long",
            "overrides": {"train.epochs": 30},
            "methods": {"moco": {"phase": 2}},  # amends the base's entry
        },
    )
    bench, base_dir = load_benchmark(child)
    assert (bench.title, bench.out, bench.seeds, bench.suites) == ("long", "runs/long", [0, 1], ["linear", "ood"])
    assert bench.overrides == {"train.epochs": 30, "train.batch_size": 128}
    assert bench.methods["moco"] == {
        "config": "fashion-mnist/moco",
        "overrides": {"method_args.queue_size": 64},
        "phase": 2,
    }
    assert list(bench.methods) == ["simclr", "moco", "byol", "ctrl"] and list(bench.controls) == ["ctrl"]
    cell = next(c for c in grid(bench) if c.name == "moco-s1")
    cfg = cell_config(bench, cell, tmp_path / "out", base_dir)
    assert cfg.train.epochs == 30 and cfg.train.batch_size == 128 and cfg.method_args["queue_size"] == 64


def test_keeping_some_of_the_base_methods_drops_their_controls_and_ensembles(tmp_path):
    write(tmp_path / "base.yaml", BASE)
    child = write(
        tmp_path / "small.yaml",
        {
            "extends": {"config": str(tmp_path / "base.yaml"), "methods": ["simclr", "byol"]},
            "methods": {"byol": {"config": "fashion-mnist/c-byol"}, "new": "fashion-mnist/simsiam"},  # replace, add
        },
    )
    bench, _ = load_benchmark(child)
    assert bench.methods == {"simclr": "fashion-mnist/simclr", "byol": {"config": "fashion-mnist/c-byol"},
                             "new": "fashion-mnist/simsiam"}  # fmt: skip
    assert bench.controls == {} and bench.seed_ensembles == ["simclr"]
    assert bench.sweeps == {"simclr and byol": ["simclr", "byol"]}  # the sweep naming moco went with it
    # methods: [] keeps none of the base's: this file's methods are the whole grid
    whole = write(tmp_path / "whole.yaml", {"extends": {"config": "base.yaml", "methods": []},
                                            "methods": {"simclr": "fashion-mnist/simclr"}})  # fmt: skip
    assert [c.name for c in grid(load_benchmark(whole)[0])] == ["simclr-s0", "simclr-s1"]


def test_a_chain_of_extends_resolves_from_the_root(tmp_path):
    write(tmp_path / "base.yaml", BASE)
    write(tmp_path / "mid.yaml", {"extends": "base.yaml", "overrides": {"train.epochs": 12}, "seeds": [0, 1, 2]})
    bench, _ = load_benchmark(write(tmp_path / "top.yaml", {"extends": "mid.yaml", "overrides": {"train.epochs": 30}}))
    assert bench.overrides["train.epochs"] == 30 and bench.seeds == [0, 1, 2] and bench.title == "base"


@pytest.mark.parametrize(
    "child, message",
    [
        ({"extends": ["base.yaml"]}, r"extends must be a benchmark config name or \{config: NAME"),
        ({"extends": {"config": "base.yaml", "only": ["simclr"]}}, "extends must be a benchmark config name"),
        ({"extends": "nope/missing"}, "config nope/missing not found"),
        ({"extends": {"config": "base.yaml", "methods": ["simclr", "vem"]}}, "extends.methods names vem, not a method"),
        ({"extends": "base.yaml", "methods": {"vem": {"phase": 2}}}, "methods.vem names no preset .* give it config"),
        ({"extends": {"config": "base.yaml", "methods": ["byol"]}, "methods": {"moco": {"phase": 1}}},
         "the base has no method 'moco' to amend"),
        ({"extends": {"config": "base.yaml", "methods": ["byol"]}}, "reference 'simclr' is not one of the methods"),
        ({"extends": "base.yaml", "budgets": {"long": "nope/missing"}}, "budgets.long: config nope/missing not found"),
    ],
)  # fmt: skip
def test_bad_extends_name_the_key_and_the_fix(tmp_path, child, message):
    write(tmp_path / "base.yaml", BASE)
    with pytest.raises(ConfigError, match=message) as error:
        load_benchmark(write(tmp_path / "child.yaml", child))
    assert "\n" not in str(error.value)  # one line


def test_an_extends_cycle_is_named(tmp_path):
    write(tmp_path / "a.yaml", {"extends": "b.yaml", **BASE})
    write(tmp_path / "b.yaml", {"extends": "a.yaml"})
    with pytest.raises(ConfigError, match=r"extends goes round in a circle \(.*a.yaml -> .*b.yaml -> .*a.yaml\)"):
        load_benchmark(str(tmp_path / "a.yaml"))


def test_the_long_study_differs_from_the_short_one_in_budget_only(tmp_path):
    """fashion-mnist/study-long: the claim-deciding methods (MoCo, SimSiam, VEM-SVGD last) at 5x the epochs, every
    cell's config the short study's same cell but for train.epochs (and its run folder)."""
    short, short_dir = load_benchmark("fashion-mnist/study")
    long, long_dir = load_benchmark("fashion-mnist/study-long")
    assert long.claims == short.claims and long.suites == short.suites and long.headline == short.headline
    assert long.budgets == short.budgets and long.controls == {}
    assert (long.out, long.publish) == ("runs/study-fmnist-long", "docs/results/study-fmnist-long")
    cells = grid(long)
    assert len(cells) == 36 and {c.seed for c in cells} == {0, 1, 2}
    assert [c.method for c in cells[-9:]].count("vem-svgd") == 3 and cells[-1].method in ("moco", "simsiam", "vem-svgd")
    short_cells = {c.name: c for c in grid(short)}
    for cell in cells:
        a = dotted(cell_config(short, short_cells[cell.name], tmp_path, short_dir).to_dict())
        b = dotted(cell_config(long, cell, tmp_path, long_dir).to_dict())
        changed = {k for k in a if a[k] != b[k]}
        assert changed == {"train.epochs"}, (cell.name, changed)
        assert b["train.epochs"] == 5 * a["train.epochs"]  # 30 (4,680 steps), post-hoc TaU 10
