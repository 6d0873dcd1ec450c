"""Evaluating any encoder: a torchvision ResNet-18 from Python (``probcl.evaluate``) and from its weights file
(``probcl evaluate --weights``), checked against a manual forward pass and scikit-learn."""

from __future__ import annotations

import json
import re

import pytest
import torch
import torchvision
from safetensors.torch import save_file
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler

import probcl
from probcl.cli import main
from probcl.data.loaders import load_dataset
from probcl.errors import ConfigError
from probcl.eval import ModelOnData
from probcl.models.encoder import load_encoder, wrap_encoder

MEAN, STD = [0.3, 0.35, 0.4], [0.3, 0.25, 0.35]  # deliberately per-channel: a swap or a default would show
MAX_TRAIN = 200
FLAGS = [
    "--dataset",
    "digits",
    "--max-train",
    str(MAX_TRAIN),
    "--device",
    "cpu",
    "--batch-size",
    "256",
    "--no-report",
    "--mean",
    ",".join(map(str, MEAN)),
    "--std",
    ",".join(map(str, STD)),
]


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    """A seeded torchvision ResNet-18 (10-class head), its weights file, and the encoder without the head."""
    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None, num_classes=10)
    path = tmp_path_factory.mktemp("weights") / "resnet18.safetensors"
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))
    net.fc = torch.nn.Identity()
    return net.eval(), path


@pytest.fixture(scope="module")
def python_results(resnet):
    return probcl.evaluate(
        resnet[0],
        dataset="digits",
        suites=["linear", "knn"],
        channels=3,
        mean=MEAN,
        std=STD,
        max_train=MAX_TRAIN,
        device="cpu",
        batch_size=256,
    )


