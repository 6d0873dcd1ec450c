"""Bounds declared on the Params (and config section) fields, checked by ``from_dict``: one line per bad
value naming the key and the valid range. Every value the hand-written checks rejected before is listed."""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest

from probcl.config import AtLeast, Bound, Config, InRange, NonNegative, Positive, from_dict, load_config
from probcl.data.info import DataInfo
from probcl.errors import ConfigError
from probcl.methods import METHODS
from probcl.methods.moco import MoCoParams
from probcl.methods.simclr import SimCLR, SimCLRParams

from .helpers import DATA_INFO, build

# (method, key under method_args (dotted for nested sections), bad value, valid range as the message says it)
REJECTED = [
    ("simclr", "temperature", 0.0, "> 0"),
    ("moco", "temperature", -0.2, "> 0"),
    ("moco", "queue_size", 0, ">= 1"),
    ("moco", "momentum", 1.0, "in [0, 1)"),
    ("moco", "momentum", -0.1, "in [0, 1)"),
    ("tau-moco", "scale", 0.0, "> 0"),
    ("tau-moco", "momentum", 1.5, "in [0, 1)"),
    ("tau-simclr", "scale", -1.0, "> 0"),
    ("tau-posthoc", "scale", 0.0, "> 0"),
    ("vem-langevin", "temperature", 0.0, "> 0"),
    ("vem-langevin", "bank_temperature", 0.0, "> 0"),
    ("vem-langevin", "steps", 0, ">= 1"),
    ("vem-langevin", "step_size", 0.0, "> 0"),
    ("vem-langevin", "momentum", 1.0, "in [0, 1)"),
    ("vem-langevin", "bank_size", 0, ">= 1"),
    ("vem-langevin", "noise_scale", -0.01, ">= 0"),
    ("vem-svgd", "bank_size", 0, ">= 1"),
    ("vem-svgd", "bandwidth", 0.0, "> 0"),
    ("vem-image", "particles", 0, ">= 1"),
    ("vem-image", "noise_scale", -1.0, ">= 0"),
    ("byol", "tau_base", 1.0, "in [0, 1)"),
    ("byol", "w_byol", 0.0, "> 0"),
    ("byol", "pred_hidden", 0, ">= 1"),
    ("byol", "collapse_threshold", -1.0, ">= 0"),
    ("simsiam", "pred_hidden", 0, ">= 1"),
    ("simsiam", "collapse_threshold", -0.5, ">= 0"),
    ("simclr-pred", "predictor_weight", 0.0, "> 0"),
    ("simclr-pred", "predictor_weight", -1.0, "> 0"),
    ("simclr-pred", "temperature", 0.0, "> 0"),
    ("simclr-pred", "pred_hidden", 0, ">= 1"),
    ("c-byol", "kappa_e", 0.0, "> 0"),
    ("c-byol", "kappa_b", -1.0, "> 0"),
    ("c-byol", "beta", -0.1, ">= 0"),
    ("c-byol", "b_hidden", 0, ">= 1"),
    ("c-byol", "tau_base", 1.0, "in [0, 1)"),
    ("c-simclr", "kappa_e", 0.0, "> 0"),
    ("c-simclr", "kappa_b", 0.0, "> 0"),
    ("c-simclr", "beta", -1.0, ">= 0"),
    ("ebclr", "temperature", 0.0, "> 0"),
    ("ebclr", "lam", -0.1, ">= 0"),
    ("ebclr", "proj_norm_weight", -1.0, ">= 0"),
    ("ebclr", "buffer_size", 0, ">= 1"),
    ("ebclr", "max_grad_norm", -1.0, ">= 0"),
    ("ebclr", "reinit_prob", 1.5, "in [0, 1]"),
    ("ebclr", "sgld.steps", 0, ">= 1"),
    ("ebclr", "sgld.step_size", 0.0, "> 0"),
    ("ebclr", "sgld.clamp", 0.0, "> 0"),
    ("ebclr", "sgld.sigma_min", -0.01, ">= 0"),
    ("ebclr", "sgld.decay_uses", 0.0, "> 0"),
]


