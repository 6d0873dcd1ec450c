"""Per-image scores of a trained run: predicted class, embedding norm, uncertainty, kNN distance, OOD flags.

``score_dataset`` streams a dataset or folder through the model (unreadable files are
reported and skipped) and writes one row per readable image to CSV or Parquet, plus a
``.json`` sidecar with the protocol. Reference quantities come from the run's own data:

- kNN distance: mean Euclidean distance to the k nearest L2-normalized projections of the
  run's training images (TaU paper's kNN baseline, k = 10);
- OOD flags: a score above the threshold that accepts ``tpr`` (95 %) of the training
  dataset's test split is flagged, for each score (kNN distance, and uncertainty where the
  method has one);
- predicted class: the model's online linear probe (trained during pretraining on detached
  features), or an offline logistic-regression probe fitted on the training features.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from probcl.core.io import atomic_write, atomic_write_json
from probcl.data.datasets import ImageSource, Split
from probcl.errors import ConfigError, DatasetError
from probcl.eval.context import ModelOnData
from probcl.eval.linear import linear_probe
from probcl.eval.outlier import knn_distance, threshold_at_tpr
from probcl.methods.capabilities import HasUncertainty

PROBES = ("online", "offline", "none")
SPLITS = ("all", "train", "test")
FORMATS = {".csv": "csv", ".parquet": "parquet"}


@dataclass
class ScoreOptions:
    """How to score; the defaults follow the TaU paper's kNN baseline and a 95 % TPR threshold."""

    k: int = 10
    tpr: float = 0.95
    probe: str = "online"  # online | offline | none
    uncertainty_score: str | None = None  # a method-specific score name (e.g. TaU: neg_u, neg_u_squared)
    split: Split = "all"  # split of the scored data: all | train | test
    batch_size: int = 256
    max_train: int | None = None  # seeded subset of training images as kNN reference / probe data
    seed: int = 0  # seed of the max_train subset and the offline probe
    device: str = "auto"
    data_root: str | None = None
    num_workers: int = 0

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ConfigError(f"split must be one of {', '.join(SPLITS)}; got {self.split!r}")
        if self.k < 1:
            raise ConfigError(f"k must be >= 1, got {self.k}")
        if not 0 < self.tpr <= 1:
            raise ConfigError(f"the OOD threshold's TPR must be in (0, 1], got {self.tpr}")
        if self.probe not in PROBES:
            raise ConfigError(f"probe must be one of {', '.join(PROBES)}; got {self.probe!r}")


@dataclass
class ScoreSummary:
    """What `score_dataset` wrote."""

    out: Path
    sidecar: Path
    rows: int
    skipped: list[str]
    thresholds: dict[str, float]
    protocol: dict[str, Any] = field(default_factory=dict)


