"""`probcl evaluate` writes a report for every run: report.md (figures in RUN/plots) and a self-contained
report.html (every image an embedded PNG), with the training curves, all evaluated suites and a t-SNE map."""

from __future__ import annotations

import base64
import io
import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from PIL import Image

from probcl.report.run_report import curve_panels, metric_columns


class _Html(HTMLParser):
    """Images, external references and table cells / headings of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.external: list[str] = []
        self.cells: list[str] = []
        self.headings: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        for key in ("href", "src"):
            if key in attrs and tag != "img" and not str(attrs[key]).startswith(("data:", "#")):
                self.external.append(attrs[key])
        if tag == "link" or (tag == "script" and "src" in attrs):
            self.external.append(str(attrs))
        if tag in ("td", "th", "h2", "h3"):
            self._in = tag

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in in ("td", "th"):
            self.cells.append(data.strip())
        elif self._in in ("h2", "h3"):
            self.headings.append(data.strip())


def test_metric_columns_and_panels_from_rows():
    rows = [
        {"step": 0, "lr-Adam/pg1": 0.1},
        {
            "step": 4,
            "train/loss": 3.0,
            "train/energy_data": -1.0,
            "train/energy_samples": -2.0,
            "train/bank_query_cos": 0.5,
            "epoch": 0.0,
        },
        {"step": 4, "train/loss": 2.5, "epoch": 0.0},  # a step logged again (resume): last value wins
        {"step": 5, "monitor/knn_top1": 40.0, "monitor/probe_top1": 35.0, "monitor/seconds": 1.0, "epoch": 0.0},
        {"step": 9, "train/loss": float("nan"), "train/temperature": 0.2, "epoch": 1.0},
        {"step": 11, "monitor/knn_top1": 55.0, "monitor/probe_top1": 50.0, "monitor/seconds": 2.0, "epoch": 1.0},
    ]
    columns = metric_columns(rows)
    assert columns["train/loss"]["step"] == [(4.0, 2.5)]  # NaN left out
    assert columns["monitor/knn_top1"]["epoch"] == [(1.0, 40.0), (2.0, 55.0)]  # epochs completed
    grouped = {group.stem: panels for group, panels in curve_panels(columns)}
    assert list(grouped) == ["loss", "lr", "monitor", "diagnostics", "monitor-cost"]
    assert grouped["lr"] == [("learning rate", {"lr-Adam/pg1": [(0.0, 0.1)]}, "learning rate")]
    ((title, series, unit),) = grouped["monitor"]
    assert unit == "accuracy (%)"  # every panel's y axis says its unit
    assert series == {"knn_top1": [(1.0, 40.0), (2.0, 55.0)], "probe_top1": [(1.0, 35.0), (2.0, 50.0)]}
    diagnostics = {title: sorted(series) for title, series, _ in grouped["diagnostics"]}
    assert diagnostics == {
        "energy": ["energy_data", "energy_samples"],
        "bank_query_cos": ["bank_query_cos"],
        "temperature": ["temperature"],
    }  # EBCLR's two energies share a panel: the gap shows


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory):
    """A 2-epoch tiny SimCLR run on digits, evaluated with knn and lipschitz (a suite with a figure) via the CLI."""
    from probcl.cli import main
    from probcl.config import load_config
    from probcl.tasks.pretrain import pretrain
    from tests.conftest import tiny_overrides

    run = tmp_path_factory.mktemp("report") / "run"
    overrides = {"model.width": 8, "train.epochs": 2, "train.limit_train_batches": 10}  # logs train/* at step 10
    pretrain(load_config(None, tiny_overrides(run, **overrides)))
    assert (
        main(
            [
                "evaluate",
                str(run),
                "--suite",
                "knn,lipschitz",
                "--max-train",
                "400",
                "--option",
                "lipschitz.max_images=64",
            ]
        )
        == 0
    )
    return run


def _html(run: Path) -> _Html:
    parser = _Html()
    parser.feed((run / "report.html").read_text())
    return parser


def test_report_html_is_self_contained_with_every_suite_table(evaluated_run):
    run = evaluated_run
    page = _html(run)
    assert page.external == []
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        Image.open(io.BytesIO(data)).verify()
    assert {"Training", "Embedding map", "Evaluation", "kNN", "Local Lipschitz estimates"} <= set(page.headings)
    evaluations = json.loads((run / "eval.json").read_text())
    top1, smooth = evaluations["knn"]["top1"], evaluations["lipschitz"]["brightness+"]
    cells = page.cells
    assert cells[cells.index("top1") + 1] == f"{top1:.2f}"  # the kNN table row, as in eval.json
    assert cells[cells.index("brightness+") + 1] == (f"{smooth:.3f}" if abs(smooth) <= 1 else f"{smooth:.2f}")
    md = (run / "report.md").read_text()
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)
    assert len(links) == len(page.images)
    assert all(link.startswith("plots/") and (run / link).is_file() for link in links)
    assert {f"plots/training-{stem}.png" for stem in ("loss", "lr", "monitor", "probe", "monitor-cost")} <= set(links)
    assert {"plots/embedding-map.png", "plots/lipschitz.png"} <= set(links)


def test_report_covers_all_suites_so_far_and_keeps_the_map(evaluated_run):
    from probcl.cli import main

    run = evaluated_run
    cache = run / "plots" / "embedding-map.json"
    before = cache.read_text()
    assert main(["evaluate", str(run), "--suite", "knn", "--option", "knn.knn_k=5", "--max-train", "400"]) == 0
    assert cache.read_text() == before  # same checkpoint, layer and seed: the t-SNE is not recomputed
    assert main(["evaluate", str(run), "--suite", "linear", "--features", "pixels", "--max-train", "400"]) == 0
    assert cache.read_text() == before  # the map shows the run's backbone, whatever --features evaluated
    page = _html(run)
    assert {"kNN", "Local Lipschitz estimates"} <= set(page.headings)  # lipschitz: evaluated by the earlier call
    top1 = json.loads((run / "eval.json").read_text())["knn"]["top1"]
    assert page.cells[page.cells.index("top1") + 1] == f"{top1:.2f}"  # this call's kNN result
    stamp = (run / "report.md").stat().st_mtime_ns
    assert main(["evaluate", str(run), "--suite", "knn", "--max-train", "400", "--no-report"]) == 0
    assert (run / "report.md").stat().st_mtime_ns == stamp


def test_embedding_map_is_a_faithful_seeded_tsne_of_test_features(evaluated_run):
    """Coordinates preserve the neighbourhoods of independently recomputed features; labels match the images."""
    from sklearn.manifold import trustworthiness

    import probcl
    from probcl.data.loaders import load_dataset

    emb = json.loads((evaluated_run / "plots" / "embedding-map.json").read_text())
    test = load_dataset("digits", "test")
    index = torch.tensor(emb["index"])
    assert len(index) == len(test) == emb["protocol"]["images"]  # 540 < 2000: the whole test set
    assert torch.equal(torch.tensor(emb["labels"]), test.labels()[index])
    model = probcl.load(evaluated_run, device="cpu")
    with torch.no_grad():
        features = torch.nn.functional.normalize(model.embed(test.images[index]).double(), dim=1)
    points = torch.tensor(emb["points"])
    assert points.shape == (len(index), 2) and bool(torch.isfinite(points).all())
    assert trustworthiness(features.numpy(), points.numpy(), n_neighbors=10) > 0.9
    assert (
        emb["protocol"]["checkpoint"]["global_step"]
        == torch.load(evaluated_run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"]
    )


def test_seeded_subset_of_the_map(evaluated_run):
    from probcl.eval import ModelOnData
    from probcl.eval.embedding_map import embedding_map

    ctx = ModelOnData(evaluated_run, device="cpu")
    a, b, c = (embedding_map(ctx, 60, seed) for seed in (1, 1, 2))
    assert a == b and a["index"] != c["index"]
    assert len(a["index"]) == 60 and a["index"] == sorted(set(a["index"]))
    assert all(math.isfinite(v) for p in a["points"] for v in p)


def test_histogram_columns_are_drawn_as_one_heatmap_over_training_not_as_curves(tmp_path):
    from probcl.methods.tau import u_histogram
    from probcl.report.document import Document
    from probcl.report.run_report import histograms_over_training, training_section

    u_by_step = {9: torch.tensor([-9.0, 0.5, 0.5, 7.2]), 19: torch.tensor([8.0, 8.5, 0.2, 0.9])}
    rows = [
        {"step": step, "train/loss": 1.0, **{f"train/{k}": float(v) for k, v in u_histogram(u).items()}}
        for step, u in u_by_step.items()
    ]
    steps, bins, shares = histograms_over_training(metric_columns(rows))["train/u_hist"]
    assert steps == [9.0, 19.0] and bins[0] == "[-inf, -8)" and bins[-1] == "[8, inf)" and len(bins) == 18
    assert shares[0][0] == 0.25 and shares[0][bins.index("[0, 1)")] == 0.5 and shares[0][bins.index("[7, 8)")] == 0.25
    assert shares[1][-1] == 0.5 and shares[1][bins.index("[0, 1)")] == 0.5
    assert all(sum(row) == pytest.approx(1.0) for row in shares)
    doc = Document("run")
    training_section(doc, rows, tmp_path)
    assert (tmp_path / "training-hist-u_hist.png").stat().st_size > 1000
    curve_columns = [k for _, panels in curve_panels(metric_columns(rows)) for _, series, _ in panels for k in series]
    assert "loss" in curve_columns  # the plain curves are still drawn ...
    drawn = {p.name for p in tmp_path.iterdir()}
    assert drawn == {"training-loss.png", "training-hist-u_hist.png"}  # ... but no curve per histogram bin


def test_report_html_renders_code_has_no_empty_header_and_counts_epochs_completed(evaluated_run):
    text = (evaluated_run / "report.html").read_text()
    assert "`" not in text and "<code>simclr</code>" in text  # Markdown code spans rendered, in tables too
    assert "<th></th>" not in text  # the summary's label/value table has no header row
    cells = _html(evaluated_run).cells
    header = cells.index("epochs completed")
    # the overview row of knn: suite, result key, epochs completed, step, seconds; the run trained 2 epochs of 10
    row = cells.index("knn", header)
    assert cells[row + 1 : row + 3] == ["2", "20"]
    recorded = json.loads((evaluated_run / "eval.json").read_text())["knn"]["protocol"]["checkpoint"]
    assert (recorded["epoch"], recorded["epochs_completed"]) == (1, 2)  # Lightning's 0-based epoch, and ours
