"""docs/adding-a-score.md's example, executed: one registry entry is all a new score needs. Fitted and scored, it
matches numpy; the reference, the calibration, the cache key, `probcl score`'s help and the docs table pick it up."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from probcl.commands.score import RegistryHelp
from probcl.eval.id_reference import IdReference
from probcl.eval.ood_scores import SCORES, FitData
from probcl.eval.ood_scores.calibration import combination_weights

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding-a-score.md"
NAME = "class_cosine"


@pytest.fixture(scope="module")
def fingerprint_before():
    return SCORES.fingerprint()


@pytest.fixture(scope="module")
def example(fingerprint_before):
    """The document's code block, run as a module (as if appended to entries.py); unregistered afterwards."""
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    assert len(code.splitlines()) <= 40, "the worked example should stay short"
    module = types.ModuleType("class_cosine_example")
    sys.modules[module.__name__] = module
    exec(compile(code, str(DOC), "exec", dont_inherit=True), module.__dict__)
    yield module
    SCORES.unregister(NAME)
    del sys.modules[module.__name__]


def test_the_example_score_matches_numpy(example):
    rng = np.random.default_rng(0)
    labels = np.arange(60) % 3
    train = rng.normal(0, 1, (60, 5)) + 3 * np.eye(5)[labels]
    queries = rng.normal(0, 2, (8, 5))
    data = FitData(torch.from_numpy(train), torch.from_numpy(labels), torch.rand(60, 7))
    reference = IdReference.fit(data)
    assert NAME in reference.score_names
    got = reference.scores({"features": torch.from_numpy(queries), "input_stats": torch.rand(8, 7)})[NAME]
    means = np.stack([train[labels == c].mean(0) for c in range(3)])
    cosine = (queries @ means.T) / np.linalg.norm(queries, axis=1)[:, None] / np.linalg.norm(means, axis=1)
    np.testing.assert_allclose(got.numpy(), 1 - cosine.max(1), rtol=1e-6)
    unlabeled = FitData(torch.from_numpy(train), torch.full((60,), -1), torch.rand(60, 7))
    assert NAME not in IdReference.fit(unlabeled).score_names  # fit said None: not available


def test_everything_that_reads_the_registry_picks_it_up(example, fingerprint_before):
    assert SCORES.fingerprint() != fingerprint_before  # probcl score's cache key changes by itself
    assert f"| `{NAME}` | feature distance | higher = OOD |" in SCORES.markdown_table()  # the docs table
    assert NAME in str(RegistryHelp("valid: {names}"))  # probcl score --help
    assert NAME in SCORES and not SCORES.get(NAME).two_sided
    # a feature distance: in a combination it shares the distances' 95 % of the false-alarm budget
    assert combination_weights([NAME, "mahalanobis", "input_stats"]) == pytest.approx(
        {NAME: 0.475, "mahalanobis": 0.475, "input_stats": 0.05}
    )
