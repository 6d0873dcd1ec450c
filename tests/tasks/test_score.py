"""`probcl score` on a tiny SimCLR run: garbage images flagged with a reason, held-out ID images kept, the fitted
reference cached per checkpoint, columns and contact sheet."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_overrides
from PIL import Image

import probcl.tasks.score.cache as score_cache
import probcl.tasks.score.model_scorer as model_scorer
from probcl.cli import main
from probcl.config import load_config
from probcl.data.loaders import load_dataset
from probcl.errors import RunError
from probcl.eval.ood_scores import SCORES as OOD_SCORES
from probcl.tasks.pretrain import pretrain
from probcl.tasks.score import ScoreOptions, score_dataset

CALIBRATION = 300  # of digits' 540 test images; the other 240 are held out from every fitted quantity
# the default combination's Bonferroni weights: the distances share 0.95, the guards 0.05
WEIGHTS = {"knn1_raw": 0.475, "mahalanobis": 0.475, "feature_norm": 0.025, "input_stats": 0.025}
# a labeled SimCLR run with an online probe gets every registered score but the methods' own, in registry order
SCORES = [e.name for e in OOD_SCORES.entries() if e.kind != "own uncertainty"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """SimCLR, CNN width 8, 20 steps on scikit-learn's digits."""
    root = tmp_path_factory.mktemp("score")
    return pretrain(
        load_config(None, tiny_overrides(root / "simclr", **{"model.width": 8, "train.limit_train_batches": 20}))
    )


@pytest.fixture(scope="module")
def garbage(tmp_path_factory):
    """5 uniform-noise 28x28 PNGs, 3 random-colour 64x48 JPEGs and one unreadable file."""
    folder = tmp_path_factory.mktemp("garbage")
    rng = np.random.default_rng(0)
    for i in range(5):
        Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8)).save(folder / f"noise{i}.png")
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(folder / f"colour{i}.jpg")
    (folder / "broken.png").write_bytes(b"this is not an image")
    return folder


def read_rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def flagged_figures(html: str) -> list[str]:
    """The names (alt texts) of the contact sheet's images drawn as flagged."""
    return re.findall(r'<figure class="ood"><img src="[^"]*" alt="([^"]*)"', html)


