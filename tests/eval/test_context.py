"""ModelOnData and ReferenceOptions, built in code (by `probcl score`, benchmarks), check the bounds declared on
their fields: the same bounds from_dict checks."""

from __future__ import annotations

import pytest

from probcl.errors import ConfigError
from probcl.eval.context import ModelOnData
from probcl.eval.id_reference import ReferenceOptions


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"batch_size": 0}, r"^batch_size must be >= 1, got 0$"),
        ({"max_train": 0}, r"^max_train must be >= 1, got 0$"),
        ({"seed": 2**32}, r"^seed must be in \[0, 4294967295\], got 4294967296$"),
        ({"num_workers": -2}, r"^num_workers must be >= 0, got -2$"),
    ],
)
def test_model_on_data_rejects_out_of_range_settings(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        ModelOnData(tmp_path, "cpu", **settings)


def test_model_on_data_takes_a_run_or_an_encoder():
    with pytest.raises(ConfigError, match="a run directory or a foreign encoder"):
        ModelOnData(None, "cpu")


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"knn_k": 0}, r"^knn_k must be >= 1, got 0$"),
        ({"tpr": 0.0}, r"^tpr must be in \(0, 1\], got 0\.0$"),
        ({"tpr": 1.01}, r"^tpr must be in \(0, 1\], got 1\.01$"),
    ],
)
def test_reference_options_reject_out_of_range_values(fields, message):
    with pytest.raises(ConfigError, match=message):
        ReferenceOptions(**fields)
    assert ReferenceOptions(knn_k=1, tpr=1.0).tpr == 1.0  # the closed ends are valid
