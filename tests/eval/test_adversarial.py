"""FGSM / PGD on a linear model, where the input gradient has a closed form."""

from __future__ import annotations

import torch
from sklearn.linear_model import LogisticRegression

from probcl.data.loaders import load_dataset
from probcl.eval.adversarial import attacked_correct, fgsm, pgd, robust_correct


def linear_model(weight: torch.Tensor, bias: torch.Tensor):
    return lambda x: x.flatten(1) @ weight.T + bias


def closed_form_gradient(weight, bias, x, y):
    """d/dx sum_i CE(W x_i + b, y_i) = W^T (softmax(W x_i + b) - onehot(y_i))."""
    p = (x.flatten(1) @ weight.T + bias).softmax(1)
    return ((p - torch.nn.functional.one_hot(y, weight.shape[0]).float()) @ weight).view_as(x)


def test_fgsm_is_eps_times_gradient_sign_on_a_linear_model():
    gen = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(5, 3 * 4 * 4, generator=gen), torch.randn(5, generator=gen)
    eps = 8 / 255
    x = eps + 0.01 + torch.rand(16, 3, 4, 4, generator=gen) * (1 - 2 * eps - 0.02)  # clipping inactive
    y = torch.randint(0, 5, (16,), generator=gen)
    x_adv = fgsm(linear_model(weight, bias), x, y, eps)
    sign = closed_form_gradient(weight, bias, x, y).sign()
    assert (sign != 0).all()
    assert torch.equal(x_adv, x + eps * sign)
    assert torch.allclose(x_adv - x, eps * sign, atol=1e-6)


def test_attacks_stay_in_the_pixel_range_and_the_eps_ball():
    gen = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(4, 36, generator=gen), torch.zeros(4)
    x = torch.randint(0, 2, (32, 1, 6, 6), generator=gen).float()  # pixels exactly 0 or 1
    y = torch.randint(0, 4, (32,), generator=gen)
    model = linear_model(weight, bias)
    for eps in (4 / 255, 8 / 255):
        for x_adv in (fgsm(model, x, y, eps), pgd(model, x, y, eps, steps=10, generator=gen)):
            assert x_adv.min() >= 0 and x_adv.max() <= 1
            assert (x_adv - x).abs().max() <= eps + 1e-6
            assert (x_adv != x).any()


def test_robust_accuracy_never_exceeds_clean_accuracy():
    train, test = load_dataset("digits", "train"), load_dataset("digits", "test")
    to_x = lambda d: d.images.float() / 255.0  # noqa: E731
    clf = LogisticRegression(max_iter=300, C=1.0).fit(to_x(train).flatten(1).numpy(), train.labels().numpy())
    model = linear_model(
        torch.tensor(clf.coef_, dtype=torch.float32), torch.tensor(clf.intercept_, dtype=torch.float32)
    )
    x, y = to_x(test), test.labels()
    gen = torch.Generator().manual_seed(0)
    for attack in (lambda a, b: fgsm(model, a, b, 8 / 255), lambda a, b: pgd(model, a, b, 8 / 255, 10, generator=gen)):
        clean, robust = robust_correct(model, attack, x, y)
        assert clean.float().mean() > 0.9
        assert not (robust & ~clean).any()
        assert robust.float().mean() < clean.float().mean()


def test_attacked_accuracy_counts_every_image_classified_right_after_the_attack():
    """VEM App. E.2 reports plain accuracy on x_adv: an image wrong when clean but right when attacked counts.

    A 1-d two-class model sign(x - 0.5) and a perturbation that shifts every input by +0.02: x = 0.49 with
    label 1 is wrong clean and right perturbed. Robust accuracy (clean and attacked correct) excludes it.
    """
    model = lambda x: torch.cat([0.5 - x.flatten(1), x.flatten(1) - 0.5], 1) * 100  # noqa: E731
    x = torch.tensor([0.49, 0.9, 0.1, 0.51]).view(4, 1, 1, 1)
    y = torch.tensor([1, 1, 0, 0])
    shift = lambda a, b: a + 0.02  # noqa: E731
    clean, attacked = attacked_correct(model, shift, x, y)
    assert clean.tolist() == [False, True, True, False]
    assert attacked.tolist() == [True, True, True, False]
    assert robust_correct(model, shift, x, y)[1].tolist() == [False, True, True, False]
