"""Headline figures quoted by the pages equal their run records (issue 43 item 7): the main job's in
docs/results/main-job/summary.json, the quick digits preset's in docs/results/digits-simclr/summary.json. A page
that quotes one of these figures differently (a number from an older run, a count that changed) fails here."""

from __future__ import annotations

import json
import re

import pytest
from markdown_blocks import ROOT

MAIN = json.loads((ROOT / "docs/results/main-job/summary.json").read_text())
DIGITS = json.loads((ROOT / "docs/results/digits-simclr/summary.json").read_text())
NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
WALL = MAIN["wall_seconds_train_and_evaluate"]

# (page, the phrase that quotes a figure, with the number as its one group, the record's value)
QUOTES = [
    ("README.md", rf"\| SimCLR backbone \(1152-d\) \| \*\*{NUMBER} %\*\*", MAIN["linear_top1"]),
    ("README.md", rf"\| SimCLR backbone \(1152-d\) \| \*\*[0-9.]+ %\*\* \| {NUMBER} %", MAIN["knn_top1"]),
    ("README.md", rf"\| raw pixels \(784-d\) \| {NUMBER} %", MAIN["pixels_linear_top1"]),
    ("README.md", rf"\*\*{NUMBER} s\*\* train \+ evaluate", WALL),
    ("docs/index.md", rf"reaches \*\*{NUMBER} %\*\* linear-probe top-1", MAIN["linear_top1"]),
    ("docs/index.md", rf"\(raw pixels: {NUMBER} %", MAIN["pixels_linear_top1"]),
    ("docs/index.md", rf"native bf16, {NUMBER} s\)", WALL),
    ("docs/getting-started.md", rf"linear probe on SimCLR features : {NUMBER} %", MAIN["linear_top1"]),
    ("docs/getting-started.md", rf"weighted kNN \(k=200, T=0.1\) +: {NUMBER} %", MAIN["knn_top1"]),
    ("docs/getting-started.md", rf"linear probe on raw pixels +: {NUMBER} %", MAIN["pixels_linear_top1"]),
    ("docs/getting-started.md", rf"wall time \(train \+ evaluate\) +: {NUMBER} s", WALL),
    ("docs/getting-started.md", rf"digits, 16 px, {NUMBER} steps", DIGITS["optimiser_steps"]),
    ("docs/getting-started.md", rf"CNN width\s+16, {NUMBER} steps", DIGITS["optimiser_steps"]),
    ("docs/getting-started.md", rf"{NUMBER} s of pretraining", DIGITS["pretrain_wall_seconds"]),
    ("docs/getting-started.md", rf"{NUMBER} % linear accuracy", DIGITS["linear_top1"]),
    ("docs/getting-started.md", rf"against {NUMBER} % on raw pixels", DIGITS["pixels_linear_top1"]),
    ("probcl/presets/digits/simclr.yaml", rf"\({NUMBER} optimiser steps", DIGITS["optimiser_steps"]),
]


@pytest.mark.parametrize("page, phrase, value", QUOTES, ids=[f"{p}:{q[:30]}" for p, q, _ in QUOTES])
def test_a_quoted_headline_figure_equals_its_run_record(page, phrase, value):
    quoted = re.findall(phrase, (ROOT / page).read_text())
    assert quoted, f"{page} no longer quotes {phrase!r}: update this test with the page"
    assert all(float(q) == float(value) for q in quoted), f"{page} quotes {quoted}, its record says {value}"


def test_the_digits_record_is_of_the_preset_as_it_stands():
    from probcl.config import load_config
    from probcl.core.presets import resolve_config_path
    from probcl.tasks.startup import steps_per_epoch

    cfg = load_config(resolve_config_path("digits/simclr"))
    per_epoch = steps_per_epoch(1257, cfg.train.batch_size)  # digits' 1,257 training images, full batches only
    assert (per_epoch, cfg.train.epochs, per_epoch * cfg.train.epochs) == (
        DIGITS["steps_per_epoch"],
        DIGITS["epochs"],
        DIGITS["optimiser_steps"],
    )


def test_no_page_promises_the_main_job_in_minutes_it_does_not_take():
    """The main job took 161 s on the published run: 'about 3 minutes', never the old float32 '~10 minutes'."""
    minutes = round(MAIN["wall_seconds_train_and_evaluate"] / 60)
    for page in ("README.md", "docs/index.md", "docs/getting-started.md"):
        text = (ROOT / page).read_text()
        assert "~10 minutes" not in text
        for said in re.findall(r"(?:about|~)([0-9]+) minutes", text):
            assert int(said) == minutes, f"{page} says {said} minutes, the record {minutes}"
