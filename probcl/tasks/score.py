"""Per-image scores of a trained run: predicted class, every OOD score with its tail probability, the
combined score, the OOD flag and why an image was flagged.

``score_dataset`` streams a dataset or folder through the model in batches (unreadable files are
reported and skipped) and writes one row per readable image to CSV or Parquet as it goes, plus a
``.json`` sidecar with the protocol and, on request, an HTML contact sheet of the most and least
typical images.

The scores and thresholds are those of :mod:`probcl.eval.id_reference` (the ``ood`` suite's): fitted
on the run's training images, calibrated on its test split, needing no OOD example. The default
decision is the combined score, -log of the smallest tail probability of the combination's scores
under the training distribution, thresholded to accept 95 % of in-distribution images; ``flagged_by``
names every score whose own tail probability crossed that level. Any single score can decide
instead (``score``). The fitted reference is cached in ``RUN/score-cache/`` for the checkpoint it
was fitted on and the options that shape it, so repeat calls only score the new images.
"""

from __future__ import annotations

import csv
import hashlib
import heapq
import io
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from probcl.core.io import atomic_write, atomic_write_json, atomic_write_text
from probcl.core.runs import find_checkpoint
from probcl.data.datasets import ImageSource, Split
from probcl.errors import ConfigError, DatasetError, RunError
from probcl.eval.context import ModelOnData
from probcl.eval.id_reference import (
    COMBINED,
    IdReference,
    ReferenceOptions,
    check_score_names,
    fit_reference,
)
from probcl.eval.linear import LinearProbe, linear_probe

PROBES = ("online", "offline", "none")
SPLITS = ("all", "train", "test")
FORMATS = {".csv": "csv", ".parquet": "parquet"}
CACHE_VERSION = 1  # bump when the cached reference's content or meaning changes


@dataclass
class ScoreOptions:
    """How to score; the defaults: the combined ID-fitted score, a threshold accepting 95 % of ID images."""

    score: str = COMBINED  # the deciding score: combined, or one score's tail probability (e.g. knn10)
    combination: list[str] | None = None  # scores of the combined score (None: the default combination)
    k: int = 10
    tpr: float = 0.95
    probe: str = "online"  # online | offline | none
    split: Split = "all"  # split of the scored data: all | train | test
    batch_size: int = 256
    max_train: int | None = None  # seeded subset of training images the scores are fitted on
    max_calibration: int | None = None  # seeded subset of test images the tails and thresholds come from
    seed: int = 0  # seed of the subsets, the calibration halves and the offline probe
    device: str = "auto"
    data_root: str | None = None
    num_workers: int = 0
    cache: bool = True  # reuse / store the fitted reference in RUN/score-cache
    sheet_size: int = 16  # images per section of the HTML contact sheet

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ConfigError(f"split must be one of {', '.join(SPLITS)}; got {self.split!r}")
        if self.probe not in PROBES:
            raise ConfigError(f"probe must be one of {', '.join(PROBES)}; got {self.probe!r}")
        if self.max_calibration is not None and self.max_calibration < 2:
            raise ConfigError(f"--max-calibration must be >= 2, got {self.max_calibration}")
        if self.sheet_size < 1:
            raise ConfigError(f"the contact sheet needs at least 1 image per section, got {self.sheet_size}")
        ReferenceOptions(self.k, self.tpr)  # checks k and tpr

    def cache_fields(self) -> dict[str, Any]:
        """The options that shape the fitted reference and probe (the cache key)."""
        return {
            "k": self.k,
            "tpr": self.tpr,
            "combination": self.combination,
            "probe": self.probe,
            "max_train": self.max_train,
            "max_calibration": self.max_calibration,
            "seed": self.seed,
            "data_root": self.data_root,
        }


@dataclass
class ScoreSummary:
    """What `score_dataset` wrote."""

    out: Path
    sidecar: Path
    rows: int
    skipped: list[str]
    thresholds: dict[str, float]
    score: str
    combination: list[str]
    flagged: int
    flagged_by: dict[str, int]
    cache: dict[str, Any]
    html: Path | None = None
    protocol: dict[str, Any] = field(default_factory=dict)


