"""The start-up clock reads the process's start from /proc (a fake /proc here: the arithmetic by hand)."""

import os

from probcl.core.process_clock import seconds_since_process_start


def _fake_proc(tmp_path, comm: str, start_ticks: int, uptime: str):
    (tmp_path / "self").mkdir()
    # fields 3..21 are placeholders; field 22 is the start time in clock ticks after boot
    fields = ["S"] + ["0"] * 18 + [str(start_ticks)] + ["0"] * 10
    (tmp_path / "self" / "stat").write_text(f"4242 ({comm}) {' '.join(fields)}\n")
    (tmp_path / "uptime").write_text(f"{uptime} 99999.00\n")
    return tmp_path


def test_age_is_uptime_minus_the_start_tick(tmp_path):
    ticks = os.sysconf("SC_CLK_TCK")
    proc = _fake_proc(tmp_path, "python3", start_ticks=5 * ticks, uptime="12.25")
    assert abs(seconds_since_process_start(proc) - 7.25) < 1e-9


def test_a_command_name_with_spaces_and_parentheses_is_skipped_whole(tmp_path):
    ticks = os.sysconf("SC_CLK_TCK")
    proc = _fake_proc(tmp_path, "odd) name (x", start_ticks=2 * ticks, uptime="3.5")
    assert abs(seconds_since_process_start(proc) - 1.5) < 1e-9


def test_without_proc_it_falls_back_to_a_non_negative_age(tmp_path):
    assert seconds_since_process_start(tmp_path / "missing") >= 0.0