class Scorer:
    """A run's model on data (:class:`ModelOnData`) plus its reference quantities: turns image batches
    into score columns."""

    def __init__(self, run: str | Path, options: ScoreOptions) -> None:
        self.options = options
        self.ctx = ModelOnData(Path(run), options.device, options.batch_size, max_train=options.max_train,
                               data_root=options.data_root, seed=options.seed, num_workers=options.num_workers)
        self.model = self.ctx.model
        self.uncertainty_score: str | None = None  # the score used, for HasUncertainty methods
        if isinstance(self.model, HasUncertainty):
            self.uncertainty_score = self.model.uncertainty_score_name(options.uncertainty_score)
        elif options.uncertainty_score is not None:
            raise ConfigError(f"method {self.model.cfg.method!r} has no uncertainty score; drop --uncertainty-score")
        self.reference: torch.Tensor | None = None
        self.probe: Callable[[torch.Tensor], torch.Tensor] | None = None
        self.thresholds: dict[str, float] = {}
        self.protocol: dict[str, Any] = {}

    def dataset(self, spec: str | None, split: Split, reference: bool = False) -> ImageSource:
        """``spec`` (default: the run's training data) conformed to the model's input, unreadable files
        skipped; a ``reference`` train split is capped at ``max_train``."""
        return self.ctx.dataset(spec, split, skip_corrupt=True, cap_train=reference)

    def collect(self, data: ImageSource, description: str) -> dict[str, torch.Tensor]:
        """Outputs and labels of a whole (reference) dataset."""
        return self.ctx.collect(data, description, self.uncertainty_score)

    # ----------------------------------------------------------------- reference
    def fit_reference(self) -> None:
        """kNN reference (training projections), OOD thresholds (test split) and the class probe."""
        o = self.options
        train = self.dataset(None, "train", reference=True)
        ref = self.collect(train, f"reference: {train.name} train")
        self.reference = ref["projection"]
        held_out = self.dataset(None, "test")
        test = self.collect(held_out, f"threshold: {held_out.name} test")
        scores = {"knn_distance": knn_distance(self.reference, test["projection"], o.k)}
        if "uncertainty" in test:
            scores["uncertainty"] = test["uncertainty"]
        self.thresholds = {name: threshold_at_tpr(s, o.tpr) for name, s in scores.items()}
        self.protocol = {
            "knn": f"k={o.k}, Euclidean distance between L2-normalized projections, mean over the k nearest",
            "knn_reference": f"{len(self.reference)} images of {train.name} (train split)",
            "ood_threshold": f"accepts {o.tpr:.0%} of {held_out.name} (test split, {len(scores['knn_distance'])} "
                             f"images): flag = score > threshold",
            "uncertainty": (f"{self.model.cfg.method}: {self.uncertainty_score} score, higher = more uncertain"
                            if self.uncertainty_score else None),
        }
        self.protocol["probe"], self.protocol["probe_test_top1"] = self._fit_probe(ref, test)

    def _fit_probe(self, train: dict[str, torch.Tensor], test: dict[str, torch.Tensor]
                   ) -> tuple[str | None, float | None]:
        """Sets ``self.probe`` (features -> logits); returns its description and test top-1 (%)."""
        probe = self.options.probe
        online = self.model.online_probe
        if probe == "none":
            return None, None
        if probe == "online":
            if online is None:  # pretrained on unlabeled data: no online probe
                return None, None
            self.probe = torch.no_grad()(lambda f: online(f.to(self.ctx.torch_device)).cpu())
            labeled = test["labels"] >= 0
            hits = self.probe(test["features"][labeled]).argmax(1) == test["labels"][labeled]
            top1 = 100.0 * hits.float().mean().item() if labeled.any() else None
            return "online linear probe (trained during pretraining on detached backbone features)", top1
        labeled = train["labels"] >= 0
        if not labeled.all() or not self.model.data_info.num_classes:
            raise ConfigError("an offline probe needs a labeled training set; use --probe online or none")
        result, fitted = linear_probe(train["features"], train["labels"], test["features"], test["labels"],
                                      self.model.data_info.num_classes, seed=self.options.seed)
        self.probe = fitted.logits
        return (f"offline multinomial logistic regression (L-BFGS) on {len(train['labels'])} training features, "
                f"l2 {result['protocol']['l2']}"), result["top1"]

    # ----------------------------------------------------------------- rows
    def columns(self, dataset: ImageSource, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor
                ) -> dict[str, list]:
        """The output columns of one batch."""
        out = self.ctx.outputs(images, self.uncertainty_score)
        knn = knn_distance(self.reference, out["projection"], self.options.k)
        cols: dict[str, list] = {"index": indices.tolist(), "id": [dataset.item_id(int(i)) for i in indices]}
        if dataset.labels() is not None:
            cols["label"] = labels.tolist()
        if self.probe is not None:
            probs = self.probe(out["features"]).softmax(1)
            confidence, predicted = probs.max(1)
            cols["predicted_class"], cols["probe_confidence"] = predicted.tolist(), confidence.tolist()
        cols["embedding_norm"] = out["features"].norm(dim=1).tolist()
        if "uncertainty" in out:
            cols["uncertainty"] = out["uncertainty"].tolist()
        cols["knn_distance"] = knn.tolist()
        cols["knn_ood"] = (knn > self.thresholds["knn_distance"]).tolist()
        if "uncertainty" in out:
            cols["uncertainty_ood"] = (out["uncertainty"] > self.thresholds["uncertainty"]).tolist()
        return cols


