"""A 2-D map of a model's features (t-SNE): the figure data of the run report's embedding map.

Not a suite: it measures nothing. ``probcl evaluate`` computes it for the run report, on a seeded
subset of the test set; :mod:`probcl.report` draws it, coloured by class.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from probcl.errors import DatasetError
from probcl.eval.context import ModelOnData

MAP_IMAGES = 2000  # test images in the map (a seeded subset)
PCA_DIMS = 50  # t-SNE runs on the features' first principal components
PERPLEXITY = 30.0


def tsne_map(features: torch.Tensor, seed: int = 0, perplexity: float = PERPLEXITY) -> list[list[float]]:
    """(N, 2) t-SNE coordinates of ``features`` (L2-normalized, so that distances follow the cosine
    similarity the kNN evaluation uses; PCA to at most 50 dimensions; PCA-initialised, seeded)."""
    from sklearn.decomposition import PCA
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    n = len(features)
    if n < 4:
        raise DatasetError(f"an embedding map needs at least 4 images, got {n}")
    x = F.normalize(features.double(), dim=1).numpy()
    dims = min(PCA_DIMS, n, x.shape[1])
    if dims < x.shape[1]:
        x = PCA(dims, random_state=seed).fit_transform(x)
    tsne = TSNE(2, perplexity=min(perplexity, (n - 1) / 3), init="pca", random_state=seed)
    with threadpool_limits(1):  # one thread: the same map on every machine, and no stall on a busy one
        return tsne.fit_transform(x).round(4).tolist()


def embedding_map(ctx: ModelOnData, max_images: int = MAP_IMAGES, seed: int = 0, layer: str = "backbone") -> dict:
    """The map of ``layer`` features on a seeded subset of the test set: ``points`` (x, y),
    ``labels`` (-1 = unlabeled), ``index`` (test-set indices) and the ``protocol``."""
    data = ctx.dataset(None, "test")
    index = data.seeded_indices(max_images, seed)
    features, labels = ctx.split_features(
        "test", index, f"embedding map: {layer} features of {len(index)} test images", layer
    )
    return {
        "points": tsne_map(features, seed),
        "labels": labels.tolist(),
        "index": index.tolist(),
        "protocol": {
            "method": "t-SNE (scikit-learn) of L2-normalized features, PCA to "
            f"{min(PCA_DIMS, len(index), features.shape[1])} dimensions",
            "feature_layer": layer,
            "dataset": data.name,
            "split": "test",
            "images": len(index),
            "seed": seed,
            "perplexity": min(PERPLEXITY, (len(index) - 1) / 3),
            "class_names": ctx.info.class_names,
        },
    }
