"""probcl evaluate: run evaluation suites on a run, or on any encoder's weights, merge the results into eval.json,
print a table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from probcl.commands._options import add_inference_flags, options_from_flags, positive_int
from probcl.config import ModelConfig
from probcl.core.names import FEATURE_LAYERS, PRECISIONS
from probcl.core.progress import print_table

if TYPE_CHECKING:
    from probcl.tasks.evaluate import EvaluateSettings, Evaluation

NAME = "evaluate"
HELP = (
    "run evaluation suites on a run (results merged into RUN/eval.json, figures into RUN/plots), or on any "
    "encoder's weights (--weights FILE --model.backbone NAME; results into --out)"
)
ACCEPTS_OVERRIDES = False  # no --section.key VALUE config overrides
AFTER_A_STOP = "run the same command again (the suites that finished are saved in eval.json already)"
MODEL_KEYS = {  # --model.KEY: the architecture of --weights (ModelConfig keys; default: the .json sidecar's)
    "backbone": "architecture of --weights: cnn, resnet18, resnet50, timm:NAME or torchvision:NAME (default: the "
    "weights' .json sidecar's; required without one)",
    "width": "cnn: base width",
    "pool": "cnn: pooled grid size",
    "norm": "bn or none",
    "act": "relu or leaky_relu",
    "cifar_stem": "resnet18/50: 3x3 stride-1 stem, no max-pool (false for torchvision ResNet weights)",
}


def _feature_layers(text: str) -> list[str]:
    layers = [layer.strip() for layer in text.split(",") if layer.strip()]
    for layer in layers:
        if layer not in FEATURE_LAYERS:
            choices = ", ".join(map(repr, FEATURE_LAYERS))
            raise argparse.ArgumentTypeError(f"invalid choice: {layer!r} (choose from {choices}, comma-separated)")
    if not layers or len(set(layers)) < len(layers):
        raise argparse.ArgumentTypeError(f"expected distinct feature layers separated by commas, got {text!r}")
    return layers


def _floats(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="?", help="run directory (or .ckpt); or use --weights")
    p.add_argument(
        "--suite", default="linear,knn", help="comma-separated suite names, or 'all' (see `probcl list suites`)"
    )
    p.add_argument(
        "--features",
        dest="feature_layer",
        type=_feature_layers,
        metavar="LAYER[,LAYER]",
        help="feature layer(s): backbone, projection, or pixels (the raw-pixel baseline); several, comma-separated "
        "(e.g. backbone,pixels), are evaluated one after the other in this one process (default: backbone)",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="SUITE.KEY=VALUE",
        help="suite option, e.g. --option ood.datasets=digits,mnist (repeatable; options: docs/evaluation.md)",
    )
    p.add_argument(
        "--max-train",
        type=int,
        help="seeded subset of this many training images for probes and kNN (default: all of them)",
    )
    p.add_argument("--seed", type=int, help="seed of the --max-train subset and the offline probe (default: 0)")
    add_inference_flags(p)
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="precision of feature extraction (default: the run's train.precision, as it trained; auto for --weights)",
    )
    p.add_argument("--data-root", help="data root (default: the run's data.root, $PROBCL_DATA)")
    p.add_argument(
        "--on-unreadable",
        default="skip",
        choices=["skip", "error"],
        help="image files that cannot be read: skip them (one line gives the count, RUN/unreadable.txt the list) "
        "or stop before any work, listing them all (default: skip)",
    )
    p.add_argument(
        "--no-report",
        dest="report",
        action="store_false",
        help="skip RUN/report.md and RUN/report.html (and the t-SNE embedding map they show); "
        "the figures of the suites run are still drawn",
    )
    p.add_argument(
        "--no-feature-cache",
        dest="store_features",
        action="store_false",
        help="do not keep the computed features in RUN/feature-cache/ (they are kept by default, ~2.7 kB an image "
        "for 1152-d features, so a second evaluation of the checkpoint skips the encoder; a stored cache is "
        "still read)",
    )
    enc = p.add_argument_group("any encoder (instead of RUN)")
    enc.add_argument(
        "--weights",
        help="backbone state_dict (.safetensors, .pt, .pth, .bin): `probcl export`, "
        "torchvision, timm or solo-learn weights (default: none; evaluate RUN)",
    )
    for key, text in MODEL_KEYS.items():
        if "default" not in text:
            text += f" (default: the weights' .json sidecar's, else {getattr(ModelConfig(), key)})"
        enc.add_argument(f"--model.{key}", dest=f"model_{key}", default=None, metavar="VALUE", help=text)
    enc.add_argument(
        "--weights-prefix",
        default=None,
        metavar="PREFIX",
        help="use only the tensors named PREFIX..., without it (e.g. 'backbone.'; default: every tensor)",
    )
    enc.add_argument("--dataset", default=None, help="evaluation dataset spec (default: fashion-mnist)")
    enc.add_argument(
        "--mean",
        type=_floats,
        default=None,
        help="input normalisation mean per channel, e.g. "
        "0.485,0.456,0.406 (default: the .json sidecar's, else the dataset's)",
    )
    enc.add_argument(
        "--std",
        type=_floats,
        default=None,
        help="input normalisation std per channel (default: the .json sidecar's, else the dataset's)",
    )
    enc.add_argument("--image-size", type=positive_int, default=None, help="input size (default: the dataset's)")
    enc.add_argument(
        "--channels",
        type=positive_int,
        default=None,
        help="input channels (default: the sidecar's, 3 for torchvision:, else the dataset's)",
    )
    enc.add_argument(
        "--out",
        default=None,
        help="folder for eval.json and plots/ (default: runs/eval-<weights name>-<hash8>, the hash of the weights' "
        "content and preprocessing; a folder with other weights' results is refused)",
    )


def _merged(evaluations: list[Evaluation], per_layer: list[EvaluateSettings]) -> Evaluation:
    """One :class:`~probcl.tasks.evaluate.Evaluation` of several feature layers' results, skipped suites (keyed as
    their results are: ``suite@layer`` beyond the backbone) and notes."""
    from probcl.tasks.evaluate import Evaluation, result_key

    results: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    notes: list[str] = []
    for evaluation, settings in zip(evaluations, per_layer, strict=True):
        results.update(evaluation)
        skipped.update({result_key(suite, settings.feature_layer): why for suite, why in evaluation.skipped.items()})
        notes += [note for note in evaluation.notes if note not in notes]
    return Evaluation(results, skipped, notes)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.core.typed_config import parse_suite_options
    from probcl.errors import ConfigError
    from probcl.tasks.evaluate import EvaluateSettings, suite_list

    suites = suite_list(args.suite)
    layers = args.feature_layer or [None]
    per_layer = [  # one EvaluateSettings per feature layer, all checked before any work; the last writes the report
        options_from_flags(
            EvaluateSettings,
            argparse.Namespace(**{**vars(args), "feature_layer": layer}),
            {
                "batch_size": "--inference-batch-size",
                "feature_layer": "--features",
                "report": "--no-report",
                "store_features": "--no-feature-cache",
            },
            options=parse_suite_options(args.option),
            report=args.report and i == len(layers) - 1,
        )
        for i, layer in enumerate(layers)
    ]
    settings = per_layer[0]
    given = vars(args)
    model = {key: given[f"model_{key}"] for key in MODEL_KEYS if given[f"model_{key}"] is not None}
    encoder_args = {
        "--weights": args.weights,
        "--weights-prefix": args.weights_prefix,
        "--dataset": args.dataset,
        "--mean": args.mean,
        "--std": args.std,
        "--image-size": args.image_size,
        "--channels": args.channels,
        "--out": args.out,
        **{f"--model.{k}": v for k, v in model.items()},
    }
    if (args.run is None) == (args.weights is None):
        raise ConfigError(
            "evaluate a run (probcl evaluate RUN) or an encoder's weights (--weights FILE "
            "--model.backbone NAME), one of them"
        )
    if args.run is not None:
        from probcl.tasks.evaluate import evaluate_run, format_table

        stray = [flag for flag, value in encoder_args.items() if value is not None]
        if stray:
            transfer = (
                f"; to measure it on another labelled dataset, use the transfer suite: --suite transfer --option "
                f"transfer.datasets={args.dataset}"
                if args.dataset
                else ""
            )
            raise ConfigError(
                f"{', '.join(stray)}: only with --weights; a run is evaluated on its training data "
                f"with its own architecture and preprocessing{transfer}"
            )
        results = _merged([evaluate_run(args.run, suites, layer) for layer in per_layer], per_layer)
        out = Path(args.run)
        title = f"evaluation of {args.run}"
    else:
        from probcl.config import DataConfig
        from probcl.models.encoder import load_encoder
        from probcl.tasks.evaluate import encoder_folder, evaluate_encoder, format_table

        encoder = load_encoder(
            args.weights,
            args.dataset or DataConfig().dataset,
            model,
            args.channels,
            args.image_size,
            args.mean,
            args.std,
            settings.data_root,
            args.weights_prefix,
        )
        out = Path(args.out) if args.out else encoder_folder(encoder)
        results = _merged([evaluate_encoder(encoder, suites, out, layer) for layer in per_layer], per_layer)
        title = f"evaluation of {args.weights} on {encoder.data_info.dataset}"
    print_table(title, ("suite", "metric", "value"), format_table(results))
    print(f"results merged into {out / 'eval.json'}")
    if args.report:
        print(f"report in {out / 'report.md'} and {out / 'report.html'}")
    for note in results.notes:
        print(f"note: {note}")
    if results.skipped:
        print(f"skipped {len(results.skipped)} suite(s) that cannot run here:")
        for suite, reason in results.skipped.items():
            print(f"  {suite}: {reason}")
    return 0
