"""End-to-end report outputs (JSON, Markdown, HTML file properties) on a collapsing and a stable run, a step-only
imported run, and the `arldiag report` / `arldiag import` commands."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from arldiag.cli import main as cli_main


def _report(run, tmp_path, fmt, *extra):
    out = tmp_path / f"r.{fmt}"
    assert cli_main(["report", run, "-o", str(out), "--no-progress", *extra]) == 0
    return out.read_text()


@pytest.fixture(scope="module")
def detected(collapse_run, stable_run):
    import arldiag
    from arldiag.detectors import collapse_step, detect

    out = {}
    for key, path in (("collapse", collapse_run), ("stable", stable_run)):
        run = arldiag.open_run(path)
        out[key] = (run.names[0], collapse_step(run)[run.names[0]], detect(run))
    return out


def test_json_collapsing(collapse_run, detected, tmp_path):
    name, collapse, findings = detected["collapse"]
    j = json.loads(_report(collapse_run, tmp_path, "json"))
    assert j["verdict"] == "collapsed"
    assert collapse is not None and 42 <= collapse <= 50  # the synthetic run collapses from step 42
    assert j["collapse_step"] == collapse
    assert len(j["findings"]) == len(findings)
    fired = {f.detector for f in findings if f.fired}
    assert j["recommendations"], "a collapsed run gets recommendations"
    for r in j["recommendations"]:
        assert r["evidence"] and set(r["detectors"]) <= fired
        assert all(any(d in e for d in r["detectors"]) for e in r["evidence"])  # each names its evidence
    pre = j["first_precursor"]
    assert pre["detector"] in fired and pre["lead_time"] == collapse - pre["step"] and pre["lead_time"] > 0
    nalis = j["neg_adv_low_is"]["metrics"]["nalis_frac"]
    assert nalis["at"] > 3 * nalis["before"]  # the driver accumulates at the collapse
    assert j["baseline"] is None
    # "what moved before the collapse": recomputed with numpy for the top metric of the report
    steps = arldiag_steps(collapse_run)
    top = j["precursors"][0]
    x, s = steps[top["metric"]].to_numpy(dtype=float, na_value=np.nan), steps["step"].to_numpy()
    pre, ref = x[(s >= collapse - 20) & (s <= collapse - 10)], x[(s >= collapse - 60) & (s < collapse - 20)]
    pre, ref = pre[np.isfinite(pre)], ref[np.isfinite(ref)]
    assert top["z"] == pytest.approx((pre.mean() - ref.mean()) / (ref.std(ddof=1) / np.sqrt(pre.size)), abs=0.01)
    assert 1 <= len(j["precursors"]) <= 8 and abs(top["z"]) >= max(abs(p["z"]) for p in j["precursors"])


def arldiag_steps(path):
    import arldiag

    return arldiag.open_run(path).sql("select * from steps order by step").df()


def test_json_stable(stable_run, detected, tmp_path):
    j = json.loads(_report(stable_run, tmp_path, "json"))
    assert j["verdict"] == "healthy" and j["collapse_step"] is None and j["decline_step"] is None
    assert j["recommendations"] == [] and j["first_precursor"] is None and j["precursors"] is None
    assert len(j["findings"]) == len(detected["stable"][2])


def test_markdown_collapsing_and_stable(collapse_run, stable_run, detected, tmp_path):
    md = _report(collapse_run, tmp_path, "md")
    collapse = detected["collapse"][1]
    assert "**COLLAPSED**" in md and f"| collapse step | {collapse} |" in md
    assert "## Recommendations" in md and "   - evidence: " in md
    assert "## The four ARLArena dimensions" in md
    for title in ("Loss aggregation", "IS clipping", "Advantage design", "Dynamic filtering"):
        assert f"### {title}" in md
    assert "cispo is a tolerant loss" in md
    assert "1 alert was recorded while the run was written; the first at step 28." in md
    assert f"## What moved before the collapse\n\nStep metrics that moved most in steps {collapse - 20}..{collapse - 10}" in md
    assert "| metric | z | before | lead window |" in md
    md = _report(stable_run, tmp_path, "md")
    assert "What moved before the collapse" not in md
    assert "**HEALTHY**" in md and "| collapse step | none |" in md
    assert "No recommendation: no detector fired." in md
    assert "No turn-level data" in md  # the stable synthetic run has no turns
    assert "No alerts were recorded" in md


def test_html_self_contained_small_with_baseline(collapse_run, stable_run, tmp_path):
    from plotly.offline import get_plotlyjs

    html = _report(collapse_run, tmp_path, "html", "--baseline", stable_run)
    js = get_plotlyjs()
    assert html.count(js[-2000:]) == 1                      # plotly.js inlined exactly once
    rest = html.replace(js, "")
    assert not re.search(r"<script[^>]+src=", rest)         # nothing loaded from elsewhere
    assert "cdn.plot.ly" not in rest and "<link" not in rest and "https://" not in rest
    assert len(html.encode()) < 10_000_000
    assert 'id="baseline"' in html and "Side by side" in html
    n_figs = len(re.findall(r'<div id="fig\d+"', html))
    assert n_figs >= 8


def test_format_from_suffix_and_progress(collapse_run, tmp_path, capsys):
    from arldiag.report.cli import write_report

    out = write_report(collapse_run, str(tmp_path / "x.md"), progress=True)
    assert Path(out).read_text().startswith("# arldiag report")
    assert "report" in capsys.readouterr().err  # the tqdm bar went to stderr
    with pytest.raises(ValueError, match="format"):
        write_report(collapse_run, str(tmp_path / "x.txt"), fmt="pdf", progress=False)


# ---------------------------------------------------------------- step-only (imported) runs
def test_steps_only_run_says_what_is_missing(steps_only_run, tmp_path):
    md = _report(steps_only_run, tmp_path, "md")
    for msg in ("No IS-ratio distribution", "No offender sequences", "No training-inference mismatch data",
                "No turn-level data", "No data for this dimension"):
        assert msg in md, msg
    j = json.loads(_report(steps_only_run, tmp_path, "json"))
    # verl names were mapped to arldiag's on import; "entropy" is a derived metric name, which the imported value
    # fills because the run recorded no tokens (the steps view's coalesce)
    assert j["signals"]["entropy"] == "entropy" and j["signals"]["grad_norm"] == "grad_norm"
    assert j["signals"]["ppo_kl"] == "ppo_kl"
    assert j["signals"]["success"] == "success_rate"
    assert j["verdict"] == "collapsed" and 33 <= j["collapse_step"] <= 40
    html = _report(steps_only_run, tmp_path, "html")
    assert 'id="fig1"' in html  # the timeline still renders from step metrics


def test_import_csv_values_round_trip(tmp_path):
    import arldiag
    from arldiag.commands.import_steps import import_steps

    csv = tmp_path / "m.csv"
    csv.write_text("it,loss,actor/entropy,tag\n3,0.5,1.25,a\n1,0.25,,b\n2,nan,1.0,c\n3,0.75,,d\n")
    assert import_steps(str(csv), str(tmp_path / "run"), step_column="it", keep_names=True) == 3
    df = arldiag.open_run(str(tmp_path / "run")).sql('select step, loss, "actor/entropy" from steps').df()
    assert df.step.tolist() == [1, 2, 3]
    assert df.loss.tolist()[0] == 0.25 and np.isnan(df.loss.tolist()[1]) and df.loss.tolist()[2] == 0.75
    ent = df["actor/entropy"].tolist()
    assert np.isnan(ent[0]) or ent[0] is None  # an empty cell is not a value
    assert ent[1:] == [1.0, 1.25]              # a later row of the same step keeps earlier values
    import_steps(str(csv), str(tmp_path / "mapped"), step_column="it")  # default: verl names -> arldiag names
    df = arldiag.open_run(str(tmp_path / "mapped")).sql('select "user/entropy" as e, entropy from steps').df()
    # the imported value is kept as user/entropy and fills the derived `entropy` (no token data recorded)
    assert df.e.tolist()[1:] == [1.0, 1.25] and df.entropy.tolist()[1:] == [1.0, 1.25]


def test_import_jsonl_nested_and_errors(tmp_path):
    import arldiag
    from arldiag.commands.import_steps import import_steps

    f = tmp_path / "m.jsonl"
    f.write_text('{"step": 0, "actor": {"grad_norm": 2.5}, "success_rate": 0.5}\n\n'
                 '{"step": 1, "actor": {"grad_norm": 3.5}, "success_rate": 0.25}\n')
    assert cli_main(["import", str(f), "--out", str(tmp_path / "j"), "--rename", "success_rate=success"]) == 0
    df = arldiag.open_run(str(tmp_path / "j")).sql('select grad_norm as g, success from steps').df()  # mapped
    assert df.g.tolist() == [2.5, 3.5] and df.success.tolist() == [0.5, 0.25]
    with pytest.raises(ValueError, match="step_column"):
        import_steps(str(f), str(tmp_path / "k"), step_column="iteration")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0}\nnot json\n')
    with pytest.raises(ValueError, match="line 2"):
        import_steps(str(bad), str(tmp_path / "b"))
    with pytest.raises(ValueError, match="format"):
        import_steps(str(tmp_path / "m.jsonl"), str(tmp_path / "c"), fmt="xml")


def test_cli_errors_are_messages(collapse_run, tmp_path, capsys):
    import shutil

    root = tmp_path / "root"  # holds two runs: a report is about one run
    for name in ("a", "b"):
        shutil.copytree(collapse_run, root / name)
    assert cli_main(["report", str(root), "-o", str(tmp_path / "x.md"), "--no-progress"]) == 2
    assert "pass one run folder" in capsys.readouterr().err
    csv = tmp_path / "a.csv"
    csv.write_text("step,x\n0,1\n")
    assert cli_main(["import", str(csv), "--out", str(tmp_path / "r")]) == 0
    assert cli_main(["import", str(csv), "--out", str(tmp_path / "r")]) == 2  # never appends to a run
    assert "already holds a run" in capsys.readouterr().err


def test_tokenizer_decodes_offender_tokens(collapse_run, tmp_path):
    from tokenizers import Tokenizer, models

    from arldiag.report.build import load_decoder

    vocab = {f"tok{i}": i for i in range(500)}
    vocab["[UNK]"] = 500
    path = tmp_path / "tokenizer.json"
    Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")).save(str(path))
    decode = load_decoder(str(path))
    assert decode(7) == "tok7"
    html = _report(collapse_run, tmp_path, "html", "--tokenizer", str(path))
    assert "tokens decoded with the tokenizer (--tokenizer" in html
    assert re.search(r'title="pos 0 \| id (\d+) \| log r = [^"]+">tok\1</span>', html)
    with pytest.raises(ValueError, match="tokenizer"):
        load_decoder(str(tmp_path / "missing.json"))


def test_injected_findings_and_offender_window_fallback(stable_run):
    """build_report renders whatever analysis it is given (tests, other detector sets); when the window around the
    collapse holds no sequence rows, the offenders come from the whole run."""
    import pandas as pd

    from arldiag.findings import Finding
    from arldiag.report.build import build_report

    def analyse(run, warn_step=995):
        name = run.names[0]
        f = Finding("my_detector", "fired", "warning", title="custom", first_step=3, steps=[3, 4], run=name,
                    recommendation="Do the custom thing.", evidence={"peak_value": 2.0})
        return [f], {name: 1000}, pd.DataFrame({"run": [name], "step": [warn_step], "risk": [0.5],
                                                "state": ["warning"]})

    # a first warning inside the run: the offenders come from around it (the build-up), none with A == 0
    rep = build_report(stable_run, analyse=lambda run: analyse(run, 3), progress=False)
    w = rep.main.window
    assert w[0] < 3 < w[1] < 1000 and rep.main.offenders
    assert all(w[0] <= o.step <= w[1] and o.advantage != 0 for o in rep.main.offenders)
    rep = build_report(stable_run, analyse=analyse, progress=False)
    v = rep.main.verdict
    assert v.status == "collapsed" and v.collapse_step == 1000
    # its only finding fired at step 3, long before the alert episode open at the collapse (from 995): no lead
    assert v.first_precursor is None and v.episode == (995, 995) and v.warning_lead_time == 5
    assert [r.text for r in rep.main.recommendations] == ["Do the custom thing."]
    assert rep.main.window is None and len(rep.main.offenders) == 6


def test_declining_run_is_named_in_every_format(tmp_path):
    """A run whose success never reaches the collapse label's peak (0.2) but falls under half of its best: eval
    success 0.05 for steps 0-4, 0.15 for 5-39, 0 from 40 to 79. Hand-worked: the 10-step trailing mean first drops
    under 0.075 at step 45 (4 of its 10 steps at 0.15), then the label moves back over the raw zeros to step 40."""
    from arldiag.commands.import_steps import import_steps

    rows = ["step,success_rate"] + [f"{s},{0.05 if s < 5 else 0.15 if s < 40 else 0.0}" for s in range(80)]
    csv = tmp_path / "steps.csv"
    csv.write_text("\n".join(rows) + "\n")
    import_steps(str(csv), str(tmp_path / "declining"), name="declining")
    run = str(tmp_path / "declining")
    j = json.loads(_report(run, tmp_path, "json"))
    assert j["verdict"] == "declined" and j["collapse_step"] is None and j["decline_step"] == 40
    assert j["summary"].startswith("Declined: the outcome never reached") and "from step 40" in j["summary"]
    md = _report(run, tmp_path, "md")
    assert "**DECLINED**" in md and "| decline step | 40 |" in md and "| collapse step | none |" in md
    assert "## What moved before the decline\n\n" in md and "before the decline at step 40" in md
    assert isinstance(j["precursors"], list)  # computed for the decline (None only without an event)
    html = _report(run, tmp_path, "html")
    assert "<th>decline step</th><td>40" in html and "decline 40" in html
    assert "<h2>What moved before the decline</h2>" in html and 'href="#precursors">before the decline<' in html
