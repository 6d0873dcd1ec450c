"""Facts written once (issue 43 item 15): the inference batch default, what a probe name means, the DDP gather
helper the docs name."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

from probcl.config import INFERENCE_BATCH_SIZE

ROOT = Path(__file__).resolve().parents[1]


def test_every_model_runner_defaults_to_the_one_inference_batch():
    from probcl.cli import build_parser
    from probcl.eval.context import ModelOnData
    from probcl.methods.base import SSLMethod
    from probcl.methods.capabilities import HasUncertainty
    from probcl.models.inference import Inference
    from probcl.tasks.benchmark.grid import BenchmarkEval
    from probcl.tasks.evaluate import EvaluateSettings
    from probcl.tasks.score.options import ScoreOptions

    defaults = {
        "ScoreOptions": ScoreOptions().batch_size,
        "EvaluateSettings": EvaluateSettings().batch_size,
        "BenchmarkEval": BenchmarkEval().batch_size,
        "ModelOnData": next(f.default for f in dataclasses.fields(ModelOnData) if f.name == "batch_size"),
        "Inference.embed": inspect.signature(Inference.embed).parameters["batch_size"].default,
        "SSLMethod.project": inspect.signature(SSLMethod.project).parameters["batch_size"].default,
        "HasUncertainty.uncertainty": inspect.signature(HasUncertainty.uncertainty).parameters["batch_size"].default,
    }
    assert defaults == dict.fromkeys(defaults, INFERENCE_BATCH_SIZE)
    parser, _ = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    evaluate, score = (next(a for a in commands[c]._actions if a.dest == "batch_size") for c in ("evaluate", "score"))
    # both commands leave the flag unset (None) unless given, so that the options dataclass above holds the default
    for action in (evaluate, score):
        assert f"(default: {INFERENCE_BATCH_SIZE})" in action.help and action.default is None


def test_the_linear_probe_names_are_not_the_score_probe_sources():
    from probcl.eval import context
    from probcl.tasks.score import options

    assert context.LINEAR_PROBES == ("lbfgs", "sgd", "sgd-heldout") and not hasattr(context, "PROBES")
    assert options.PROBE_SOURCES == ("online", "offline", "none") and not hasattr(options, "PROBES")


def test_the_docs_name_existing_gather_helpers_and_one_for_a_loss():
    from probcl.runtime import distributed

    pages = {p: p.read_text() for p in (ROOT / "docs").rglob("*.md") if "results" not in p.parts}
    named = {name for text in pages.values() for name in re.findall(r"\bgather_\w+", text)}
    assert named and all(hasattr(distributed, name) for name in named)
    # the helper a new method's loss gathers its batch with is the same on both pages that tell it
    for page in ("adding-a-method.md", "architecture.md"):
        assert "gather_batch" in pages[ROOT / "docs" / page]
