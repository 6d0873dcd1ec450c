"""Per-image scores of a trained run: predicted class, every OOD score with its tail probability, the
combined score, the OOD flag and why an image was flagged.

``score_dataset`` streams a dataset or folder through the model in batches (unreadable files are
reported and skipped) and writes one row per readable image to CSV or Parquet as it goes, plus a
``.json`` sidecar with the protocol and, on request, an HTML contact sheet of the most and least
typical images.

The scores and thresholds are those of :mod:`probcl.eval.id_reference` (the ``ood`` suite's): fitted
on the run's training images, calibrated on its test split, needing no OOD example. The default
decision is the combined score, -log of the smallest weighted tail probability p / w of the
combination's scores under the training distribution (distances weighted above guards, see
:func:`~probcl.eval.id_reference.combination_weights`), thresholded to accept 95 % of
in-distribution images; ``flagged_by`` names every score whose own p / w crossed that level. Any single score can decide
instead (``score``). The fitted reference is cached in ``RUN/score-cache/`` for the checkpoint it
was fitted on and the options that shape it, so repeat calls only score the new images; with it goes
the model's scoring outputs exported as one ``torch.export`` program
(:mod:`probcl.eval.scoring_network`), so that a repeat call on the CPU (:class:`CachedScorer`)
imports neither the method classes nor PyTorch Lightning.
"""

from __future__ import annotations

import csv
import hashlib
import heapq
import io
import json
import sys
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from probcl.config import OnUnreadable
from probcl.core.devices import resolve_device
from probcl.core.io import atomic_write, atomic_write_json, atomic_write_text
from probcl.core.layout import RunPaths, find_checkpoint
from probcl.data.loaders import image_batches, load_dataset
from probcl.data.sources import ImageSource
from probcl.data.specs import Split
from probcl.data.unreadable import ON_UNREADABLE_OPTION, UnreadableFiles
from probcl.errors import ConfigError, DatasetError, RunError
from probcl.eval.id_reference import COMBINED, IdReference, ReferenceOptions, check_names, with_input_statistics
from probcl.eval.linear import LinearProbe
from probcl.eval.scoring_network import ExportedOutputs, export_outputs, load_outputs

PROBES = ("online", "offline", "none")
SPLITS = ("all", "train", "test")
FORMATS = {".csv": "csv", ".parquet": "parquet"}
CACHE_VERSION = 2  # bump when the cached reference's content or meaning changes


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
    on_unreadable: OnUnreadable = "skip"  # image files that cannot be read: skip (listed in OUT.unreadable.txt) | error

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


def cache_file(run: Path, dataset: str, options: ScoreOptions, kind: str = "reference", suffix: str = ".pt") -> Path:
    """``RUN/score-cache/{kind}-{digest}{suffix}``: one file per run, training dataset and reference options."""
    fields = {"version": CACHE_VERSION, "dataset": dataset, **options.cache_fields()}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    return (run if run.is_dir() else run.parent) / "score-cache" / f"{kind}-{digest}{suffix}"


