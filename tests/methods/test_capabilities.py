"""Methods declare what they can do; nothing else in the package is asked."""

from probcl.methods import METHODS
from probcl.methods.base import SSLMethod
from probcl.methods.capabilities import DirectionalEncoder, EnergyModel, HasUncertainty, StochasticEncoder
from probcl.methods.tau import UNCERTAINTY_SCORES


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
