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

from probcl.config import INFERENCE_BATCH_SIZE, AtLeast, NonNegative, OneOf, OnUnreadable, Seed, from_dict
from probcl.core.io import atomic_write_json, read_json
from probcl.core.layout import RunPaths, find_checkpoint, read_evaluations, results_folder
from probcl.core.names import FEATURE_LAYERS, PRECISIONS
from probcl.core.run_lock import RunLock
from probcl.data.unreadable import ON_UNREADABLE_OPTION, UnreadableFiles
from probcl.errors import ConfigError, ProbclError
from probcl.eval import SUITES, ModelOnData
from probcl.eval.provenance import describe, encoder_record, legacy_same_run, model_tag, same_model
from probcl.models.encoder import ForeignEncoder, wrap_encoder
from probcl.report.tables import scalar_metrics


@dataclass
class EvaluateSettings:
    """How suites are evaluated, whatever is evaluated (a run or an encoder); checked by
    :func:`~probcl.config.from_dict` (``probcl evaluate``'s flags, :func:`evaluate`'s keyword arguments)."""

    device: str = "auto"  # auto (CUDA when present), cpu, cuda, cuda:1, ...
    batch_size: Annotated[int, AtLeast(1)] = INFERENCE_BATCH_SIZE  # the inference batch: images per forward pass
    # the features measured: backbone, projection, or pixels (the raw-pixel baseline)
    feature_layer: Annotated[str, OneOf(FEATURE_LAYERS)] = "backbone"
    max_train: Annotated[int | None, AtLeast(1)] = None  # seeded subset of training images for probes and kNN
    data_root: str | None = None  # default: the run's data.root, $PROBCL_DATA
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # {suite: {key: value}} (``--option``)
    seed: Seed = 0  # seed of the max_train subset and of the offline probe
    num_workers: Annotated[int, NonNegative] = 0  # image-decoding processes for folder datasets
    figures: bool = True  # draw the figures of the suites run into the output folder's plots/
    report: bool = True  # with figures: rewrite report.md and report.html
    on_unreadable: OnUnreadable = "skip"  # image files that cannot be read: skip (listed) or error (all named)
    # the precision of feature extraction: None = the run's train.precision (auto for an encoder), or one of these
    precision: Annotated[str | None, OneOf(PRECISIONS)] = None
    # keep the features computed in RUN/feature-cache/ for later evaluations of the same checkpoint (about 2.7 kB an
    # image for 1152-d bf16 features); a benchmark evaluating each cell once turns it off
    store_features: bool = True

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
            self.precision,
            self.store_features,
        )


def evaluate_run(run_dir: str | Path, suites: list[str], settings: EvaluateSettings | None = None) -> Evaluation:
    """Run ``suites`` (names, or ``all``) and merge the results into the run's eval.json.

    eval.json holds one checkpoint's results: those of an earlier checkpoint (the run trained on since) are moved
    to RUN/eval-HASH8.json first, with a note (see :func:`keep_one_model`). With ``all``, a suite that cannot run
    here (unlabeled data, too few labels, no transfer target, ...) is skipped and listed with its reason in the
    returned :class:`Evaluation`'s ``skipped``; a named suite that cannot run stops with its error.
    Results are keyed ``suite`` for backbone features and ``suite@layer`` for other layers.
    Suite names and ``settings.options`` are validated before any work. With ``settings.figures``, the figures
    of the suites run are drawn into RUN/plots (see :mod:`probcl.report.figures`); with ``settings.report`` as
    well, RUN/report.md and RUN/report.html are rewritten from everything the run holds (see :func:`write_report`).
    """
    s = settings or EvaluateSettings()
    names = SUITES.names() if suites == ["all"] else suites
    parsed = SUITES.parse_all(names, s.options)
    find_checkpoint(run_dir)  # clear error before any work
    out = results_folder(run_dir)  # a checkpoint file's results go to its run (or its folder)
    with RunLock(out, "evaluate"):
        return _evaluate(out, names, parsed, s.context(Path(run_dir)), s, suites == ["all"])


