"""The public inference entry point (``embed`` / ``project`` / ``uncertainty``): no autograd history, batches of
``batch_size``, the model's device, and tensors / PIL images / files giving the same result; the differentiable
one-batch hooks keep their gradients for training and attacks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from probcl.config import load_config
from probcl.errors import ConfigError, DatasetError
from probcl.methods import METHODS, SSLMethod
from probcl.models.inference import as_image_batch
from tests.conftest import TINY_MODEL

MEAN, STD = 0.3, 0.25
DATA_INFO = dict(dataset="digits", channels=1, image_size=12, num_classes=None, mean=[MEAN], std=[STD])


def build(method: str) -> SSLMethod:
    """A seeded, untrained ``method`` in eval mode with random BatchNorm statistics and head (so that every
    output, TaU's u included, differs from image to image)."""
    torch.manual_seed(0)
    overrides = {
        "method": method,
        **TINY_MODEL,
    }
    model = METHODS.get(method)(load_config(None, overrides), DATA_INFO)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm1d | torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0, 0.5)
    return model.eval()


def images(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (n, 1, 12, 12), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def reference_features(model: SSLMethod, x: torch.Tensor) -> torch.Tensor:
    """Backbone features computed by hand: (x / 255 - mean) / std through the backbone, one pass, no grad."""
    with torch.no_grad():
        return model.backbone((x.double() / 255 - MEAN).div(STD).float())


def test_outputs_have_no_autograd_history_while_the_hooks_keep_it():
    model = build("tau-simclr")
    x = images(6)
    for out in (model.embed(x), model.project(x), model.uncertainty(x)):
        assert out.grad_fn is None and not out.requires_grad and not out.is_inference()
    weight = torch.randn(model.feature_dim, 2, requires_grad=True)
    (model.embed(x) @ weight).sum().backward()  # an ordinary tensor: later autograd code may use it
    assert weight.grad is not None
    pixels = (x.float() / 255).requires_grad_(True)  # what an attack does: gradients w.r.t. the input
    model.embed_batch(pixels).sum().backward()
    assert pixels.grad is not None and pixels.grad.abs().sum() > 0
    assert model.uncertainty_batch(x, "neg_u").grad_fn is not None
    assert model(x).grad_fn is not None  # forward is the differentiable hook too


def test_batches_match_one_plain_forward_pass_and_respect_batch_size():
    model = build("tau-simclr")
    x = images(10)
    expected = reference_features(model, x)
    sizes: list[int] = []
    model.backbone.register_forward_hook(lambda module, inputs, output: sizes.append(len(inputs[0])))
    torch.testing.assert_close(model.embed(x, batch_size=4), expected, atol=1e-5, rtol=1e-5)
    assert sizes == [4, 4, 2]
    torch.testing.assert_close(model.embed(x), expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        head = model.projector(expected)
    torch.testing.assert_close(model.project(x, batch_size=3), head[:, :-1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.uncertainty(x, batch_size=3), -head[:, -1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        model.uncertainty(x, "neg_u_squared", batch_size=7), -head[:, -1].square(), atol=1e-5, rtol=1e-5
    )
    assert model.uncertainty(x).unique().numel() == len(x)  # a real per-image score, not a constant
    assert model.embed(x[:0]).shape == (0, model.feature_dim)


def test_pil_images_files_and_float_tensors_give_the_tensor_result(tmp_path):
    model = build("simclr")
    x = images(5)
    expected = model.embed(x)
    pils = [Image.fromarray(img[0].numpy()) for img in x]
    paths = []
    for i, pil in enumerate(pils):
        pil.save(tmp_path / f"{i}.png")
        paths.append(tmp_path / f"{i}.png")
    for given, rows in (
        (pils, slice(None)),
        (paths, slice(None)),
        ([str(p) for p in paths], slice(None)),
        (str(paths[3]), slice(3, 4)),
        (x[3], slice(3, 4)),  # one file, one (C, H, W) image
        (x.float() / 255, slice(None)),
        ([x[0], x[1].float() / 255], slice(0, 2)),
    ):
        torch.testing.assert_close(model.embed(given, batch_size=2), expected[rows], atol=1e-6, rtol=1e-6)

    # a 40x30 RGB image: converted to the model's 1 channel and size as an image folder would be
    rgb = np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "rgb.png")
    gray = Image.fromarray(rgb).convert("L").resize((12, 12), Image.Resampling.BILINEAR)
    by_hand = torch.from_numpy(np.asarray(gray).copy())[None, None]
    torch.testing.assert_close(model.embed(tmp_path / "rgb.png"), model.embed(by_hand), atol=1e-6, rtol=1e-6)
    assert torch.equal(as_image_batch(tmp_path / "rgb.png", 1, 12), by_hand)
    assert torch.equal(as_image_batch([Image.fromarray(rgb)] * 2, 1, 12), by_hand.expand(2, -1, -1, -1))


def test_numpy_arrays_are_channels_last_images(tmp_path):
    """NumPy arrays read as PIL/imageio/scikit-learn hold images: (N, H, W[, C]) batches, (H, W[, C]) one image;
    at the model's size and channels used as they are, otherwise converted like an image file."""
    model = build("tau-simclr")
    x = images(5)
    gray = x[:, 0].numpy()  # (N, H, W): scikit-learn's digits.images layout
    expected = reference_features(model, x)
    for given, rows in (
        (gray, slice(None)),
        (gray[..., None], slice(None)),  # (N, H, W, 1)
        (gray[2], slice(2, 3)),  # one (H, W) image
        (gray[2][..., None], slice(2, 3)),  # one (H, W, 1) image
        (gray.astype(np.float64) / 255, slice(None)),  # float in [0, 1]: precision kept
        ([gray[0], gray[1]], slice(0, 2)),
    ):
        torch.testing.assert_close(model.embed(given, batch_size=2), expected[rows], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.project(gray, batch_size=3), model.project(x), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(model.uncertainty(gray, batch_size=3), model.uncertainty(x), atol=1e-6, rtol=1e-6)

    # RGB and RGBA arrays of another size: the model's 1 channel (ITU-R 601 luma, as PIL) and size, as a file
    rgb = np.random.default_rng(0).integers(0, 256, (2, 30, 40, 3), dtype=np.uint8)
    luma = (rgb.astype(np.int64) @ np.array([19595, 38470, 7471]) + 0x8000) >> 16  # PIL's integer formula
    resized = np.stack([np.asarray(Image.fromarray(g.astype(np.uint8)).resize((12, 12), Image.BILINEAR)) for g in luma])
    assert torch.equal(as_image_batch(rgb, 1, 12), torch.from_numpy(resized)[:, None])
    rgba = np.concatenate([rgb, np.full((2, 30, 40, 1), 255, np.uint8)], axis=-1)
    assert torch.equal(as_image_batch(rgba, 1, 12), as_image_batch(rgb, 1, 12))  # alpha dropped
    Image.fromarray(rgb[1]).save(tmp_path / "rgb.png")
    assert torch.equal(as_image_batch(rgb[1], 1, 12), as_image_batch(tmp_path / "rgb.png", 1, 12))
    assert torch.equal(as_image_batch(rgb.astype(np.float32) / 255, 1, 12), as_image_batch(rgb, 1, 12))
    assert as_image_batch(np.zeros((0, 30, 40, 3), np.uint8), 1, 12).shape == (0, 1, 12, 12)


def test_results_are_on_the_model_device():
    model = build("simclr")
    x = images(4)
    cpu = model.embed(x)
    assert cpu.device.type == "cpu"
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: the CPU half of the check ran")
    model.to("cuda")
    for given in (x, x.cuda(), [Image.fromarray(img[0].numpy()) for img in x]):
        out = model.embed(given, batch_size=3)
        assert out.device.type == "cuda"
        torch.testing.assert_close(out.cpu(), cpu, atol=1e-4, rtol=1e-4)
    assert model.project(x).device.type == "cuda"


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (torch.zeros(2, 3, 12, 12, dtype=torch.uint8), ConfigError, "3 channels .* the model takes 1"),
        (torch.zeros(2, 1, 12), ConfigError, r"2 channels \(shape \(2, 1, 12\), read as one \(C, H, W\) image\)"),
        (torch.full((2, 1, 12, 12), 255.0), ConfigError, r"must be in \[0, 1\]"),
        (torch.zeros(2, 1, 12, 12, dtype=torch.int64), ConfigError, "uint8"),
        (torch.zeros(12, 12), ConfigError, r"\(N, C, H, W\)"),
        ({"not": "images"}, ConfigError, "type dict"),
        (np.zeros((2, 12, 12, 1), dtype=np.int32), ConfigError, "dtype int32: pass uint8"),
        (np.full((2, 12, 12), 2.0), ConfigError, r"must be in \[0, 1\]"),
        (np.zeros((2, 1, 12, 12), dtype=np.uint8), ConfigError, r"channels-last .* torch.from_numpy"),
        (np.zeros((2, 2, 12, 12, 1), dtype=np.uint8), ConfigError, r"got shape \(2, 2, 12, 12, 1\)"),
        ([], ConfigError, "no images"),
        ("nowhere.png", DatasetError, "nowhere.png does not exist"),
        (
            [torch.zeros(1, 8, 8, dtype=torch.uint8), torch.zeros(1, 12, 12, dtype=torch.uint8)],
            ConfigError,
            "differ in size",
        ),
    ],
)
def test_bad_input_fails_with_one_clear_error(bad, error, match):
    with pytest.raises(error, match=match):
        build("simclr").embed(bad)


def test_bad_arguments_fail_with_one_clear_error(tmp_path):
    model = build("tau-simclr")
    with pytest.raises(ConfigError, match="batch_size must be >= 1"):
        model.embed(images(2), batch_size=0)
    with pytest.raises(ConfigError, match="valid: neg_u, neg_u_squared"):
        model.uncertainty(images(2), score="u")
    with pytest.raises(DatasetError, match="is a folder"):
        model.embed(tmp_path)
    (tmp_path / "broken.png").write_bytes(b"not an image")
    with pytest.raises(DatasetError, match="cannot read image .*broken.png"):
        model.embed([tmp_path / "broken.png"])
