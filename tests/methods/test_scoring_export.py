"""Every method's scoring outputs export to one torch.export program that reproduces the eager model
(what `probcl score`'s repeat calls run instead of loading the method class)."""

from __future__ import annotations

import pytest
import torch

from probcl.eval.score_table import model_output_fns
from probcl.eval.scoring_network import export_outputs, load_outputs
from probcl.methods import METHODS
from probcl.methods.capabilities import EnergyModel, HasUncertainty, StochasticEncoder

from .helpers import build


def _images(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (n, 1, 12, 12), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("method", METHODS.names())
def test_exported_outputs_match_the_eager_model_at_any_batch_size(method, tmp_path):
    model = build(method).eval()
    reference = None
    if isinstance(model, EnergyModel):
        with torch.no_grad():
            reference = model.energy_reference(model.normalizer(_images(6, 9)))
    fns = model_output_fns(model, model.embed_batch, reference)
    expected_names = ["features"]
    expected_names += ["encoder_mean"] if isinstance(model, StochasticEncoder) else []
    expected_names += ["image_energy"] if isinstance(model, EnergyModel) else []
    expected_names += (
        [f"uncertainty:{s}" for s in model.uncertainty_scores] if isinstance(model, HasUncertainty) else []
    )
    assert list(fns) == expected_names

    names = export_outputs(model, fns, _images(4, 0), tmp_path / "network.pt2")
    program = load_outputs(tmp_path / "network.pt2", names)
    for n in (1, 7):
        images = _images(n, n)
        got = program(images)
        with torch.no_grad():
            for name, fn in fns.items():
                torch.testing.assert_close(got[name], fn(images).float(), rtol=1e-5, atol=1e-5)
