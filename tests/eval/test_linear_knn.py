"""kNN and linear probe: near-perfect on separable data, chance on random labels, agree with sklearn."""

import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler

from probcl.eval.knn import knn_classify, topk_accuracy, weighted_knn_scores
from probcl.eval.linear import linear_probe


def blobs(n_per_class=60, classes=5, dim=16, spread=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=g) * 3
    y = torch.arange(classes).repeat_interleave(n_per_class)
    x = centers[y] + spread * torch.randn(len(y), dim, generator=g)
    return x, y


def test_separable_set_is_classified_perfectly():
    xtr, ytr = blobs(seed=0)
    xte, yte = blobs(seed=0, n_per_class=20)
    xte = xte + 0.01
    assert topk_accuracy(weighted_knn_scores(xtr, ytr, xte, 5, k=20), yte)["top1"] == 100.0
    _, plain = knn_classify(xtr, ytr, xte, 5, 0, 1.0, 5)  # the knn suite's plain kNN (k=5 here)
    assert plain is not None and (plain == yte).all()
    result, _ = linear_probe(xtr, ytr, xte, yte, 5)
    assert result["top1"] == 100.0 and result["top5"] == 100.0


def test_random_labels_give_chance():
    g = torch.Generator().manual_seed(1)
    xtr, xte = torch.randn(2000, 8, generator=g), torch.randn(1000, 8, generator=g)
    ytr, yte = torch.randint(0, 4, (2000,), generator=g), torch.randint(0, 4, (1000,), generator=g)
    knn = topk_accuracy(weighted_knn_scores(xtr, ytr, xte, 4, k=50), yte)["top1"]
    lin, _ = linear_probe(xtr, ytr, xte, yte, 4)
    for acc in (knn, lin["top1"]):
        assert 20.0 < acc < 31.0  # 25% +- ~4 standard errors


def test_agreement_with_sklearn():
    xtr, ytr = blobs(spread=2.5, seed=2)
    xte, yte = blobs(spread=2.5, seed=3, n_per_class=40)
    _, plain = knn_classify(xtr, ytr, xte, 5, 0, 1.0, 7)
    assert plain is not None
    ref = KNeighborsClassifier(n_neighbors=7).fit(xtr.numpy(), ytr.numpy()).predict(xte.numpy())
    assert (plain.numpy() == ref).mean() > 0.97  # only vote ties may be broken differently
    result, probe = linear_probe(xtr, ytr, xte, yte, 5, l2_grid=(1e-3,))
    scaler = StandardScaler().fit(xtr.numpy())
    # sklearn minimises C * sum CE + 1/2 ||W||^2; ours mean CE + l2/2 ||W||^2  =>  C = 1 / (n * l2)
    sk = LogisticRegression(C=1.0 / (len(xtr) * 1e-3), max_iter=5000, tol=1e-10).fit(
        scaler.transform(xtr.numpy()), ytr.numpy()
    )
    ours = probe.logits(xte).argmax(1).numpy()
    assert (ours == sk.predict(scaler.transform(xte.numpy()))).mean() > 0.98


@pytest.mark.parametrize("chunk", [9, 1024])  # 9: many chunks through the reused buffers, a partial last one
def test_weighted_knn_scores_are_the_hand_computed_ones(chunk):
    """Class scores = sum over the k most cosine-similar training items of exp(sim / T), computed in float64 numpy,
    and the plain kNN's neighbours are scikit-learn's, whatever the chunking."""
    import numpy as np

    xtr, ytr = blobs(spread=2.5, seed=4)
    xte, _ = blobs(spread=2.5, seed=5, n_per_class=20)
    scores, plain = knn_classify(xtr, ytr, xte, 5, k=10, temperature=0.5, plain_k=1, chunk=chunk)
    a, b = xte.double().numpy(), xtr.double().numpy()
    sims = (a / np.linalg.norm(a, axis=1, keepdims=True)) @ (b / np.linalg.norm(b, axis=1, keepdims=True)).T
    expected = np.zeros((len(a), 5))
    for row, sim in enumerate(sims):
        top = np.argsort(-sim)[:10]
        np.add.at(expected[row], ytr.numpy()[top], np.exp(sim[top] / 0.5))
    assert scores is not None and np.allclose(scores.double().numpy(), expected, rtol=1e-5)
    nearest = KNeighborsClassifier(n_neighbors=1).fit(xtr.numpy(), ytr.numpy()).predict(xte.numpy())
    assert plain is not None and (plain.numpy() == nearest).all()


