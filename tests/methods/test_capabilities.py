"""Methods declare what they can do; nothing else in the package is asked, and asking a model for a capability it
lacks is one error naming the methods that have it."""

import pytest
import torch

from probcl.errors import ProbclError
from probcl.methods import METHODS
from probcl.methods.base import SSLMethod
from probcl.methods.capabilities import DirectionalEncoder, EnergyModel, HasUncertainty, StochasticEncoder
from probcl.methods.tau import UNCERTAINTY_SCORES

from .helpers import build


def declaring(capability) -> set[str]:
    return {name for name in METHODS.names() if issubclass(METHODS.get(name), capability)}


def test_each_method_declares_its_capabilities():
    assert declaring(HasUncertainty) == {"tau-simclr", "tau-moco", "tau-posthoc"}
    assert declaring(StochasticEncoder) == {"c-simclr", "c-byol"}
    assert declaring(DirectionalEncoder) == {"byol", "c-simclr", "c-byol"}
    assert declaring(EnergyModel) == {"ebclr"}
    for name in declaring(HasUncertainty):
        assert METHODS.get(name).uncertainty_scores == UNCERTAINTY_SCORES == ("neg_u", "neg_u_squared")


def test_the_base_class_promises_no_capability():
    assert not issubclass(SSLMethod, (HasUncertainty, DirectionalEncoder, EnergyModel))
    assert "uncertainty" not in vars(SSLMethod) and "has_uncertainty" not in vars(SSLMethod)


@pytest.mark.parametrize(
    "method, attribute, declared_by",
    [
        ("simclr", "uncertainty", "tau-moco, tau-posthoc, tau-simclr"),
        ("simclr", "uncertainty_scores", "tau-moco, tau-posthoc, tau-simclr"),
        ("moco", "image_energy", "ebclr"),
        ("simclr", "encoder_mean", "byol, c-byol, c-simclr"),
        ("byol", "encoder_concentration", "c-byol, c-simclr"),
        ("ebclr", "uncertainty", "tau-moco, tau-posthoc, tau-simclr"),
    ],
)
def test_a_capability_the_model_lacks_is_one_error_naming_the_methods_that_have_it(method, attribute, declared_by):
    model = build(method)
    with pytest.raises(ProbclError, match=f"^{method} has no {attribute}: .* declared by {declared_by}; ") as caught:
        getattr(model, attribute)
    assert "\n" not in str(caught.value)
    assert not hasattr(model, attribute)  # still an AttributeError underneath: hasattr answers False


def test_other_missing_attributes_and_real_ones_are_untouched():
    model = build("simclr")
    with pytest.raises(AttributeError) as caught:
        model.no_such_thing  # noqa: B018 - the attribute access is the test
    assert not isinstance(caught.value, ProbclError)
    assert isinstance(model.backbone, torch.nn.Module) and model.projector is not None  # nn.Module's look-up
    tau = build("tau-simclr")
    assert tau.uncertainty(torch.zeros(2, 1, 12, 12, dtype=torch.uint8)).shape == (2,)
