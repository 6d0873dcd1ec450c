"""`evaluate` takes one settings object (EvaluateSettings), checked by from_dict before any work."""

from __future__ import annotations

import dataclasses

import pytest

import probcl
from probcl.config import from_dict
from probcl.errors import ConfigError
from probcl.tasks.evaluate import EvaluateSettings


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"batch_size": 0}, r"^batch_size must be >= 1, got 0$"),
        ({"max_train": 0}, r"^max_train must be >= 1, got 0$"),
        ({"seed": -1}, r"^seed must be in \[0, 4294967295\], got -1$"),
        ({"num_workers": -1}, r"^num_workers must be >= 0, got -1$"),
        ({"feature_layer": "logits"}, r"^feature_layer must be one of backbone, projection, pixels; got 'logits'$"),
        ({"batchsize": 8}, r"^unknown config key\(s\) batchsize; valid keys: device, batch_size, feature_layer"),
    ],
)
def test_python_evaluate_checks_its_settings_before_looking_at_the_run(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        probcl.evaluate(tmp_path / "no-such-run", **settings)


def test_the_settings_reach_the_model_context(tmp_path):
    settings = from_dict(EvaluateSettings, {"device": "cpu", "batch_size": 7, "max_train": 30, "seed": 3})
    ctx = settings.context(tmp_path)
    assert (ctx.run_dir, ctx.device, ctx.batch_size, ctx.max_train, ctx.seed) == (tmp_path, "cpu", 7, 30, 3)
    assert (ctx.feature_layer, ctx.num_workers, ctx.data_root) == ("backbone", 0, None)
    # every field of the context's that EvaluateSettings also has is passed on, none forgotten
    shared = {f.name for f in dataclasses.fields(EvaluateSettings)} & {f.name for f in dataclasses.fields(ctx)}
    assert all(getattr(ctx, name) == getattr(settings, name) for name in shared)
