"""``train.precision: auto``: the decision on injected hardware facts, the CPU flags read, what a run records."""

from __future__ import annotations

import pytest
import torch

from probcl.runtime.precision import HardwareFacts, choose_precision, cpu_bf16_flags

# (facts, expected precision): the hardware cases of issue #28
CASES = [
    (HardwareFacts("cuda", cuda_bf16=True), "32-true"),  # Ampere and newer: bf16 measured slower (docs/speed.md)
    (HardwareFacts("cuda", cuda_bf16=False), "32-true"),  # Volta / Turing: bf16 only emulated
    (HardwareFacts("cpu", cpu_capability="AVX2"), "32-true"),  # this machine
    (HardwareFacts("cpu", cpu_capability="AVX512"), "32-true"),  # AVX-512 without BF16: emulated in software
    (HardwareFacts("cpu", cpu_capability="AVX512", cpu_flags=frozenset({"avx512_bf16"})), "bf16-mixed"),  # Zen 4
    (HardwareFacts("cpu", cpu_capability="AVX512", cpu_flags=frozenset({"amx_bf16", "amx_tile"})), "bf16-mixed"),
    (HardwareFacts("cpu", cpu_capability="DEFAULT", cpu_flags=frozenset({"bf16"})), "bf16-mixed"),  # Graviton 3
    (HardwareFacts("mps"), "32-true"),  # no check for other accelerators
]


@pytest.mark.parametrize(("facts", "expected"), CASES)
def test_auto_picks_bf16_only_where_the_device_computes_it_natively(facts, expected):
    choice = choose_precision("auto", facts)
    assert (choice.requested, choice.precision) == ("auto", expected)
    assert choice.line().startswith(f"precision auto -> {expected} (")
    if facts.device == "cpu":  # the reason names the capability the decision read
        assert facts.cpu_capability in choice.reason


@pytest.mark.parametrize("requested", ["32-true", "bf16-mixed", "16-mixed"])
def test_an_explicit_precision_is_kept_on_any_hardware(requested):
    for facts, _ in CASES:
        choice = choose_precision(requested, facts)
        assert (choice.precision, choice.reason) == (requested, "set in the config")


def test_cpu_flags_are_read_from_the_kernels_list(tmp_path):
    torch_reports = {"avx512_bf16"} if torch.cpu._is_avx512_bf16_supported() else set()
    torch_reports |= {"amx_tile"} if torch.cpu._is_amx_tile_supported() else set()
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n")
    plain = tmp_path / "plain"
    plain.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw avx512vl\n")
    assert cpu_bf16_flags(x86) == {"avx512_bf16", "amx_bf16", "amx_tile"} | torch_reports
    assert cpu_bf16_flags(arm) == {"bf16"} | torch_reports
    assert cpu_bf16_flags(plain) == torch_reports  # AVX-512 alone is not native bf16
    assert cpu_bf16_flags(tmp_path / "missing") == torch_reports


@pytest.mark.parametrize("requested", ["auto", "32-true"])
def test_a_run_records_its_choice_in_the_checkpoint_and_at_start_up(tiny_config, capsys, requested):
    from probcl.core.layout import RunPaths
    from probcl.tasks.pretrain import PRECISION_KEY, pretrain

    run = pretrain(tiny_config(**{"train.precision": requested, "train.limit_train_batches": 1}))
    record = torch.load(RunPaths(run).last, weights_only=False)[PRECISION_KEY]
    assert record["requested"] == requested
    assert record["precision"] in ("32-true", "bf16-mixed") and record["reason"]
    if requested == "32-true":
        assert record == {"requested": "32-true", "precision": "32-true", "reason": "set in the config"}
    head = record["precision"] if requested == record["precision"] else f"auto -> {record['precision']}"
    assert f"probcl: precision {head} ({record['reason']})" in capsys.readouterr().err
