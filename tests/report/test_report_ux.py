"""What the report shows first: a verdict that says when history is too short, signals on readable scales, training
signals (not timings) before the collapse, offenders from the build-up with decoded text, one findings order."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "sample_runs" / "cispo_s0"


@pytest.fixture(scope="module")
def cispo_report():
    from arldiag.report.build import build_report

    return build_report(str(SAMPLE), progress=False)


def _short_run(path, success=(0.53, 0.4, 0.2, 0.1, 0.06)) -> str:
    import arldiag

    with arldiag.Collector(path, flush_every=1) as col:
        for s, sr in enumerate(success):
            lpo = np.full((4, 5), -1.0, np.float32)
            col.record_update(s, logp=lpo + 0.01, logp_old=lpo, advantages=[1.0, -1.0, 0.5, -0.5],
                              response_mask=np.ones((4, 5), bool))
            col.record_step(s, {"success_rate": sr})
    return str(path)


def test_a_short_run_is_not_called_healthy(tmp_path) -> None:
    from arldiag.report.build import build_report
    from arldiag.verdict import TOO_SHORT, detector_warmup

    run = _short_run(tmp_path / "short")
    warmup = detector_warmup()
    assert warmup == 10  # the success/format detectors' warmup (rollout.py), the largest of the registry
    v = build_report(run, progress=False).main.verdict
    assert v.status == TOO_SHORT and v.summary.startswith(f"Too short: 5 logged steps, the detectors need {warmup}")
    out = subprocess.run([sys.executable, "-m", "arldiag.cli", "detect", run], capture_output=True, text=True)
    assert f"too short: 5 logged steps, the detectors need {warmup}" in out.stdout
    html = subprocess.run([sys.executable, "-m", "arldiag.cli", "report", run, "-o", "-", "--format", "md",
                           "--no-progress"], capture_output=True, text=True).stdout
    assert "too short" in html.lower() and "HEALTHY" not in html.upper().replace("HEALTHY RUN", "")


def test_verdict_with_enough_history_is_healthy() -> None:
    from arldiag.verdict import HEALTHY, TOO_SHORT, verdict

    assert verdict([], None, n_steps=9, warmup=10).status == TOO_SHORT
    assert verdict([], None, n_steps=10, warmup=10).status == HEALTHY
    assert verdict([], None).status == HEALTHY  # unknown length: the old verdict


def test_kl_signals_of_different_scale_get_their_own_panel(cispo_report) -> None:
    from arldiag.report import figures as F
    from arldiag.report import panels as P
    from arldiag.report.data import series

    rep = cispo_report.main
    ppo = np.nanquantile(np.abs(series(rep.steps, rep.cols["ppo_kl"])[1]), 0.95)
    ref = np.nanquantile(np.abs(series(rep.steps, rep.cols["kl_ref_k3"])[1]), 0.95)
    assert ref > 10 * ppo  # the sample run's situation (0.07 vs ~3)
    fig = F.timeline_figure([rep], 1500)
    axis_of = {t.name: t.yaxis for t in fig.data}
    assert axis_of["ppo_kl (k1, update)"] != axis_of["kl_ref_k3 (to reference)"]
    # every panel's step axis shows its tick labels
    xaxes = [k for k in fig.layout.to_plotly_json() if k.startswith("xaxis")]
    assert len(xaxes) == len(fig.layout.annotations) - sum(a.text.startswith(("collapse", "precursor"))
                                                          for a in fig.layout.annotations)  # one per panel
    assert all(fig.layout[k].showticklabels for k in xaxes)
    # and no panel mixes scales more than SCALE_RATIO apart
    for ax in {t.yaxis for t in fig.data}:
        scales = [P.typical_scale([rep], k) for k, c in rep.cols.items()
                  for t in fig.data if t.yaxis == ax and t.hovertemplate.startswith(c + "<br>")]
        scales = [s for s in scales if s > 0]
        if scales:
            assert max(scales) <= P.SCALE_RATIO * min(scales) * (1 + 1e-9), (ax, scales)


def test_split_by_scale_groups() -> None:
    import pandas as pd

    from arldiag.report import panels as P
    from arldiag.report import signals as S

    class R:
        steps = pd.DataFrame({"step": range(5), "a": [0.05] * 5, "b": [0.2] * 5, "c": [3.0] * 5, "d": [0.0] * 5})
        cols = {"ppo_kl": "a", "ppo_kl_k3": "b", "kl_ref_k3": "c", "x": "d"}

    panel = S.Panel("KL", (S.BY_KEY["ppo_kl"], S.BY_KEY["ppo_kl_k3"], S.BY_KEY["kl_ref_k3"]))
    groups = P.split_by_scale([R], panel)
    assert [[sig.key for _, sig in g] for _, g in groups] == [["kl_ref_k3"], ["ppo_kl", "ppo_kl_k3"]]
    assert groups[0][0] == "KL: kl_ref_k3 (to reference)"


def test_precursors_rank_training_signals_only(cispo_report) -> None:
    from arldiag.evaluation.precursors import precursor_scan

    pre = cispo_report.main.precursors
    names = [p["metric"] for p in pre]
    assert names and not any(n.endswith("_s") or n.startswith("user/") or n in ("time", "lr") for n in names)
    for a in names:  # no alias pairs
        assert a + "_mean" not in names
    # the kept entries carry the scan's own numbers
    raw = precursor_scan(cispo_report.main.steps, cispo_report.main.verdict.collapse_step, top=200)
    by = {r["metric"]: r for r in raw}
    assert all(p == by[p["metric"]] for p in pre)


def test_precursors_drop_timings_and_aliases_on_a_hand_built_run() -> None:
    """A timing that moves most, a trainer's series and arldiag's equal alias: only the training signal is kept,
    under arldiag's name."""
    import numpy as np
    import pandas as pd

    from arldiag.report.build import training_precursors

    steps = np.arange(100)
    rng = np.random.default_rng(0)
    noise = lambda: 0.1 * rng.standard_normal(100)  # noqa: E731
    ramp = np.where(steps >= 60, steps - 59.0, 0.0)  # moves from step 60 on, collapse at 90
    length = 5 + ramp + noise()
    df = pd.DataFrame({"step": steps, "update_s": 1 + 10 * ramp + noise(), "response_length": length,
                       "response_length_mean": length, "entropy": 0.5 + 0.05 * ramp + noise()})
    names = [p["metric"] for p in training_precursors(df, 90)]
    assert "update_s" not in names and "response_length" not in names
    assert names[0] == "response_length_mean"