def nested(dotted: str, value) -> dict:
    head, _, rest = dotted.partition(".")
    return {head: nested(rest, value) if rest else value}


@pytest.mark.parametrize("method, key, value, valid", REJECTED, ids=[f"{m}.{k}={v}" for m, k, v, _ in REJECTED])
def test_each_bad_value_is_one_line_naming_key_and_range(method, key, value, valid):
    with pytest.raises(ConfigError) as caught:
        from_dict(METHODS.get(method).Params, nested(key, value), "method_args")
    assert str(caught.value) == f"method_args.{key} must be {valid}, got {value}"


@pytest.mark.parametrize("method, key, value, valid", REJECTED[:12], ids=[f"{m}.{k}" for m, k, _, _ in REJECTED[:12]])
def test_boundary_values_inside_the_range_are_accepted(method, key, value, valid):
    edge = {"> 0": 1e-9, ">= 1": 1, ">= 0": 0.0, "in [0, 1)": 0.0}[valid]
    params = from_dict(METHODS.get(method).Params, nested(key, edge), "method_args")
    assert getattr(params, key) == edge


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"train.batch_size": 1}, "train.batch_size must be >= 2, got 1"),
        ({"train.epochs": 0}, "train.epochs must be >= 1, got 0"),
        ({"optim.lr": 0}, "optim.lr must be > 0, got 0.0"),
        ({"optim.weight_decay": -1e-4}, "optim.weight_decay must be >= 0, got -0.0001"),
        ({"model.width": 0}, "model.width must be >= 1, got 0"),
        ({"model.proj_out": 0}, "model.proj_out must be >= 1, got 0"),
        ({"augment.flip": 1.5}, "augment.flip must be in [0, 1], got 1.5"),
    ],
)
def test_config_sections_use_the_same_bounds(overrides, message):
    with pytest.raises(ConfigError) as caught:
        load_config(None, overrides)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "method, args, match",
    [
        ("ebclr", {"sgld": {"sigma_min": 0.1, "sigma_max": 0.05}}, "sigma_max .* must be >= sigma_min"),
        ("c-simclr", {"kappa_e": math.inf, "beta": 1.0}, "kappa_e = .inf .* needs method_args.beta = 0"),
        ("tau-posthoc", {"input_mean": [0.5]}, "input_mean and method_args.input_std must be given together"),
        ("tau-posthoc", {"input_mean": [0.5], "input_std": [0.0]}, r"input_std\[0\] must be > 0"),
    ],
)
def test_cross_field_checks_stay(method, args, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(METHODS.get(method).Params, args, "method_args")


def test_queue_smaller_than_the_batch_is_still_rejected():
    with pytest.raises(ConfigError, match="queue_size=16 is smaller than train.batch_size=32"):
        build("moco", batch_size=32, queue_size=16)


def test_bound_descriptions():
    assert [
        b.describe()
        for b in (
            Positive,
            NonNegative,
            AtLeast(2),
            InRange(0, 1, high_open=True),
            InRange(0, 1, low_open=True),
            Bound(high=3),
        )
    ] == ["> 0", ">= 0", ">= 2", "in [0, 1)", "in (0, 1]", "<= 3"]
    Positive.check("x", None)  # unset options pass


def test_params_come_from_the_type_argument_and_hp_is_the_validated_object():
    assert SimCLR.Params is SimCLRParams and METHODS.get("moco").Params is MoCoParams
    cfg = load_config(None, {"model.width": 4, "method_args.temperature": 0.3})
    hp = SimCLR.params(cfg)
    model = SimCLR(cfg, DATA_INFO, hp)
    assert model.hp is hp and model.cfg is cfg and hp.temperature == 0.3
    # The checkpoint keeps plain dicts, from which the same model is rebuilt.
    assert model.hparams["config"] == cfg.to_dict() and model.hparams["data_info"] == asdict(DataInfo(**DATA_INFO))
    again = SimCLR(**model.hparams)
    assert again.hp == hp and isinstance(again.cfg, Config)