def _probe_objective(x, y, probe, l2):
    """Mean cross-entropy + l2/2 ||W||^2 on standardized features, in float64 numpy (independent of torch)."""
    import numpy as np

    x = x.double().numpy()
    z = (x - x.mean(0)) / x.std(0, ddof=1)
    w, b = probe.weight.double().numpy(), probe.bias.double().numpy()
    logits = z @ w.T + b
    logits -= logits.max(1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    return -log_p[np.arange(len(y)), y.numpy()].mean() + 0.5 * l2 * (w**2).sum()


def _reference_optimum(x, y, classes, l2):
    """The same convex problem solved tightly by scipy's L-BFGS-B in float64 (gradient written out by hand)."""
    import numpy as np
    from scipy.optimize import minimize

    x = x.double().numpy()
    z = (x - x.mean(0)) / x.std(0, ddof=1)
    onehot = np.eye(classes)[y.numpy()]
    n, d = z.shape

    def f(theta):
        w, b = theta[: classes * d].reshape(classes, d), theta[classes * d :]
        logits = z @ w.T + b
        logits -= logits.max(1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(1, keepdims=True)
        loss = -(onehot * np.log(p)).sum() / n + 0.5 * l2 * (w**2).sum()
        g = (p - onehot) / n
        return loss, np.concatenate([(g.T @ z + l2 * w).ravel(), g.sum(0)])

    res = minimize(
        f,
        np.zeros(classes * (d + 1)),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 20000, "gtol": 1e-12, "ftol": 1e-15},
    )
    return res.fun


@pytest.mark.parametrize("precondition", [True, False])
def test_probe_reaches_the_optimum_of_its_convex_problem(precondition):
    """Correlated, overlapping classes (condition number ~1e3 after standardisation), weak and strong L2: the
    final objective is within 1e-5 nats of scipy's tight float64 optimum of the same problem."""
    from probcl.eval.linear import ProbeProblem

    g = torch.Generator().manual_seed(4)
    x, y = blobs(n_per_class=200, classes=6, dim=24, spread=2.0, seed=4)
    mixing = torch.linalg.qr(torch.randn(24, 24, generator=g))[0] * torch.logspace(0, 1.5, 24)
    x = x @ mixing
    for l2 in (1e-3, 1e-5):
        probe = ProbeProblem.of(x, y, precondition).fit(6, l2, 300)
        assert _probe_objective(x, y, probe, l2) - _reference_optimum(x, y, 6, l2) < 1e-5


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])  # float32: the probe's own (oneDNN) products
@pytest.mark.parametrize("n", [1003, 3])
def test_probe_gradient_is_autograds_of_cross_entropy(n, dtype):
    """The hand-written objective and gradient equal torch autograd's on F.cross_entropy + l2/2 ||W||^2 in float64
    (to float64 rounding; float32 features: to float32 rounding), with a class absent from the labels (its row
    still gets a gradient)."""
    import torch.nn.functional as F

    from probcl.eval.linear import ProbeProblem

    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(n, 7, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)
    problem = ProbeProblem.of(x.to(dtype), y)
    weight = torch.randn(4, 7, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    loss, weight_gradient, bias_gradient = problem.objective_and_gradient(
        weight.detach().to(dtype), bias.detach().to(dtype), 0.3
    )
    z = (x - x.mean(0)) / x.std(0)
    reference = F.cross_entropy(z @ weight.T + bias, y) + 0.15 * (weight**2).sum()
    reference.backward()
    rtol, atol = (1e-12, 1e-14) if dtype == torch.float64 else (1e-5, 1e-6)
    assert torch.allclose(loss.double(), reference.detach(), rtol=rtol, atol=0)
    assert torch.allclose(weight_gradient.double(), weight.grad, rtol=100 * rtol, atol=atol)
    assert torch.allclose(bias_gradient.double(), bias.grad, rtol=100 * rtol, atol=atol)