def test_garbage_is_flagged_with_a_reason_and_held_out_id_images_are_kept(run, garbage, tmp_path, capsys):
    out, sheet = tmp_path / "garbage.csv", tmp_path / "sheet.html"
    args = ["score", str(run), "--max-calibration", str(CALIBRATION)]
    assert main([*args, "--dataset", f"folder:{garbage}", "--out", str(out), "--html", str(sheet)]) == 0
    captured = capsys.readouterr()
    assert "8 flagged as out-of-distribution" in captured.out
    assert (
        f"skipped 1 unreadable image file (--on-unreadable=skip), listed in {out.with_suffix('.unreadable.txt')}"
        in (captured.err)
    )
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["skipped"] == [str(garbage / "broken.png")] and sidecar["rows"] == sidecar["flagged"] == 8

    rows = read_rows(out)
    combination = ["knn1_raw", "feature_norm", "mahalanobis", "input_stats"]  # the default for a labeled SimCLR run
    assert list(rows[0]) == [
        "index",
        "id",
        "predicted_class",
        "probe_confidence",
        *[c for s in SCORES for c in (s, f"p:{s}")],
        "combined",
        "ood",
        "flagged_by",
        "most_unusual",
    ]
    assert sorted(r["id"] for r in rows) == sorted(str(p) for p in garbage.iterdir() if p.name != "broken.png")
    threshold = sidecar["thresholds"]["combined"]
    for row in rows:
        assert row["ood"] == "True"
        neg_log_p = {s: -math.log(float(row[f"p:{s}"]) / WEIGHTS[s]) for s in combination}
        assert float(row["combined"]) == pytest.approx(max(neg_log_p.values()), rel=1e-5)
        # flagged_by: exactly the combination's scores whose own weighted tail probability crossed the threshold
        assert row["flagged_by"].split(";") == [s for s in combination if neg_log_p[s] > threshold + 1e-5]
        assert row["most_unusual"] == min(combination, key=lambda s: float(row[f"p:{s}"]) / WEIGHTS[s])

    # Held-out ID images: the split-conformal threshold accepts a fresh ID image with probability >= 95 %,
    # in expectation over calibration sets. Given this one (threshold from m = 150 images, rank r), the
    # acceptance rate is ~Beta(r, m + 1 - r); 240 held-out images add binomial noise. Allow 3 sd of both.
    id_out = tmp_path / "id.csv"
    assert main([*args, "--dataset", "digits", "--split", "test", "--out", str(id_out)]) == 0
    id_rows = read_rows(id_out)
    calibration_idx = load_dataset("digits", "test").seeded_indices(CALIBRATION, 0)
    # The images the threshold was chosen on (the calibration set's seeded second half) are accepted at
    # >= 95 % by construction: scoring them again must reproduce their calibration scores exactly.
    threshold_half = set(
        calibration_idx[
            torch.randperm(CALIBRATION, generator=torch.Generator().manual_seed(0))[CALIBRATION // 2 :]
        ].tolist()
    )
    assert np.mean([r["ood"] == "False" for r in id_rows if int(r["index"]) in threshold_half]) >= 0.95
    calibration = set(calibration_idx.tolist())
    held_out = [r for r in id_rows if int(r["index"]) not in calibration]
    assert len(held_out) == 540 - CALIBRATION
    accepted = np.mean([r["ood"] == "False" for r in held_out])
    m = CALIBRATION - CALIBRATION // 2
    r = math.ceil((m + 1) * 0.95)
    sd = math.sqrt(r * (m + 1 - r) / ((m + 1) ** 2 * (m + 2)) + 0.95 * 0.05 / len(held_out))
    assert accepted >= 0.95 - 3 * sd, (accepted, sd)

    # The contact sheet: every flagged image once (no accepted image here), and the unreadable file with its reason.
    html = sheet.read_text()
    assert sorted(flagged_figures(html)) == sorted(p.name for p in garbage.iterdir() if p.name != "broken.png")
    assert html.count("data:image/png;base64,") == 8 and "OOD: " in html
    assert sidecar["skipped_reasons"][str(garbage / "broken.png")].startswith("cannot identify image file")
    assert "<h2>Skipped: 1 unreadable file</h2>" in html
    assert f"<code>{garbage / 'broken.png'}</code>: cannot identify image file" in html


def test_knn_scores_match_scikit_learn_on_the_run_features(run, garbage, tmp_path):
    from sklearn.neighbors import NearestNeighbors

    import probcl

    summary = score_dataset(run, f"folder:{garbage}", tmp_path / "s.csv", ScoreOptions(max_calibration=CALIBRATION))
    model = probcl.load(run, device="cpu")
    images = torch.stack(
        [
            torch.from_numpy(np.array(Image.open(p).convert("L").resize((28, 28), Image.BILINEAR)))
            for p in sorted(garbage.glob("*.*"))
            if p.name != "broken.png"
        ]
    )[:, None]
    with torch.no_grad():
        train = model.embed(load_dataset("digits", "train").images).numpy()
        query = model.embed(images).numpy()
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)
    by_id = {r["id"]: r for r in read_rows(summary.out)}
    ids = [str(p) for p in sorted(garbage.glob("*.*")) if p.name != "broken.png"]
    for column, bank, q in (("knn10", unit(train), unit(query)), ("knn10_raw", train, query)):
        expected = NearestNeighbors(n_neighbors=10).fit(bank).kneighbors(q)[0].mean(1)
        np.testing.assert_allclose([float(by_id[i][column]) for i in ids], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose([float(by_id[i]["feature_norm"]) for i in ids], np.linalg.norm(query, axis=1), rtol=1e-5)


def test_the_fitted_reference_is_cached_per_checkpoint(run, garbage, tmp_path, monkeypatch):
    run = Path(shutil.copytree(run, tmp_path / "run"))  # its checkpoint is rewritten below
    fits = []
    real_fit = model_scorer.fit_reference

    def counting_fit(*args, **kwargs):
        fits.append(1)
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(model_scorer, "fit_reference", counting_fit)
    options = ScoreOptions(max_calibration=200, seed=5)  # options of their own: a cache file of their own
    first = score_dataset(run, f"folder:{garbage}", tmp_path / "a.csv", options)
    cache = first.cache["path"]
    assert len(fits) == 1 and not first.cache["hit"] and cache.startswith(str(run / "score-cache"))
    stamp = Path(cache).stat().st_mtime_ns

    second = score_dataset(run, f"folder:{garbage}", tmp_path / "b.csv", options)
    assert len(fits) == 1 and second.cache["path"] == cache and second.cache["hit"]
    assert (tmp_path / "a.csv").read_text() == (tmp_path / "b.csv").read_text()
    ckpt = run / "checkpoints" / "last.ckpt"
    assert torch.load(cache, weights_only=True)["checkpoint"]["mtime_ns"] == ckpt.stat().st_mtime_ns
    assert Path(cache).stat().st_mtime_ns == stamp

    other = score_dataset(
        run, f"folder:{garbage}", tmp_path / "c.csv", ScoreOptions(max_calibration=200, seed=5, knn_k=5)
    )
    assert len(fits) == 2 and other.cache["path"] != cache and "knn5_raw" in read_rows(tmp_path / "c.csv")[0]

    # A changed checkpoint (new weights, rewritten file) invalidates the cached reference.
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    for name, value in state["state_dict"].items():
        if name.startswith("backbone.") and value.is_floating_point():
            value.mul_(1.5)
    torch.save(state, ckpt)
    third = score_dataset(run, f"folder:{garbage}", tmp_path / "d.csv", options)
    assert len(fits) == 3 and third.cache == {"path": cache, "hit": False}
    assert torch.load(cache, weights_only=True)["checkpoint"]["mtime_ns"] == ckpt.stat().st_mtime_ns
    before = {r["id"]: r["knn10_raw"] for r in read_rows(tmp_path / "a.csv")}
    assert any(r["knn10_raw"] != before[r["id"]] for r in read_rows(tmp_path / "d.csv"))

    # A run directory where the cache cannot be written costs speed, not the scores.
    real_save = score_cache.atomic_torch_save

    def failing_cache_save(path, obj):
        if "score-cache" in str(path):
            raise RunError(f"cannot write {path}: Read-only file system")
        return real_save(path, obj)

    monkeypatch.setattr(score_cache, "atomic_torch_save", failing_cache_save)
    unstored = score_dataset(run, f"folder:{garbage}", tmp_path / "e.csv", ScoreOptions(max_calibration=200, seed=6))
    assert "Read-only" in unstored.cache["not_stored"] and unstored.rows == 8 and unstored.flagged == 8


def test_a_single_score_can_decide_and_bad_names_fail_early(run, garbage, tmp_path, capsys):
    out = tmp_path / "single.csv"
    assert (
        main(
            [
                "score",
                str(run),
                "--dataset",
                f"folder:{garbage}",
                "--out",
                str(out),
                "--score",
                "input_stats",
                "--max-calibration",
                str(CALIBRATION),
            ]
        )
        == 0
    )
    rows = read_rows(out)
    threshold = json.loads(out.with_suffix(".json").read_text())["thresholds"]["input_stats"]
    for row in rows:
        crossed = -math.log(float(row["p:input_stats"])) > threshold
        assert row["ood"] == str(crossed) and row["flagged_by"] == ("input_stats" if crossed else "")
    assert main(["score", str(run), "--dataset", "digits", "--score", "uncertainty:neg_u"]) == 2
    assert f"valid for this run: {', '.join(SCORES)}" in capsys.readouterr().err  # TaU's score, on a SimCLR run
    assert main(["score", str(run), "--dataset", "digits", "--combination", "knn10,nope"]) == 2
    assert "unknown score(s) nope in --combination" in capsys.readouterr().err


def _score_in_subprocess(run: Path, data: str, out: Path, options: str) -> set[str]:
    """Score in a fresh interpreter; returns the heavy modules it imported."""
    code = (
        "import sys\n"
        "from probcl.tasks.score import ScoreOptions, score_dataset\n"
        f"summary = score_dataset({str(run)!r}, {data!r}, {str(out)!r}, ScoreOptions({options}))\n"
        "assert summary.cache['hit'] and 'network' in summary.cache, summary.cache\n"
        "print(' '.join(m for m in ('lightning', 'torchmetrics', 'torchvision', 'kornia') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(done.stdout.split())


def test_repeat_calls_score_with_the_exported_network_and_no_model_class(run, garbage, tmp_path):
    """The first call fits the reference and exports the model's scoring outputs; a repeat call in a fresh
    process gives the same rows without importing Lightning (most of a repeat call's time was its imports),
    and a damaged export falls back to the model, which exports it again."""
    run = Path(shutil.copytree(run, tmp_path / "run"))
    options = ScoreOptions(max_calibration=CALIBRATION, seed=3)
    first = score_dataset(run, f"folder:{garbage}", tmp_path / "model.csv", options)
    assert not first.cache["hit"]
    state = torch.load(first.cache["path"], weights_only=True)
    network = Path(first.cache["path"]).parent / state["network"]["file"]
    assert network.exists() and state["network"]["outputs"] == ["features", "probe_logits"]

    heavy = _score_in_subprocess(run, f"folder:{garbage}", tmp_path / "exported.csv", "max_calibration=300, seed=3")
    assert heavy == set()
    model_rows, exported_rows = read_rows(tmp_path / "model.csv"), read_rows(tmp_path / "exported.csv")
    assert [r["id"] for r in model_rows] == [r["id"] for r in exported_rows] and len(model_rows) == 8
    for a, b in zip(model_rows, exported_rows):
        assert a.keys() == b.keys()
        for key in a:
            if key in ("id", "flagged_by", "most_unusual", "ood", "predicted_class"):
                assert a[key] == b[key], key
            else:
                assert float(a[key]) == pytest.approx(float(b[key]), rel=1e-5, abs=1e-6), key

    # Held-out digits through both paths: the same decisions on in-distribution images too.
    score_dataset(
        run, "digits", tmp_path / "digits-exported.csv", ScoreOptions(max_calibration=300, seed=3, split="test")
    )
    fresh = ScoreOptions(max_calibration=300, seed=3, split="test", cache=False)
    score_dataset(run, "digits", tmp_path / "digits-model.csv", fresh)
    exported_ood = [r["ood"] for r in read_rows(tmp_path / "digits-exported.csv")]
    assert exported_ood == [r["ood"] for r in read_rows(tmp_path / "digits-model.csv")]

    network.write_bytes(b"damaged")
    repaired = score_dataset(run, f"folder:{garbage}", tmp_path / "repaired.csv", options)
    assert repaired.cache["hit"] and "network" not in repaired.cache  # the model path, the reference reused
    assert read_rows(tmp_path / "repaired.csv") == model_rows
    assert network.exists() and network.read_bytes() != b"damaged"
    assert (
        _score_in_subprocess(run, f"folder:{garbage}", tmp_path / "again.csv", "max_calibration=300, seed=3") == set()
    )


def tail_probability(calibration: np.ndarray, score: float, two_sided: bool) -> float:
    """The documented tail probability, computed by hand: p = (1 + #{c >= s}) / (1 + n) within the calibration
    scores c; beyond the most extreme one an exponential tail exp(-excess / beta) / (1 + n), beta the mean excess
    of the m = max(5, ceil(n / 20)) most extreme scores over the next one; two-sided: 2 min(upper, lower), <= 1."""
    n = len(calibration)
    m = min(n - 1, max(5, math.ceil(0.05 * n)))
    high, low = np.sort(calibration)[::-1], np.sort(calibration)

    def tail(ordered: np.ndarray, excess: float, count: int) -> float:
        if excess <= 0:
            return (1 + count) / (1 + n)
        beta = np.abs(ordered[:m] - ordered[m]).mean()
        return max(math.exp(-excess / beta) / (1 + n), np.finfo(np.float64).tiny)

    upper = tail(high, score - high[0], int((calibration >= score).sum()))
    if not two_sided:
        return upper
    lower = tail(low, low[0] - score, int((calibration <= score).sum()))
    return min(1.0, 2 * min(upper, lower))


def test_each_score_flags_exactly_below_the_threshold_printed_for_it(run, garbage, tmp_path, capsys):
    """An image is flagged by score s exactly when its tail probability p_s is below the threshold printed for s,
    w_s exp(-T) (the table used to print exp(-T) for every score, which did not match the decision). The p-values
    are recomputed by hand from the score columns of the calibration images that fitted the tails."""
    id_out, ood_out = tmp_path / "id.csv", tmp_path / "garbage.csv"
    args = ["score", str(run), "--max-calibration", str(CALIBRATION)]
    assert main([*args, "--dataset", "digits", "--split", "test", "--out", str(id_out)]) == 0
    capsys.readouterr()
    assert main([*args, "--dataset", f"folder:{garbage}", "--out", str(ood_out)]) == 0
    printed = capsys.readouterr().out
    table = {
        s: float(v)
        for s, v in re.findall(r"(knn1_raw|feature_norm|mahalanobis|input_stats)\s*[│|]\s*([0-9.e+-]+)", printed)
    }
    sidecar = json.loads(ood_out.with_suffix(".json").read_text())
    threshold = sidecar["thresholds"]["combined"]
    expected = {s: w * math.exp(-threshold) for s, w in WEIGHTS.items()}
    assert table == pytest.approx(expected, rel=5e-3)  # printed with 3 significant digits
    assert sidecar["tail_thresholds"] == pytest.approx(expected, rel=1e-12)

    # the tails were fitted on the first (seeded) half of the seeded calibration subset of digits' test split
    id_rows = read_rows(id_out)
    by_index = {int(r["index"]): r for r in id_rows}
    calibration_idx = load_dataset("digits", "test").seeded_indices(CALIBRATION, 0)
    perm = torch.randperm(CALIBRATION, generator=torch.Generator().manual_seed(0))
    tails_half = calibration_idx[perm[: CALIBRATION // 2]].tolist()
    calibration = set(calibration_idx.tolist())
    queries = [r for r in id_rows if int(r["index"]) not in calibration] + read_rows(ood_out)
    misprinted_before = 0
    for s in WEIGHTS:
        reference = np.array([float(by_index[i][s]) for i in tails_half])
        for row in queries:
            p = tail_probability(reference, float(row[s]), two_sided=s == "feature_norm")
            assert p == pytest.approx(float(row[f"p:{s}"]), rel=1e-3) or p < 1e-9, (s, row["id"])
            flagged = s in row["flagged_by"].split(";")
            if abs(p / table[s] - 1) > 5e-3:  # outside the printed value's rounding
                assert flagged == (p < table[s]), (s, row["id"], p, table[s])
            misprinted_before += table[s] <= p < math.exp(-threshold)
    assert misprinted_before > 0  # (image, score) pairs that the old table said were flagged, and were not


def test_the_contact_sheet_shows_every_flagged_image_or_names_where_the_rest_are(run, tmp_path):
    """The sheet states how many images were flagged and shows exactly those (it used to show the 16 highest-ranked
    images of any kind, so '19 flagged' came with 16 pictures); capped, it names the file and filter listing all."""
    options = ScoreOptions(max_calibration=CALIBRATION, split="test")
    out, sheet = tmp_path / "digits.csv", tmp_path / "digits.html"
    summary = score_dataset(run, "digits", out, options, html=sheet)
    rows = read_rows(out)
    flagged = [r for r in rows if r["ood"] == "True"]
    html = sheet.read_text()
    assert len(flagged) == summary.flagged > options.sheet_size  # more than a section of accepted images holds
    assert f"{summary.flagged} flagged as out-of-distribution" in html
    assert sorted(flagged_figures(html)) == sorted(r["id"] for r in flagged)
    assert html.count('<figure class="id">') == 2 * options.sheet_size  # the accepted extremes, none flagged

    capped = ScoreOptions(max_calibration=CALIBRATION, split="test", sheet_flagged=5)
    summary = score_dataset(run, "digits", out, capped, html=sheet)
    html = sheet.read_text()
    most_unusual = sorted(flagged, key=lambda r: (-float(r["combined"]), int(r["index"])))[:5]
    assert flagged_figures(html) == [r["id"] for r in most_unusual]
    where = f"all {summary.flagged} are the rows of {out} whose ood column is True"
    assert f"showing the 5 most unusual of the {summary.flagged} flagged images; {where}" in html


def test_score_takes_the_ood_suites_options_with_evaluates_syntax(run, tmp_path, capsys):
    out = tmp_path / "opts.csv"
    args = ["score", str(run), "--max-calibration", str(CALIBRATION), "--dataset", "digits", "--split", "test"]
    assert (
        main([*args, "--out", str(out), "--option", "ood.knn_k=5", "--option", "ood.combination=knn5,input_stats"]) == 0
    )
    rows = read_rows(out)
    # ood.knn_k: the default combination's kNN (raw features) at k 5; a family member the combination names
    # (knn5, L2-normalised) is fitted too, besides the registered k 1, 10, 50
    assert "knn5" in rows[0] and "knn5_raw" in rows[0] and "knn25" not in rows[0]
    combined = json.loads(out.with_suffix(".json").read_text())["protocol"]["combined"]
    assert combined.endswith("w = knn5 0.95, input_stats 0.05")
    assert main([*args, "--out", str(out), "--combination", "knn25,mahalanobis"]) == 0  # no knn_k needed
    assert "knn25" in read_rows(out)[0]
    assert main([*args, "--out", str(out), "--option", "ood.datasets=digits"]) == 2
    assert (
        "probcl score takes the ood suite's options ood.combination, ood.knn_k; got ood.datasets"
        in capsys.readouterr().err
    )


def test_a_knn_k_beyond_the_fitted_training_features_uses_them_all_and_says_so(run, garbage, tmp_path, capsys):
    out = tmp_path / "few.csv"
    args = ["score", str(run), "--dataset", f"folder:{garbage}", "--out", str(out), "--max-train", "30"]
    assert main([*args, "--max-calibration", "100", "--knn-k", "40"]) == 0
    printed = capsys.readouterr().out
    for name, k in (("knn40_raw", 40), ("knn50", 50), ("knn50_raw", 50)):
        assert f"note: {name}: k={k} is more than the 30 reference images, so all 30 were used" in printed
    assert "note: knn10" not in printed
    rows = read_rows(out)
    # with every fitted feature a neighbour, k 40 and k 50 are the same mean distance
    np.testing.assert_allclose([float(r["knn40_raw"]) for r in rows], [float(r["knn50_raw"]) for r in rows])
    assert len(json.loads(out.with_suffix(".json").read_text())["protocol"]["notes"]) == 3


def test_score_checks_where_its_files_go_before_scoring_and_never_replaces_a_runs_results(run, tmp_path, capsys):
    """--out names the scores; OUT.json (the summary) and OUT.unreadable.txt go next to it, --html names the sheet.
    ``--out RUN/eval.csv`` would put the summary over the run's evaluation results: refused, as are a sheet named
    like one of the others, a folder, and a path under a file, each in one line before any image is scored."""
    results = tmp_path / "eval.json"
    results.write_text('{"knn": {"top1": 80.0}}')
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    cases = [
        (["--out", str(tmp_path / "eval.csv")], "holds something else (not a `probcl score` summary)"),
        (["--out", str(tmp_path / "s.csv"), "--html", str(tmp_path / "s.csv")], "the same file as --out"),
        (["--out", str(tmp_path / "s.csv"), "--html", str(tmp_path / "s.json")], "the same file as --out's summary"),
        (["--out", str(tmp_path / "s.csv"), "--html", str(tmp_path / "adir")], "adir: it is a folder"),
        (["--out", str(tmp_path / "afile" / "s.csv")], "afile is a file, not a folder"),
    ]
    for flags, message in cases:
        assert main(["score", str(run), "--dataset", "digits", *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    assert results.read_text() == '{"knn": {"top1": 80.0}}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile", "eval.json"]


def test_a_bad_option_is_named_by_its_flag_and_an_empty_combination_is_refused(run, tmp_path, capsys):
    """The messages named ScoreOptions' fields (``score.tpr``), which the command line does not have; an empty
    --combination (``","``) silently meant the default combination."""
    cases = [
        (["--ood-threshold-tpr", "1.5"], "--ood-threshold-tpr must be in (0, 1], got 1.5"),
        (["--max-calibration", "0"], "--max-calibration must be >= 2, got 0"),
        (["--knn-k", "0"], "--knn-k must be >= 1, got 0"),
        (["--inference-batch-size", "0"], "--inference-batch-size must be >= 1, got 0"),
        (["--combination", " , "], "--combination ' , ' names no score"),
    ]
    for flags, message in cases:
        assert main(["score", str(run), "--dataset", "digits", "--out", str(tmp_path / "s.csv"), *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    assert not list(tmp_path.iterdir())
