"""`arldiag synth`: realistic synthetic runs through the normal Collector; detect finds the injected collapse."""
from __future__ import annotations

import pytest

import arldiag
from arldiag.cli import main
from arldiag.synth import parse_count, write_synth


def test_parse_count():
    assert parse_count("100M") == 100_000_000 and parse_count("2.5k") == 2500 and parse_count("1e6") == 10**6
    with pytest.raises(ValueError, match="--tokens"):
        parse_count("lots")


def test_collapse_is_detected_and_healthy_run_is_quiet(tmp_path):
    assert main(["synth", "--tokens", "150k", "--out", str(tmp_path / "c"), "--steps", "80", "--collapse-at", "60",
                 "--max-len", "24"]) == 0
    run = arldiag.open_run(tmp_path / "c")
    n_tok = run.count("tokens")
    assert n_tok == run.sql("select sum(n_tokens) from sequences").fetchall()[0][0]   # every token row stored
    assert 0.7 * 150_000 < n_tok < 1.3 * 150_000
    fired = {f.detector: f for f in arldiag.detect(run) if f.status == "fired"}
    # the precursor fires before the collapse, the format break at it
    assert fired["neg_adv_low_is"].severity in ("warning", "critical") and fired["neg_adv_low_is"].first_step < 60
    assert fired["format_collapse"].severity == "critical" and 60 <= fired["format_collapse"].first_step <= 70

    write_synth(tmp_path / "h", 60_000, steps=80, max_len=24, seed=1)
    healthy = [f for f in arldiag.detect(arldiag.open_run(tmp_path / "h"))
               if f.status == "fired" and f.severity in ("warning", "critical")]
    assert healthy == []


def test_ranks_write_their_own_files(tmp_path):
    res = write_synth(tmp_path / "r", 20_000, steps=6, ranks=3, max_len=16)
    run = arldiag.open_run(tmp_path / "r")
    assert run.sql("select count(distinct rank), count(*) from steps_raw").fetchall()[0] == (3, 18)
    assert run.count("tokens") == res["tokens"]
    assert run.sql("select sum(n_roll) from steps_raw").fetchall()[0][0] == 3 * 6 * 8 * res["samples_per_update"]