class CsvSink:
    """Writes column batches as CSV rows to a binary file handle."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.text = io.TextIOWrapper(fh, encoding="utf-8", newline="", write_through=True)
        self.writer: csv.DictWriter | None = None

    def write(self, cols: dict[str, list]) -> None:
        if self.writer is None:
            self.writer = csv.DictWriter(self.text, fieldnames=list(cols))
            self.writer.writeheader()
        names = list(cols)
        self.writer.writerows(dict(zip(names, row)) for row in zip(*cols.values()))

    def close(self) -> None:
        self.text.flush()
        self.text.detach()


class ParquetSink:
    """Writes column batches as row groups of a Parquet file (needs pyarrow)."""

    def __init__(self, fh: IO[bytes]) -> None:
        import pyarrow.parquet as pq

        self.pq, self.fh, self.writer = pq, fh, None

    def write(self, cols: dict[str, list]) -> None:
        import pyarrow as pa

        table = pa.table(cols)
        if self.writer is None:
            self.writer = self.pq.ParquetWriter(self.fh, table.schema)
        self.writer.write_table(table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def output_format(out: Path) -> str:
    """``csv`` or ``parquet`` from the file suffix; Parquet needs pyarrow (checked before any work)."""
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        raise ConfigError(f"--out {out}: use a .csv or .parquet file name")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise ConfigError(f"writing {out} needs pyarrow: `pip install pyarrow`, or write CSV (--out "
                              f"{out.with_suffix('.csv')})") from None
    return fmt


def score_dataset(run: str | Path, data: str, out: str | Path | None = None,
                  options: ScoreOptions | None = None) -> ScoreSummary:
    """Score every readable image of ``data`` (dataset spec or ``folder:PATH``) with the model of ``run``.

    Writes ``out`` (default ``RUN/scores.csv``) atomically and a ``.json`` sidecar next to it.
    """
    options = options or ScoreOptions()
    out = Path(out) if out is not None else Path(run) / "scores.csv"
    fmt = output_format(out)
    scorer = Scorer(run, options)
    dataset = scorer.dataset(data, options.split)  # fail on a bad spec before the reference passes
    scorer.fit_reference()
    rows, skipped = 0, list[str]()

    def write(fh: IO[bytes]) -> None:
        nonlocal rows
        sink = CsvSink(fh) if fmt == "csv" else ParquetSink(fh)
        for images, labels, indices, skipped_idx in scorer.ctx.batches(dataset, f"scoring {dataset.name}"):
            skipped.extend(dataset.item_id(int(i)) for i in skipped_idx)
            if images is None:
                continue
            sink.write(scorer.columns(dataset, images, labels, indices))
            rows += len(indices)
        if rows == 0:
            raise DatasetError(f"{data}: none of its {len(skipped)} images could be read")
        sink.close()

    atomic_write(out, write)
    sidecar = out.with_suffix(".json")
    protocol = {**scorer.protocol, "split": options.split, "batch_size": options.batch_size}
    atomic_write_json(sidecar, {"run": str(run), "data": data, "out": str(out), "rows": rows,
                                "skipped": skipped, "thresholds": scorer.thresholds, "protocol": protocol,
                                "checkpoint": scorer.model.checkpoint_meta})
    return ScoreSummary(out, sidecar, rows, skipped, scorer.thresholds, protocol)