def checkpoint_identity(path: Path) -> dict[str, Any]:
    """What changes when a checkpoint is rewritten: its resolved path, size and modification time."""
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


class Scorer:
    """A run's model on data plus its ID reference (fitted, or read from the cache) and class probe:
    turns image batches into score columns."""

    def __init__(self, run: str | Path, options: ScoreOptions) -> None:
        self.options = options
        self.run = Path(run)
        self.ctx = ModelOnData(
            self.run,
            options.device,
            options.batch_size,
            max_train=options.max_train,
            data_root=options.data_root,
            seed=options.seed,
            num_workers=options.num_workers,
        )
        self.model = self.ctx.model
        labeled = bool(self.model.data_info.num_classes)
        if options.score != COMBINED:
            check_score_names([options.score], self.model, options.k, labeled, "for --score (or 'combined')")
        check_score_names(options.combination or [], self.model, options.k, labeled, "in --combination")
        self.reference: IdReference | None = None
        self.probe: Callable[[torch.Tensor], torch.Tensor] | None = None
        self.protocol: dict[str, Any] = {}
        self.cache: dict[str, Any] = {}

    def dataset(self, spec: str | None, split: Split) -> ImageSource:
        """``spec`` (default: the run's training data) conformed to the model's input, unreadable files skipped."""
        return self.ctx.dataset(spec, split, skip_corrupt=True)

    # ----------------------------------------------------------------- reference
    @property
    def cache_path(self) -> Path:
        fields = {"version": CACHE_VERSION, "dataset": self.model.cfg.data.dataset, **self.options.cache_fields()}
        digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
        return (self.run if self.run.is_dir() else self.run.parent) / "score-cache" / f"reference-{digest}.pt"

    def prepare(self) -> None:
        """The ID reference, probe and protocol: from the cache when it holds them for this checkpoint."""
        identity = checkpoint_identity(find_checkpoint(self.run))
        path = self.cache_path
        state = self._read_cache(path, identity) if self.options.cache else None
        self.cache = {"path": str(path), "hit": state is not None}
        if state is None:
            state = self._fit()
            if self.options.cache:
                self._write_cache(path, {**state, "checkpoint": identity, "options": self.options.cache_fields()})
        self.reference = IdReference.from_state(state["reference"])
        self.protocol = state["protocol"]
        probe = state["probe"]
        if self.options.probe == "online" and self.model.online_probe is not None:
            online = self.model.online_probe
            self.probe = torch.no_grad()(lambda f: online(f.to(self.ctx.torch_device)).cpu())
        elif probe is not None:
            self.probe = LinearProbe(**probe).logits

    def _write_cache(self, path: Path, state: dict) -> None:
        """Store the fitted reference; a run directory that cannot be written costs speed, not the scores."""
        try:
            atomic_write(path, lambda fh: torch.save(state, fh))
        except RunError as e:
            self.cache["not_stored"] = str(e)
            print(f"probcl score: the fitted reference is not cached ({e})", file=sys.stderr)

    @staticmethod
    def _read_cache(path: Path, identity: dict[str, Any]) -> dict | None:
        if not path.exists():
            return None
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # noqa: BLE001 - an unreadable cache is refitted and rewritten
            return None
        return state if state.get("checkpoint") == identity else None

    def _fit(self) -> dict[str, Any]:
        """Fit the reference on the training split, calibrate it on the test split, fit the probe."""
        o = self.options
        held_out = self.ctx.dataset(None, "test").seeded_subset(o.max_calibration, o.seed)
        reference, id_out = fit_reference(self.ctx, held_out, ReferenceOptions(o.k, o.tpr, o.combination, o.seed))
        probe_state, probe_protocol = self._fit_probe(reference, id_out)
        protocol = {
            **reference.protocol(),
            "fit": f"{len(reference.bank)} images of {self.model.cfg.data.dataset} (train split)",
            "held_out": f"{len(held_out)} images of {held_out.name} (test split)",
            **probe_protocol,
        }
        return {"reference": reference.state(), "probe": probe_state, "protocol": protocol}

    def _fit_probe(
        self, reference: IdReference, id_out: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any]]:
        """The offline probe's tensors (None for online/none) and the probe's description and top-1 (%)."""
        probe, online = self.options.probe, self.model.online_probe
        labels, features = id_out["labels"], id_out["features"]
        labeled = labels >= 0
        if probe == "none" or (probe == "online" and online is None):  # unlabeled pretraining: no online probe
            return None, {"probe": None, "probe_test_top1": None}
        if probe == "online":
            assert online is not None
            with torch.no_grad():
                hits = online(features[labeled].to(self.ctx.torch_device)).argmax(1).cpu() == labels[labeled]
            top1 = 100.0 * hits.float().mean().item() if labeled.any() else None
            return None, {
                "probe": "online linear probe (trained during pretraining on detached backbone features)",
                "probe_test_top1": top1,
            }
        classes = self.model.data_info.num_classes
        if not (reference.labels >= 0).all() or not classes:
            raise ConfigError("an offline probe needs a labeled training set; use --probe online or none")
        result, fitted = linear_probe(
            reference.bank, reference.labels, features, labels, classes, seed=self.options.seed
        )
        return asdict(fitted), {
            "probe": f"offline multinomial logistic regression (L-BFGS) on {len(reference.bank)} "
            f"training features, l2 {result['protocol']['l2']}",
            "probe_test_top1": result["top1"],
        }

    # ----------------------------------------------------------------- rows
    def columns(
        self, dataset: ImageSource, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor
    ) -> tuple[dict[str, list], dict[str, torch.Tensor]]:
        """The output columns of one batch, and the tensors the contact sheet ranks by."""
        reference = self._prepared()
        outputs = reference.outputs(self.ctx, images)
        scores = reference.scores(outputs)
        combined = reference.decision(scores)
        decision = combined if self.options.score == COMBINED else reference.decision(scores, self.options.score)
        flags, flagged_by = reference.flags(decision, self.options.score)
        cols: dict[str, list] = {"index": indices.tolist(), "id": [dataset.item_id(int(i)) for i in indices]}
        if dataset.labels() is not None:
            cols["label"] = labels.tolist()
        if self.probe is not None:
            confidence, predicted = self.probe(outputs["features"]).softmax(1).max(1)
            cols["predicted_class"], cols["probe_confidence"] = predicted.tolist(), confidence.tolist()
        for name in reference.score_names:
            cols[name] = scores[name].tolist()
            cols[f"p:{name}"] = combined[f"p:{name}"].tolist()
        cols[COMBINED] = combined["ood_score"].tolist()
        cols["ood"] = flags.tolist()
        cols["flagged_by"] = flagged_by
        cols["most_unusual"] = reference.most_unusual(combined)
        return cols, {"rank": decision["ood_score"], "tiebreak": combined["ood_score"]}

    def _prepared(self) -> IdReference:
        if self.reference is None:
            raise ConfigError("Scorer.prepare() has not run")
        return self.reference


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

        self.pq, self.fh = pq, fh
        self.writer: Any = None

    def write(self, cols: dict[str, list]) -> None:
        import pyarrow as pa

        table = pa.table(cols)
        if self.writer is None:
            self.writer = self.pq.ParquetWriter(self.fh, table.schema)
        self.writer.write_table(table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class Extremes:
    """The ``size`` highest- and lowest-ranked images seen so far (bounded memory, one pass)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.high: list[tuple[float, float, int, dict]] = []  # min-heap of the highest ranks
        self.low: list[tuple[float, float, int, dict]] = []  # min-heap of the negated lowest ranks

    def add(self, images: torch.Tensor, cols: dict[str, list], rank: torch.Tensor, tiebreak: torch.Tensor) -> None:
        for i, (r, t) in enumerate(zip(rank.tolist(), tiebreak.tolist())):
            order = cols["index"][i]
            for heap, key in ((self.high, (r, t, -order)), (self.low, (-r, -t, order))):
                if len(heap) < self.size or key > heap[0][:3]:
                    item = (*key, {"image": images[i].clone(), **{name: col[i] for name, col in cols.items()}})
                    (heapq.heapreplace if len(heap) >= self.size else heapq.heappush)(heap, item)

    def most_unusual(self) -> list[dict]:
        return [item[3] for item in sorted(self.high, reverse=True)]

    def most_typical(self) -> list[dict]:
        return [item[3] for item in sorted(self.low, reverse=True)]


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
            raise ConfigError(
                f"writing {out} needs pyarrow: `pip install pyarrow`, or write CSV (--out {out.with_suffix('.csv')})"
            ) from None
    return fmt


def score_dataset(
    run: str | Path,
    data: str,
    out: str | Path | None = None,
    options: ScoreOptions | None = None,
    html: str | Path | None = None,
) -> ScoreSummary:
    """Score every readable image of ``data`` (dataset spec or ``folder:PATH``) with the model of ``run``.

    Writes ``out`` (default ``RUN/scores.csv``) atomically, a ``.json`` sidecar next to it, and an HTML
    contact sheet to ``html`` when given.
    """
    options = options or ScoreOptions()
    out = Path(out) if out is not None else Path(run) / "scores.csv"
    fmt = output_format(out)
    scorer = Scorer(run, options)
    dataset = scorer.dataset(data, options.split)  # fail on a bad spec before the reference passes
    scorer.prepare()
    reference = scorer._prepared()
    rows, flagged, skipped, flagged_by = 0, 0, list[str](), Counter[str]()
    extremes = Extremes(options.sheet_size) if html is not None else None

    def write(fh: IO[bytes]) -> None:
        nonlocal rows, flagged
        sink = CsvSink(fh) if fmt == "csv" else ParquetSink(fh)
        for images, labels, indices, skipped_idx in scorer.ctx.batches(dataset, f"scoring {dataset.name}"):
            skipped.extend(dataset.item_id(int(i)) for i in skipped_idx)
            if images is None:
                continue
            cols, ranks = scorer.columns(dataset, images, labels, indices)
            sink.write(cols)
            flagged_by.update(name for names in cols["flagged_by"] for name in names.split(";") if name)
            if extremes is not None:
                extremes.add(images, cols, ranks["rank"], ranks["tiebreak"])
            rows += len(indices)
            flagged += sum(cols["ood"])
        if rows == 0:
            raise DatasetError(f"{data}: none of its {len(skipped)} images could be read")
        sink.close()

    atomic_write(out, write)
    thresholds = dict(reference.thresholds)
    protocol = {
        **scorer.protocol,
        "score": options.score,
        "tpr": options.tpr,
        "decision": (
            f"flag when -log p > threshold, p = the tail probability of {options.score}"
            if options.score != COMBINED
            else f"flag when the combined score (-log min p over {', '.join(reference.combination)}) "
            f"> threshold; flagged_by lists every score whose own -log p crossed it"
        ),
        "split": options.split,
        "batch_size": options.batch_size,
    }
    summary = ScoreSummary(
        out,
        out.with_suffix(".json"),
        rows,
        skipped,
        thresholds,
        options.score,
        list(reference.combination),
        flagged,
        dict(flagged_by.most_common()),
        scorer.cache,
        Path(html) if html is not None else None,
        protocol,
    )
    atomic_write_json(
        summary.sidecar,
        {
            "run": str(run),
            "data": data,
            "out": str(out),
            "rows": rows,
            "flagged": flagged,
            "flagged_by": summary.flagged_by,
            "skipped": skipped,
            "score": options.score,
            "thresholds": thresholds,
            "protocol": protocol,
            "checkpoint": scorer.model.checkpoint_meta,
            "cache": scorer.cache,
        },
    )
    if extremes is not None and summary.html is not None:
        from probcl.report.contact_sheet import contact_sheet_html

        atomic_write_text(
            summary.html,
            contact_sheet_html(
                f"probcl score: {data}",
                [
                    f"run: {run}",
                    f"{rows} images scored, {flagged} flagged as out-of-distribution "
                    f"(decision: {options.score}, {options.tpr:.0%} of ID images accepted)",
                ],
                {
                    "Least typical (highest OOD score)": extremes.most_unusual(),
                    "Most typical (lowest OOD score)": extremes.most_typical(),
                },
                [COMBINED, *(f"p:{n}" for n in reference.combination)],
            ),
        )
    return summary