def evaluate_encoder(
    encoder: ForeignEncoder,
    suites: list[str],
    out: str | Path | None = None,
    settings: EvaluateSettings | None = None,
) -> Evaluation:
    """Run ``suites`` on a foreign encoder (``all``: every suite that needs only embeddings, those that cannot
    run here skipped as in :func:`evaluate_run`); with ``out``, merge the results into OUT/eval.json and draw their
    figures into OUT/plots. A suite that needs a probcl run (``Suite.needs_run``) is refused before any work, and
    so is an ``out`` whose eval.json holds results of other weights or preprocessing (see
    :func:`keep_one_model`; :func:`encoder_folder` gives each its own folder)."""
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
    folder = None if out is None else Path(out)
    with RunLock(folder, "evaluate") if folder is not None else nullcontext():
        return _evaluate(folder, names, parsed, ctx, s, suites == ["all"])


def evaluate(
    encoder: nn.Module | str | Path,
    dataset: str | None = None,
    suites: str | Sequence[str] = ("linear", "knn"),
    *,
    mean: list[float] | None = None,
    std: list[float] | None = None,
    image_size: int | None = None,
    channels: int | None = None,
    name: str | None = None,
    out: str | Path | None = None,
    **settings: Any,
) -> Evaluation:
    """Evaluate any encoder, or a probcl run, with the evaluation suites; returns ``{suite: result}`` (an
    :class:`Evaluation`: also the suites ``all`` skipped, with their reasons, and notes).

    ``encoder``: an ``nn.Module`` mapping normalized (N, C, H, W) images to features (flattened to (N, d);
    put in eval mode and moved to ``device``), evaluated on ``dataset`` (a spec as for ``--dataset``) with
    inputs conformed to ``channels`` x ``image_size`` and normalized by ``mean``/``std`` (defaults: the
    dataset's; see :func:`probcl.models.encoder.preprocessing`); or a probcl run directory / .ckpt, evaluated
    on its training data as ``probcl evaluate RUN`` does (results merged into RUN/eval.json).
    ``suites``: names or ``["all"]``; a string is one name or several, comma-separated, as ``--suite`` takes them
    (``"knn"``, ``"linear,knn"``, ``"all"``). ``settings``: the fields of :class:`EvaluateSettings` (``device``,
    ``batch_size``, ``feature_layer``, ``max_train``, ``data_root``, ``options`` = ``{suite: {key: value}}`` as
    ``--option`` gives them, ``seed``, ``num_workers``, ``figures``, ``report``, ``on_unreadable``: ``skip`` or
    ``error`` for image files that cannot be read, see :mod:`probcl.data.unreadable`), checked before any work.
    With ``out`` (a folder), the results of an encoder are merged into OUT/eval.json and figures drawn
    into OUT/plots; without, nothing is written.
    """
    suites = suite_list(suites)
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


def suite_list(suites: str | Sequence[str]) -> list[str]:
    """Suite names as a list: a string is one name or several, comma-separated (``"linear,knn"``, ``"all"``)."""
    names = [name.strip() for name in suites.split(",") if name.strip()] if isinstance(suites, str) else list(suites)
    if not names:
        raise ConfigError(f"no suite named in {suites!r}; name one or more, comma-separated (`probcl list suites`)")
    return names


class Evaluation(dict[str, dict]):
    """``{result key: result}`` of the suites run (and, in a folder, of those run before on the same model), with
    ``skipped``: ``{suite: reason}`` of the suites ``all`` could not run here, and ``notes``: what the user should
    know about how the numbers were made (results of an earlier checkpoint moved aside, a streamed test split
    decoded into memory)."""

    def __init__(self, results: dict[str, dict], skipped: dict[str, str], notes: list[str]) -> None:
        super().__init__(results)
        self.skipped, self.notes = skipped, notes


