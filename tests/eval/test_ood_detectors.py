"""Every registered detector against an independent implementation on identical arrays, to 1e-6 (relative).

pytorch-ood 0.4.0 (the ``dev`` extra) where its conventions are probcl's up to a known factor: Mahalanobis (its
covariance is the unnormalised scatter and its score half the squared distance: probcl's is 2 (N - K) times
its), kNN at k = 1 (its score is the
distance to the k-th neighbour, probcl's the mean over the k nearest: equal at k = 1), energy, MSP and max-logit.
Where the conventions differ, a float64 numpy / scikit-learn computation written out here: kNN at k = 10 and 50
(scikit-learn's neighbours), relative Mahalanobis (pytorch-ood adds its ridge to the unnormalised scatter, so its
background term differs by a ridge of another size) and ViM (pytorch-ood computes in float32); for those two
pytorch-ood is also checked, to the precision its conventions allow.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import KNN, RMD, EnergyBased, Mahalanobis, MaxLogit, MaxSoftmax, ViM
from scipy.special import logsumexp, softmax
from sklearn.neighbors import NearestNeighbors

from probcl.eval.id_reference import IdReference
from probcl.eval.ood_scores import SCORES, FitData
from probcl.eval.ood_scores.head import LinearHead
from probcl.eval.ood_scores.statistics import RIDGE

N, D, C = 240, 6, 3


@pytest.fixture(scope="module")
def arrays():
    """Training features with 3 classes, queries, and a linear head (float64)."""
    rng = np.random.default_rng(0)
    labels = np.arange(N) % C
    centres = rng.normal(0, 2, (C, D))
    mixing = rng.normal(0, 1, (D, D)) + 2 * np.eye(D)
    train = centres[labels] + rng.normal(0, 1, (N, D)) @ mixing
    queries = np.r_[centres[np.arange(20) % 2] + rng.normal(0, 1, (20, D)) @ mixing, rng.normal(0, 6, (20, D))]
    weight, bias = rng.normal(0, 0.5, (C, D)), rng.normal(0, 0.5, C)
    return train, labels, queries, weight, bias


def probcl_scores(arrays, names, normalise_scatter=False) -> dict[str, np.ndarray]:
    train, labels, queries, weight, bias = arrays
    if normalise_scatter:  # mean diagonal of the pooled within-class scatter = 1: both ridges become 1e-6 I
        train, queries = _scatter_scaled(train, labels, queries)
    data = FitData(
        torch.from_numpy(train),
        torch.from_numpy(labels),
        torch.rand(N, 7, generator=torch.Generator().manual_seed(0)),
        LinearHead(torch.from_numpy(weight), torch.from_numpy(bias)),
    )
    reference = IdReference.fit(data, extra=[n for n in names if n not in [e.name for e in SCORES.entries()]])
    scores = reference.scores({"features": torch.from_numpy(queries), "input_stats": torch.rand(len(queries), 7)})
    return {name: scores[name].double().numpy() for name in names}


def _scatter_scaled(train, labels, queries):
    centred = train - np.stack([train[labels == c].mean(0) for c in range(C)])[labels]
    scale = np.sqrt(np.mean(np.diag(centred.T @ centred)))
    return train / scale, queries / scale


def test_mahalanobis_is_pytorch_ood_times_2_n_minus_k(arrays):
    train, labels, queries = arrays[:3]
    train, queries = _scatter_scaled(train, labels, queries)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # pytorch-ood allocates its means with the default dtype
    try:
        detector = Mahalanobis(None).fit_features(torch.from_numpy(train), torch.from_numpy(labels))
        expected = detector.predict_features(torch.from_numpy(queries)).numpy()
    finally:
        torch.set_default_dtype(previous)
    # probcl: precision of S / (N - K) + RIDGE * mean diag(S) / (N - K) I = (N - K) (S + 1e-6 I)^-1 here
    assert RIDGE == 1e-6
    got = probcl_scores(arrays, ["mahalanobis"], normalise_scatter=True)["mahalanobis"]
    np.testing.assert_allclose(got, 2 * (N - C) * expected, rtol=1e-6)  # its score is half the distance


def test_relative_mahalanobis_by_hand_and_against_pytorch_ood(arrays):
    train, labels, queries, _, _ = arrays

    def precision(centred):  # maximum-likelihood covariance with probcl's ridge
        cov = centred.T @ centred / len(centred)
        return np.linalg.inv(cov + 1e-6 * np.mean(np.diag(cov)) * np.eye(D))

    means = np.stack([train[labels == c].mean(0) for c in range(C)])
    within = precision(train - means[labels])
    background = precision(train - train.mean(0))
    md0 = np.einsum("nd,de,ne->n", queries - train.mean(0), background, queries - train.mean(0))
    mdk = np.stack([np.einsum("nd,de,ne->n", queries - m, within, queries - m) for m in means], 1)
    expected = (mdk - md0[:, None]).min(1)
    got = probcl_scores(arrays, ["rmd"])["rmd"]
    np.testing.assert_allclose(got, expected, rtol=1e-6)

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:  # pytorch-ood: unnormalised scatters, so its score is probcl's / N up to the size of the ridges
        detector = RMD(None).fit_features(torch.from_numpy(train), torch.from_numpy(labels))
        theirs = detector.predict_features(torch.from_numpy(queries)).numpy()
    finally:
        torch.set_default_dtype(previous)
    np.testing.assert_allclose(got / N, theirs, rtol=1e-3, atol=1e-4 * np.abs(theirs).max())


@pytest.mark.parametrize("normalised", [True, False])
def test_knn_at_1_is_pytorch_ood_and_at_10_and_50_is_scikit_learn(arrays, normalised):
    train, _, queries, _, _ = arrays
    suffix = "" if normalised else "_raw"
    got = probcl_scores(arrays, [f"knn1{suffix}", f"knn10{suffix}", f"knn50{suffix}", f"knn7{suffix}"])
    detector = KNN(None, k=1, normalize=normalised).fit_features(torch.from_numpy(train), torch.zeros(N).long())
    np.testing.assert_allclose(got[f"knn1{suffix}"], detector.predict_features(torch.from_numpy(queries)), rtol=1e-6)

    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True) if normalised else x

    distances = NearestNeighbors(n_neighbors=50).fit(unit(train)).kneighbors(unit(queries))[0]
    for k in (7, 10, 50):
        np.testing.assert_allclose(got[f"knn{k}{suffix}"], distances[:, :k].mean(1), rtol=1e-6)


def test_energy_msp_and_max_logit_are_pytorch_ood_on_the_heads_logits(arrays):
    _, _, queries, weight, bias = arrays
    logits = torch.from_numpy(queries @ weight.T + bias)
    got = probcl_scores(arrays, ["energy", "msp", "max_logit"])
    np.testing.assert_allclose(got["energy"], EnergyBased.score(logits).numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["msp"], MaxSoftmax.score(logits).numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["max_logit"], MaxLogit.score(logits).numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["msp"], -softmax(logits.numpy(), axis=1).max(1), rtol=1e-6)


def test_linear_head_folds_a_standardising_probe_in():
    from probcl.eval.linear import LinearProbe

    g = torch.Generator().manual_seed(3)
    probe = LinearProbe(
        torch.randn(4, generator=g), torch.rand(4, generator=g) + 0.5, torch.randn(2, 4, generator=g), torch.randn(2)
    )
    x = torch.randn(9, 4, generator=g)
    torch.testing.assert_close(LinearHead.of_probe(probe).logits(x), probe.logits(x).double(), rtol=1e-5, atol=1e-5)


def test_vim_by_hand_and_against_pytorch_ood(arrays):
    train, _, queries, weight, bias = arrays
    principal = D // 2
    origin = -np.linalg.pinv(weight) @ bias
    centred = train - origin
    _, vectors = np.linalg.eigh(centred.T @ centred / N)
    residual = vectors[:, : D - principal]  # the eigenvectors of the D - principal smallest eigenvalues
    alpha = (train @ weight.T + bias).max(1).mean() / np.linalg.norm(centred @ residual, axis=1).mean()
    logits = queries @ weight.T + bias
    expected = alpha * np.linalg.norm((queries - origin) @ residual, axis=1) - logsumexp(logits, axis=1)
    got = probcl_scores(arrays, ["vim"])["vim"]
    np.testing.assert_allclose(got, expected, rtol=1e-6)

    detector = ViM(None, d=principal, w=torch.from_numpy(weight), b=torch.from_numpy(bias))
    detector.fit_features(torch.from_numpy(train).float(), torch.zeros(N).long())
    theirs = detector.predict_features(torch.from_numpy(queries).float()).double().numpy()  # float32 throughout
    np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-4 * np.abs(theirs).max())