def manual_features(net: torch.nn.Module, images: torch.Tensor, bf16: bool = False) -> torch.Tensor:
    """Gray uint8 digits -> RGB, [0, 1], normalized per channel, through the network (under bf16 autocast when
    asked): written out here."""
    x = images.repeat(1, 3, 1, 1).float() / 255.0
    x = (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        return net(x).float()


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_features_are_a_manual_forward_pass(resnet, precision):
    net, _ = resnet
    encoder = wrap_encoder(net, "digits", channels=3, mean=MEAN, std=STD)
    ctx = ModelOnData(None, "cpu", 256, max_train=MAX_TRAIN, foreign=encoder, requested_precision=precision)
    test = load_dataset("digits", "test").subset(torch.arange(48))
    assert test.channels == 1  # the conversion to 3 channels is the context's job
    features, labels = ctx.extract(ctx.dataset().subset(torch.arange(48)), "first test images")
    assert features.shape == (48, 512)
    assert torch.allclose(features, manual_features(net, test.images, bf16=precision == "bf16-mixed"), atol=1e-5)
    assert torch.equal(labels, test.labels())


def test_python_numbers_match_sklearn_on_manual_features(resnet, python_results):
    net, _ = resnet
    test, train = load_dataset("digits", "test"), load_dataset("digits", "train").seeded_subset(MAX_TRAIN, 0)
    ref_test, ref_train = manual_features(net, test.images).numpy(), manual_features(net, train.images).numpy()
    test_y, train_y = test.labels().numpy(), train.labels().numpy()
    knn = KNeighborsClassifier(n_neighbors=20).fit(ref_train, train_y)
    sk_plain = 100 * knn.score(ref_test, test_y)
    assert python_results["knn"]["plain_top1"] == pytest.approx(sk_plain, abs=0.5)  # ties may break differently
    scaler = StandardScaler().fit(ref_train)
    lr = LogisticRegression(max_iter=2000).fit(scaler.transform(ref_train), train_y)
    sk_linear = 100 * lr.score(scaler.transform(ref_test), test_y)
    linear = python_results["linear"]["top1"]
    assert linear > 50 and abs(linear - sk_linear) < 6, (linear, sk_linear)  # chance: 10%
    protocol = python_results["linear"]["protocol"]
    assert protocol["train_images"] == MAX_TRAIN and protocol["checkpoint"]["preprocessing"]["mean"] == MEAN


def test_cli_on_the_weights_file_gives_the_python_numbers(resnet, python_results, tmp_path, capsys):
    net, path = resnet
    out = tmp_path / "resnet-eval"
    assert (
        main(
            [
                "evaluate",
                "--weights",
                str(path),
                "--model.backbone",
                "resnet18",
                "--model.cifar_stem",
                "false",
                "--channels",
                "3",
                "--suite",
                "linear,knn",
                "--out",
                str(out),
                *FLAGS,
            ]
        )
        == 0
    )
    assert f"results merged into {out / 'eval.json'}" in capsys.readouterr().out
    stored = json.loads((out / "eval.json").read_text())
    for suite, metric in (("linear", "top1"), ("knn", "top1"), ("knn", "plain_top1")):
        assert stored[suite][metric] == pytest.approx(python_results[suite][metric], abs=1e-9)
    assert stored["knn"]["protocol"]["checkpoint"]["weights"] == str(path)


def test_torchvision_name_drops_the_classifier_and_takes_rgb(resnet):
    net, path = resnet
    encoder = load_encoder(path, "digits", {"backbone": "torchvision:resnet18"}, mean=MEAN, std=STD).eval()
    assert encoder.data_info.channels == 3
    images = load_dataset("digits", "test").images[:8]
    assert torch.allclose(encoder.embed(images.repeat(1, 3, 1, 1)), manual_features(net, images), atol=1e-5)


W = ["--weights", "{w}", "--dataset", "digits", "--device", "cpu", "--out", "{out}"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--weights", "missing.safetensors", "--model.backbone", "resnet18"],
            "weights file missing.safetensors does not exist",
        ),
        (
            W + ["--model.backbone", "resnet50", "--model.cifar_stem", "false", "--channels", "3"],
            r"weights \S*resnet18\.safetensors .*does not fit the backbone.*shape mismatch",
        ),
        (
            W + ["--model.backbone", "resnet18", "--model.cifar_stem", "false"],
            r"input channels 1; --channels to change\) does not fit",
        ),
        (W + ["--model.backbone", "torchvision:no_such_net"], "unknown torchvision model 'no_such_net'"),
        (W + ["--model.backbone", "timm:no_such_net"], "unknown timm model 'no_such_net'"),
        (W, "name its architecture with --model.backbone"),
        (
            W + ["--model.backbone", "torchvision:resnet18", "--suite", "lipschitz"],
            r"suite lipschitz needs a probcl run \(.*\); encoder resnet18 has embeddings only",
        ),
        (W + ["--model.backbone", "torchvision:resnet18", "--features", "projection"], "no projection head"),
        (W + ["--model.backbone", "torchvision:resnet18", "--mean", "0.5"], "one value per input channel"),
        ([], "evaluate a run .* or an encoder's weights"),
        (["some/run", "--dataset", "digits"], "--dataset: only with --weights"),
    ],
)
def test_bad_input_is_one_line(resnet, argv, message, tmp_path, capsys):
    argv = [a.replace("{w}", str(resnet[1])).replace("{out}", str(tmp_path / "out")) for a in argv]
    assert main(["evaluate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("probcl: config error:"), err
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()


def test_python_api_errors():
    with pytest.raises(ConfigError, match="needs dataset=SPEC"):
        probcl.evaluate(torch.nn.Flatten())
    with pytest.raises(ConfigError, match="dataset: only for an encoder module"):
        probcl.evaluate("runs/some-run", dataset="digits")


def test_all_runs_every_embedding_suite_on_a_foreign_encoder():
    """``all`` = the suites that need only embeddings; their numbers agree where they measure the same thing."""
    from probcl.eval import SUITES
    from probcl.models.backbones import SmallCNN

    torch.manual_seed(0)
    options = {
        "ood": {"datasets": ["inverted"], "max_images": 60, "knn_k": [10], "mc_passes": 2},
        "adversarial": {"max_images": 30, "pgd_steps": 1, "eps": [8]},
        "corruptions": {"max_images": 30, "corruptions": ["contrast"]},
        "fewshot": {"fractions": [0.5]},
        "transfer": {"datasets": ["digits"]},
    }
    results = probcl.evaluate(
        SmallCNN(1, width=4), dataset="digits", suites=["all"], options=options, max_train=MAX_TRAIN, device="cpu"
    )
    expected = {n for n in SUITES.names() if SUITES.get(n).needs_run is None}
    assert set(results) == expected and {"lipschitz", "efficiency"}.isdisjoint(expected)
    assert results["transfer"]["digits"]["top1"] == pytest.approx(results["linear"]["top1"])  # same data, probe
    assert results["corruptions"]["clean_top1"] == pytest.approx(results["adversarial"]["clean_top1"])
    assert results["ood"]["protocol"]["method_uncertainty"] is None  # declares no uncertainty


def test_weights_prefix_picks_a_lightning_state_dicts_backbone(tmp_path):
    from probcl.models.backbones import SmallCNN

    torch.manual_seed(0)
    net = SmallCNN(1, width=4).eval()
    state = {f"backbone.{k}": v for k, v in net.state_dict().items()} | {"projector.0.weight": torch.ones(3, 16)}
    path = tmp_path / "solo.pt"
    torch.save({"state_dict": state}, path)
    model = {"backbone": "cnn", "width": 4}
    encoder = load_encoder(path, "digits", model, mean=[0.5], std=[0.25], prefix="backbone.").eval()
    x = torch.randint(0, 256, (4, 1, 28, 28), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.allclose(encoder.embed(x), net((x.float() / 255 - 0.5) / 0.25), atol=1e-6)
    with pytest.raises(ConfigError, match=r"missing \(30\): features\.0\.weight.*unexpected \(31\): backbone\."):
        load_encoder(path, "digits", model)  # without the prefix nothing fits
    with pytest.raises(ConfigError, match="has no tensors named encoder\\.\\.\\."):
        load_encoder(path, "digits", model, prefix="encoder.")