def test_offenders_come_from_the_build_up(cispo_report) -> None:
    rep = cispo_report.main
    c = rep.verdict.collapse_step
    lo, hi = rep.window
    assert hi < c and rep.offenders
    assert all(lo <= o.step <= hi for o in rep.offenders)
    assert all(o.advantage != 0 for o in rep.offenders if o.source in ("top KL", "neg-adv low-IS"))
    if rep.verdict.first_warning_step is not None and rep.verdict.first_warning_step < c:
        assert lo <= rep.verdict.first_warning_step <= hi


def test_offender_tokens_decoded_with_the_runs_tokenizer(collapse_run, tmp_path) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    from arldiag.report.cli import write_report

    run = tmp_path / "run"
    shutil.copytree(collapse_run, run)
    vocab = {f"v{i}": i for i in range(500)} | {"[UNK]": 500}  # the synthetic run's token ids are 0..499
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()
    tok.save(str(run / "tokenizer.json"))
    out = write_report(str(run), str(tmp_path / "r.html"), progress=False)
    html = Path(out).read_text()
    offenders = html[html.index('id="offenders"'):]
    spans = re.findall(r'title="pos \d+ \| id (\d+) \| log r = [^"]*">([^<]*)</span>', offenders)
    assert len(spans) > 20
    assert all(label == f"v{i}" for i, label in spans)  # each token shown as the tokenizer decodes its id
    assert "tokens decoded with the tokenizer" in offenders


def test_findings_in_the_same_order_in_html_and_cli(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-m", "arldiag.cli", "detect", str(SAMPLE)], capture_output=True,
                         text=True).stdout
    cli = re.findall(r"^  (?:CRITICAL|WARNING|WATCH|INFO)\s+(\S+)", out, re.M)
    subprocess.run([sys.executable, "-m", "arldiag.cli", "report", str(SAMPLE), "-o", str(tmp_path / "r.html"),
                    "--no-progress"], check=True, capture_output=True)
    html = (tmp_path / "r.html").read_text()
    table = html[html.index('id="findings"'):html.index('id="recommendations"')]
    rows = re.findall(r'<tr class="row-(\w+)"><td class="sev-\w+">\w+</td><td>([^<]+)</td>', table)
    assert len(cli) >= 3 and [d for _, d in rows] == cli
    sev = [s for s, _ in rows]
    rank = {"info": 0, "watch": 1, "warning": 2, "critical": 3}
    assert [rank[s] for s in sev] == sorted((rank[s] for s in sev), reverse=True)
    # every section folds
    for sec in ("verdict", "timeline", "findings", "recommendations", "precursors", "offenders"):
        assert f'<details open class="section" id="{sec}"><summary><h2>' in html


def test_order_findings() -> None:
    from arldiag.findings import Finding, order_findings

    fs = [Finding("q", "quiet", "info"), Finding("s", "skipped", "info", skipped_reason="no data"),
          Finding("w_late", "fired", "warning", first_step=9, steps=[9]),
          Finding("c", "fired", "critical", first_step=20, steps=[20]),
          Finding("w_early", "fired", "warning", first_step=3, steps=[3])]
    assert [f.detector for f in order_findings(fs)] == ["c", "w_early", "w_late", "s", "q"]
