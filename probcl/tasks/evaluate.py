"""`probcl evaluate`: run evaluation suites on a run, or on any encoder, and merge their results into eval.json."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from torch import nn

from probcl.config import AtLeast, NonNegative, OneOf, OnUnreadable, Seed, from_dict
from probcl.core.io import atomic_write_json, read_json
from probcl.core.layout import RunPaths, find_checkpoint
from probcl.core.run_lock import RunLock
from probcl.data.unreadable import ON_UNREADABLE_OPTION, UnreadableFiles
from probcl.errors import ConfigError
from probcl.eval import SUITES, ModelOnData
from probcl.eval.context import FEATURE_LAYERS
from probcl.models.encoder import ForeignEncoder, wrap_encoder
from probcl.report.tables import scalar_metrics


@dataclass
class EvaluateSettings:
    """How suites are evaluated, whatever is evaluated (a run or an encoder); checked by
    :func:`~probcl.config.from_dict` (``probcl evaluate``'s flags, :func:`evaluate`'s keyword arguments)."""

    device: str = "auto"  # auto (CUDA when present), cpu, cuda, cuda:1, ...
    batch_size: Annotated[int, AtLeast(1)] = 512  # the inference batch: images per forward pass
    feature_layer: Annotated[str, OneOf(FEATURE_LAYERS)] = "backbone"
    max_train: Annotated[int | None, AtLeast(1)] = None  # seeded subset of training images for probes and kNN
    data_root: str | None = None  # default: the run's data.root, $PROBCL_DATA
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # {suite: {key: value}} (``--option``)
    seed: Seed = 0  # seed of the max_train subset and of the offline probe
    num_workers: Annotated[int, NonNegative] = 0  # image-decoding processes for folder datasets
    figures: bool = True  # draw the figures of the suites run into the output folder's plots/
    report: bool = True  # with figures: rewrite report.md and report.html
    on_unreadable: OnUnreadable = "skip"  # image files that cannot be read: skip (listed) or error (all named)

    def context(self, run_dir: Path | None, foreign: ForeignEncoder | None = None) -> ModelOnData:
        """The model (a run's, or ``foreign``) on its data, with these settings."""
        return ModelOnData(
            run_dir,
            self.device,
            self.batch_size,
            self.feature_layer,
            self.max_train,
            self.data_root,
            self.seed,
            self.num_workers,
            foreign,
            UnreadableFiles(self.on_unreadable, ON_UNREADABLE_OPTION),
        )


def evaluate_run(run_dir: str | Path, suites: list[str], settings: EvaluateSettings | None = None) -> dict:
    """Run ``suites`` (names, or ``all``) and merge the results into the run's eval.json.

    Results are keyed ``suite`` for backbone features and ``suite@layer`` for other layers.
    Suite names and ``settings.options`` are validated before any work. With ``settings.figures``, the figures
    of the suites run are drawn into RUN/plots (see :mod:`probcl.report.figures`); with ``settings.report`` as
    well, RUN/report.md and RUN/report.html are rewritten from everything the run holds (see :func:`write_report`).
    """
    s = settings or EvaluateSettings()
    names = SUITES.names() if suites == ["all"] else suites
    parsed = SUITES.parse_all(names, s.options)
    find_checkpoint(run_dir)  # clear error before any work
    with RunLock(run_dir, "evaluate") if Path(run_dir).is_dir() else nullcontext():
        return _evaluate(Path(run_dir), names, parsed, s.context(Path(run_dir)), s)


def evaluate_encoder(
    encoder: ForeignEncoder,
    suites: list[str],
    out: str | Path | None = None,
    settings: EvaluateSettings | None = None,
) -> dict:
    """Run ``suites`` on a foreign encoder (``all``: every suite that needs only embeddings); with ``out``, merge
    the results into OUT/eval.json and draw their figures into OUT/plots. A suite that needs a probcl run
    (``Suite.needs_run``) is refused before any work."""
    s = settings or EvaluateSettings()
    names = [n for n in SUITES.names() if not SUITES.get(n).needs_run] if suites == ["all"] else suites
    parsed = SUITES.parse_all(names, s.options)
    for name in names:
        reason = SUITES.get(name).needs_run
        if reason:
            raise ConfigError(
                f"suite {name} needs a probcl run ({reason}); encoder {encoder.name} has embeddings "
                f"only. Suites for any encoder: "
                f"{', '.join(n for n in SUITES.names() if not SUITES.get(n).needs_run)}"
            )
    ctx = s.context(None, encoder)
    with RunLock(out, "evaluate") if out is not None else nullcontext():
        return _evaluate(None if out is None else Path(out), names, parsed, ctx, s)


def evaluate(
    encoder: nn.Module | str | Path,
    dataset: str | None = None,
    suites: Sequence[str] = ("linear", "knn"),
    *,
    mean: list[float] | None = None,
    std: list[float] | None = None,
    image_size: int | None = None,
    channels: int | None = None,
    name: str | None = None,
    out: str | Path | None = None,
    **settings: Any,
) -> dict:
    """Evaluate any encoder, or a probcl run, with the evaluation suites; returns ``{suite: result}``.

    ``encoder``: an ``nn.Module`` mapping normalized (N, C, H, W) images to features (flattened to (N, d);
    put in eval mode and moved to ``device``), evaluated on ``dataset`` (a spec as for ``--dataset``) with
    inputs conformed to ``channels`` x ``image_size`` and normalized by ``mean``/``std`` (defaults: the
    dataset's; see :func:`probcl.models.encoder.preprocessing`); or a probcl run directory / .ckpt, evaluated
    on its training data as ``probcl evaluate RUN`` does (results merged into RUN/eval.json).
    ``suites``: names or ``["all"]``. ``settings``: the fields of :class:`EvaluateSettings` (``device``,
    ``batch_size``, ``feature_layer``, ``max_train``, ``data_root``, ``options`` = ``{suite: {key: value}}`` as
    ``--option`` gives them, ``seed``, ``num_workers``, ``figures``, ``report``, ``on_unreadable``: ``skip`` or
    ``error`` for image files that cannot be read, see :mod:`probcl.data.unreadable`), checked before any work.
    With ``out`` (a folder), the results of an encoder are merged into OUT/eval.json and figures drawn
    into OUT/plots; without, nothing is written.
    """
    suites = list(suites)
    checked: EvaluateSettings = from_dict(EvaluateSettings, settings)
    if not isinstance(encoder, nn.Module):
        given = {
            "dataset": dataset,
            "mean": mean,
            "std": std,
            "image_size": image_size,
            "channels": channels,
            "name": name,
            "out": out,
        }
        stray = [key for key, value in given.items() if value is not None]
        if stray:
            raise ConfigError(
                f"{', '.join(stray)}: only for an encoder module; run {encoder} is evaluated on its "
                f"training data with its own preprocessing, into its eval.json"
            )
        return evaluate_run(encoder, suites, checked)
    if isinstance(encoder, ForeignEncoder):
        if any(v is not None for v in (dataset, mean, std, image_size, channels, name)):
            raise ConfigError(
                f"encoder {encoder.name} already has its dataset and preprocessing; pass its module to set them"
            )
    else:
        if dataset is None:
            raise ConfigError("evaluating an encoder module needs dataset=SPEC (e.g. 'digits', 'folder:/path')")
        encoder = wrap_encoder(encoder, dataset, channels, image_size, mean, std, name, checked.data_root)
    return evaluate_encoder(encoder, suites, out, checked)


def _evaluate(
    out_dir: Path | None, names: list[str], parsed: dict[str, Any], ctx: ModelOnData, settings: EvaluateSettings
) -> dict:
    """Run the suites on ``ctx``; with ``out_dir`` (a run, or a foreign encoder's folder), merge the results
    into its eval.json and draw their figures into its plots/. Skipped unreadable image files are listed in
    OUT/unreadable.txt (one line says how many)."""
    feature_layer, figures, report = settings.feature_layer, settings.figures, settings.report
    paths = RunPaths(out_dir) if out_dir is not None else None
    results = read_json(paths.eval, {}) if paths else {}
    for name in names:
        start = time.perf_counter()
        result = SUITES.get(name).run(ctx, parsed[name])
        result.setdefault("protocol", {})["seconds"] = round(time.perf_counter() - start, 2)
        result["protocol"]["checkpoint"] = ctx.checkpoint_meta
        results[result_key(name, feature_layer)] = result
        if paths:
            atomic_write_json(paths.eval, results)
    ctx.unreadable.report(paths.unreadable if paths else None)
    if figures and paths and report:
        write_report(paths, ctx)
    elif figures and paths:
        from probcl.report.figures import render_run_figures

        render_run_figures(
            {name: results[result_key(name, feature_layer)] for name in names},
            result_key(ctx.method, feature_layer),
            paths.plots,
        )
    return {k: results[k] for k in results if k.split("@")[0] in names}


def result_key(suite: str, feature_layer: str) -> str:
    """The key of a suite's result in eval.json: ``suite``, or ``suite@layer`` for non-backbone features."""
    return suite if feature_layer == "backbone" else f"{suite}@{feature_layer}"


def write_report(paths: RunPaths, ctx: ModelOnData) -> tuple[Path, Path]:
    """RUN/report.md and RUN/report.html from all of RUN/eval.json and RUN/metrics.jsonl, with the embedding map
    of the run's backbone features, whatever ``--features`` this call evaluated (kept in
    RUN/plots/embedding-map.json; recomputed when the checkpoint or seed changed)."""
    from probcl.eval.embedding_map import embedding_map
    from probcl.report.run_report import write_run_report

    cache = paths.plots / "embedding-map.json"
    wanted = json.loads(
        json.dumps({"checkpoint": ctx.checkpoint_meta, "feature_layer": "backbone", "seed": ctx.seed}, default=str)
    )
    embedding = read_json(cache)
    if embedding is None or any(embedding["protocol"].get(k) != v for k, v in wanted.items()):
        embedding = embedding_map(ctx, seed=ctx.seed)
        embedding["protocol"].update(wanted)
        atomic_write_json(cache, embedding)
    return write_run_report(paths.root, embedding, ctx.method)


def format_table(results: dict) -> list[tuple[str, ...]]:
    """Rows (suite, metric, value) of the scalar results, for printing."""
    return [
        (suite, metric, f"{value:.4g}")
        for suite, result in results.items()
        for metric, value in scalar_metrics(result).items()
    ]