def _evaluate(
    out_dir: Path | None,
    names: list[str],
    parsed: dict[str, Any],
    ctx: ModelOnData,
    settings: EvaluateSettings,
    skip_unavailable: bool = False,
) -> Evaluation:
    """Run the suites on ``ctx``; with ``out_dir`` (a run, or a foreign encoder's folder), merge the results
    into its eval.json (one model's results only: :func:`keep_one_model`) and draw their figures into its plots/.
    ``skip_unavailable``: a suite that stops with a :class:`ProbclError` is skipped and listed, the others run.
    Skipped unreadable image files are listed in OUT/unreadable.txt (one line says how many)."""
    feature_layer, figures, report = settings.feature_layer, settings.figures, settings.report
    paths = RunPaths(out_dir) if out_dir is not None else None
    results = keep_one_model(paths, ctx) if paths else {}
    skipped: dict[str, str] = {}
    for name in names:
        start = time.perf_counter()
        try:
            result = SUITES.get(name).run(ctx, parsed[name])
        except ProbclError as e:
            if not skip_unavailable:
                raise
            skipped[name] = str(e)
            continue
        result.setdefault("protocol", {})["seconds"] = round(time.perf_counter() - start, 2)
        result["protocol"]["checkpoint"] = ctx.checkpoint_meta
        results[result_key(name, feature_layer)] = result
        if paths:
            atomic_write_json(paths.eval, results)
    ctx.unreadable.report(paths.unreadable if paths else None)
    if len(skipped) == len(names):
        reasons = "; ".join(f"{name}: {reason}" for name, reason in skipped.items())
        raise ConfigError(f"no suite could run on {ctx.name}: {reasons}")
    ran = [name for name in names if name not in skipped]
    if figures and paths and report:
        write_report(paths, ctx)
    elif figures and paths:
        from probcl.report.figures import render_run_figures

        render_run_figures(
            {name: results[result_key(name, feature_layer)] for name in ran},
            result_key(ctx.method, feature_layer),
            paths.plots,
        )
    return Evaluation({k: results[k] for k in results if k.split("@")[0] in ran}, skipped, ctx.notes)


def keep_one_model(paths: RunPaths, ctx: ModelOnData) -> dict[str, dict]:
    """The results in ``paths``' eval.json, all of them of the model ``ctx`` evaluates (same content hash and
    preprocessing, :func:`~probcl.eval.provenance.same_model`), so that new results never join another model's.

    A run's results of an earlier checkpoint are moved to RUN/eval-HASH8.json (HASH8 naming that checkpoint and
    preprocessing) with a note naming the suites to re-run; a foreign encoder's folder that holds other weights'
    results is refused (one ConfigError naming the fix), before any work."""
    results = read_evaluations(paths.eval)
    current = ctx.checkpoint_meta

    def recorded(result: dict) -> Any:
        return result.get("protocol", {}).get("checkpoint")

    def same(result: dict) -> bool:
        return same_model(recorded(result), current) or (
            ctx.foreign is None and legacy_same_run(recorded(result), current)
        )

    others = {key: result for key, result in results.items() if not same(result)}
    if not others:
        return results
    first = recorded(next(iter(others.values())))
    if ctx.foreign is not None:
        raise ConfigError(
            f"{paths.eval} holds results of other weights or preprocessing ({describe(first)}), not of "
            f"{describe(current)}; results of two models are never merged: evaluate into another folder (without "
            f"--out each weights file and preprocessing gets its own, {encoder_folder(ctx.foreign)}) or delete "
            f"{paths.eval}"
        )
    moved: dict[Path, dict[str, dict]] = {}
    for key, result in others.items():
        moved.setdefault(paths.root / f"eval-{model_tag(recorded(result) or {})}.json", {})[key] = result
    for file, group in moved.items():  # written before eval.json drops them: nothing is lost at any moment
        atomic_write_json(file, {**read_json(file, {}), **group})
    kept = {key: result for key, result in results.items() if key not in others}
    atomic_write_json(paths.eval, kept)
    suites = sorted({key.split("@")[0] for key in others})
    ctx.note(
        f"the checkpoint changed since {', '.join(sorted(others))} were evaluated ({describe(first)}); "
        f"those results moved to {', '.join(f.name for f in moved)} and eval.json holds only {describe(current)}'s: "
        f"re-run them with --suite {','.join(suites)}"
    )
    return kept


def encoder_folder(encoder: ForeignEncoder) -> Path:
    """The default folder of a foreign encoder's results: ``runs/eval-<name>-<hash8>``, the hash naming its
    weights' content and its preprocessing, so that other weights (or the same on other data) get another."""
    return Path("runs") / f"eval-{encoder.name}-{model_tag(encoder_record(encoder))}"


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
    """Rows (suite, metric, value) for printing: a suite's declared summary (``ood``: per set, the combined and
    the best single score), else all of its scalar results."""
    rows: list[tuple[str, ...]] = []
    for key, result in results.items():
        summary = SUITES.get(key.split("@")[0]).summary or scalar_metrics
        rows += [(key, metric, f"{value:.4g}") for metric, value in summary(result).items()]
    return rows