def read_cache(path: Path, identity: dict[str, Any]) -> dict | None:
    """The cached state at ``path`` if it was fitted on the checkpoint ``identity`` (else None)."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - an unreadable cache is refitted and rewritten
        return None
    return state if state.get("checkpoint") == identity else None


class Scorer(ABC):
    """A run's ID reference and class probe (see :meth:`prepare`) plus a way to get the model's outputs:
    turns image batches into score columns."""

    def __init__(self, run: str | Path, options: ScoreOptions) -> None:
        self.options = options
        self.run = Path(run)
        self.reference: IdReference | None = None
        self.probe: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None  # model outputs -> logits
        self.protocol: dict[str, Any] = {}
        self.cache: dict[str, Any] = {}
        self.checkpoint_meta: Any = None
        self.unreadable = UnreadableFiles(options.on_unreadable, ON_UNREADABLE_OPTION)  # of every data it reads

    @abstractmethod
    def dataset(self, spec: str | None, split: Split) -> ImageSource:
        """``spec`` (default: the run's training data) conformed to the model's input, unreadable files skipped."""

    @abstractmethod
    def batches(self, data: ImageSource, description: str) -> Iterator[tuple[Any, Any, Any, torch.Tensor]]:
        """(uint8 images or None, labels, indices, skipped indices) per batch, with a progress bar."""

    @abstractmethod
    def prepare(self) -> None:
        """Set :attr:`reference`, :attr:`probe`, :attr:`protocol`, :attr:`cache` and :attr:`checkpoint_meta`."""

    @abstractmethod
    def model_outputs(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """What the reference scores (and the probe) need of a uint8 batch, float32 on the CPU."""

    def check_requested(self, valid: list[str]) -> None:
        """One ConfigError when ``--score`` or ``--combination`` names a score not in ``valid``."""
        if self.options.score != COMBINED:
            check_names([self.options.score], valid, "for --score (or 'combined')")
        check_names(self.options.combination or [], valid, "in --combination")

    def _use_state(
        self, state: dict[str, Any], online_probe: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None
    ) -> None:
        """Reference (unless already built from it), protocol and probe from a cached or freshly fitted state;
        ``online_probe`` maps model outputs to the online probe's logits (None: the run has none)."""
        self.reference = self.reference or IdReference.from_state(state["reference"])
        self.protocol = state["protocol"]
        self.checkpoint_meta = state.get("checkpoint_meta")
        if self.options.probe == "online" and online_probe is not None:
            self.probe = online_probe
        elif state["probe"] is not None:
            logits = LinearProbe(**state["probe"]).logits
            self.probe = lambda out: logits(out["features"])

    def columns(
        self, dataset: ImageSource, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor
    ) -> tuple[dict[str, list], dict[str, torch.Tensor]]:
        """The output columns of one batch, and the tensors the contact sheet ranks by."""
        reference = self._prepared()
        outputs = self.model_outputs(images)
        scores = reference.scores(outputs)
        combined = reference.decision(scores)
        decision = combined if self.options.score == COMBINED else reference.decision(scores, self.options.score)
        flags, flagged_by = reference.flags(decision, self.options.score)
        cols: dict[str, list] = {"index": indices.tolist(), "id": [dataset.item_id(int(i)) for i in indices]}
        if dataset.labels() is not None:
            cols["label"] = labels.tolist()
        if self.probe is not None:
            confidence, predicted = self.probe(outputs).softmax(1).max(1)
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


class ModelScorer(Scorer):
    """Scores with the run's model: fits the reference (or reads it from the cache) and exports the
    model's scoring outputs for :class:`CachedScorer`."""

    def __init__(self, run: str | Path, options: ScoreOptions) -> None:
        from probcl.eval.context import ModelOnData
        from probcl.eval.id_reference import score_names

        super().__init__(run, options)
        self.ctx = ModelOnData(
            self.run,
            options.device,
            options.batch_size,
            max_train=options.max_train,
            data_root=options.data_root,
            seed=options.seed,
            num_workers=options.num_workers,
            unreadable=self.unreadable,
        )
        self.model = self.ctx.model
        # before any fitting: the reference's score names follow from the model's declared capabilities
        self.check_requested(score_names(self.model, options.k, bool(self.model.data_info.num_classes)))

    def dataset(self, spec: str | None, split: Split) -> ImageSource:
        # every image of the scored data (max_train caps what the reference is fitted on, not what is scored)
        return self.ctx.dataset(spec, split, skip_corrupt=True, cap_train=False)

    def batches(self, data: ImageSource, description: str) -> Iterator[tuple[Any, Any, Any, torch.Tensor]]:
        return self.ctx.batches(data, description)

    @property
    def cache_path(self) -> Path:
        return cache_file(self.run, self.model.cfg.data.dataset, self.options)

    def prepare(self) -> None:
        """The ID reference, probe and protocol: from the cache when it holds them for this checkpoint."""
        identity = checkpoint_identity(find_checkpoint(self.run))
        path = self.cache_path
        state = read_cache(path, identity) if self.options.cache else None
        self.cache = {"path": str(path), "hit": state is not None}
        fresh = state is None
        if state is None:
            state = {**self._fit(), "checkpoint": identity, "options": self.options.cache_fields()}
        self.reference = IdReference.from_state(state["reference"])  # the exported outputs depend on it
        if self.options.cache and (fresh or self._network_missing(path, state)):
            state.update(self._export(state))
            self._write_cache(path, state)
        online, device = self.model.online_probe, self.ctx.torch_device
        logits = None if online is None else torch.no_grad()(lambda out: online(out["features"].to(device)).cpu())
        self._use_state(state, logits)

    def model_outputs(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        return self._prepared().outputs(self.ctx, images)

    @staticmethod
    def _network_missing(path: Path, state: dict[str, Any]) -> bool:
        """A cache without a network entry (older versions) or whose exported file is gone: export again.
        (An entry of None records a model that could not be exported: not retried.)"""
        if "network" not in state:
            return True
        return bool(state["network"]) and not (path.parent / state["network"]["file"]).exists()

    def _export(self, state: dict[str, Any]) -> dict[str, Any]:
        """The cache's network entry: the exported outputs (CPU models only), the data they expect, and the
        checkpoint's description; a model that does not export keeps the model path (and says why)."""
        cfg, info = self.model.cfg, self.model.data_info
        entry: dict[str, Any] = {
            "input": {
                "dataset": info.dataset,
                "image_size": info.image_size,
                "channels": info.channels,
                "root": cfg.data.root,
                "download": cfg.data.download,
            },
            "checkpoint_meta": json.loads(json.dumps(self.model.checkpoint_meta, default=str)),
            "network": None,
        }
        if self.ctx.torch_device.type != "cpu":
            entry["network_error"] = "exported on CPU runs only"
            return entry
        fns = self._prepared().model_output_fns(self.ctx)
        if self.model.online_probe is not None:
            embed, online = fns["features"], self.model.online_probe
            fns["probe_logits"] = lambda x: online(embed(x))
        path = cache_file(self.run, cfg.data.dataset, self.options, "network", ".pt2")
        try:
            test = self.ctx.dataset(None, "test")
            sample = test.seeded_subset(min(8, len(test)), 0)
            images = next(iter(self.ctx.batches(sample, "exporting the scoring network")))[0]
            if images is None:
                raise DatasetError("no readable test image to trace the network with")
            entry["network"] = {"file": path.name, "outputs": export_outputs(self.model, fns, images, path)}
        except Exception as e:  # noqa: BLE001 - any model that torch.export cannot handle is scored eagerly
            entry["network_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return entry

    def _write_cache(self, path: Path, state: dict) -> None:
        """Store the fitted reference; a run directory that cannot be written costs speed, not the scores."""
        try:
            atomic_write(path, lambda fh: torch.save(state, fh))
        except RunError as e:
            self.cache["not_stored"] = str(e)
            print(f"probcl score: the fitted reference is not cached ({e})", file=sys.stderr)

    def _fit(self) -> dict[str, Any]:
        """Fit the reference on the training split, calibrate it on the test split, fit the probe."""
        from probcl.eval.id_reference import fit_reference

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
        from probcl.eval.linear import linear_probe

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


class CachedScorer(Scorer):
    """Scores a run from its cache alone: the fitted reference plus the exported scoring network. Needs
    neither the method classes nor PyTorch Lightning; :meth:`open` says whether the cache allows it."""

    def __init__(self, run: Path, options: ScoreOptions, state: dict[str, Any], network: ExportedOutputs) -> None:
        super().__init__(run, options)
        self.state, self.network, self.input = state, network, state["input"]

    @classmethod
    def open(cls, run: str | Path, options: ScoreOptions) -> CachedScorer | None:
        """The cached scorer of ``run`` for ``options``; None when the model is needed: no cache or network
        for this checkpoint and options, caching off, a non-CPU device, or a run without its config."""
        run = Path(run)
        config = RunPaths(run).config
        if not options.cache or not run.is_dir() or not config.exists() or resolve_device(options.device).type != "cpu":
            return None
        import yaml

        try:
            dataset = yaml.safe_load(config.read_text())["data"]["dataset"]
            identity = checkpoint_identity(find_checkpoint(run))
        except Exception:  # noqa: BLE001 - whatever is wrong, the model path reports it properly
            return None
        path = cache_file(run, dataset, options)
        state = read_cache(path, identity)
        if state is None or not state.get("network"):
            return None
        network_file = path.parent / state["network"]["file"]
        try:
            network = load_outputs(network_file, list(state["network"]["outputs"]))
        except Exception:  # noqa: BLE001 - a damaged export: removed, so that the model path exports it again
            network_file.unlink(missing_ok=True)
            return None
        scorer = cls(run, options, state, network)
        scorer.cache = {"path": str(path), "hit": True, "network": str(network_file)}
        return scorer

    def dataset(self, spec: str | None, split: Split) -> ImageSource:
        i = self.input
        root = self.options.data_root or i["root"]
        return load_dataset(
            spec or i["dataset"],
            split,
            root,
            i["download"],
            i["image_size"],
            i["channels"],
            skip_corrupt=True,
            unreadable=self.unreadable,
        )

    def batches(self, data: ImageSource, description: str) -> Iterator[tuple[Any, Any, Any, torch.Tensor]]:
        return image_batches(data, self.options.batch_size, self.options.num_workers, description)

    def prepare(self) -> None:
        online = (lambda out: out["probe_logits"]) if "probe_logits" in self.network.names else None
        self._use_state(self.state, online)
        self.check_requested(self._prepared().score_names)

    def model_outputs(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        return with_input_statistics(self.network(images), images)


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
    scorer: Scorer = CachedScorer.open(run, options) or ModelScorer(run, options)
    dataset = scorer.dataset(data, options.split)  # fail on a bad spec before the reference passes
    scorer.prepare()
    reference = scorer._prepared()
    rows, flagged, flagged_by = 0, 0, Counter[str]()
    extremes = Extremes(options.sheet_size) if html is not None else None

    def write(fh: IO[bytes]) -> None:
        nonlocal rows, flagged
        sink = CsvSink(fh) if fmt == "csv" else ParquetSink(fh)
        for images, labels, indices, skipped_idx in scorer.batches(dataset, f"scoring {dataset.name}"):
            for i in skipped_idx.tolist():
                scorer.unreadable.add(dataset.item_id(i), "cannot be decoded")
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
            raise DatasetError(f"{data}: none of its {len(scorer.unreadable.found)} images could be read")
        sink.close()

    atomic_write(out, write)
    skipped = list(scorer.unreadable.found)
    scorer.unreadable.report(out.with_suffix(".unreadable.txt"))
    thresholds = dict(reference.thresholds)
    protocol = {
        **scorer.protocol,
        "score": options.score,
        "tpr": options.tpr,
        "decision": (
            f"flag when -log p > threshold, p = the tail probability of {options.score}"
            if options.score != COMBINED
            else f"flag when the combined score (-log min p / w over {', '.join(reference.combination)}) "
            f"> threshold; flagged_by lists every score whose own -log (p / w) crossed it"
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
            "checkpoint": scorer.checkpoint_meta,
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
