"""The base install (no extras) reads and diagnoses logs: each command of issue 36 item 4 runs in a subprocess in
which every optional dependency (plotly, tokenizers, dash, torch, scipy, tqdm, ...) is made uninstalled, the way
`pip install arldiag` leaves a machine. `.ci/run` repeats this with the real base wheel; this test catches a module
that pulls an extra onto the light path before CI does."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_runs" / "cispo_s0"
OPTIONAL = ("plotly", "tokenizers", "dash", "torch", "transformers", "scipy", "tqdm", "tensorboard", "wandb",
            "fsspec", "s3fs", "trl", "ray", "polars", "requests", "verl")

# A finder ahead of the others: importing an optional module fails as it does when the package is absent, and
# importlib.util.find_spec (how arldiag asks "is it installed?") answers None.
RUNNER = textwrap.dedent(f"""
    import importlib.util, sys
    BLOCKED = {OPTIONAL!r}
    class Absent:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
    sys.meta_path.insert(0, Absent())
    _find = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] in BLOCKED else _find(name, *a)
    from arldiag.cli import main
    rc = main(sys.argv[1:])
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not loaded, loaded
    sys.exit(rc)
""")


def _arldiag(tmp_path: Path, *args: str, debug: bool = True) -> subprocess.CompletedProcess:
    script = tmp_path / "base.py"
    script.write_text(RUNNER)
    return subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **({"ARLDIAG_DEBUG": "1"} if debug else {})})


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    """A development log (TRL, collapses at step 90) imported on the base install."""
    tmp = tmp_path_factory.mktemp("base")
    csv = tmp / "log.csv"
    rows = ["step,reward,completions/mean_length"] + [
        f"{s},{0.6 if s < 90 else 0.05},{200 + (s >= 80) * 400}" for s in range(0, 140, 5)]
    csv.write_text("\n".join(rows) + "\n")
    out = _arldiag(tmp, "import", "csv", str(csv), "--out", str(tmp / "runs" / "log"))
    assert out.returncode == 0, out.stderr
    return tmp / "runs" / "log"


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_report_without_plotly_or_tokenizers(tmp_path, imported, fmt):
    for run in (imported, SAMPLE):  # an imported log and a run with token tables (ids shown, with a note)
        dest = tmp_path / f"{run.name}.{fmt}"
        out = _arldiag(tmp_path, "report", str(run), "--format", fmt, "-o", str(dest))
        assert out.returncode == 0, out.stderr[-2000:]
        text = dest.read_text()
        if fmt == "json":
            assert json.loads(text)["verdict"]
        else:
            assert "COLLAPSED" in text or "AT RISK" in text or "HEALTHY" in text.upper()
    if fmt == "md":  # token ids instead of text, with a note naming what decodes them
        assert "tokenizers" in (tmp_path / "cispo_s0.md").read_text()


@pytest.mark.parametrize("args", [("detect", "{run}"), ("ls", "{root}"), ("eval-detect", "{root}"),
                                  ("verify", "{run}")])
def test_diagnose_commands(tmp_path, imported, args):
    argv = [a.format(run=imported, root=imported.parent) for a in args]
    out = _arldiag(tmp_path, *argv)
    assert out.returncode == 0, out.stderr[-2000:]


def test_an_extra_is_named_in_one_line(tmp_path, imported):
    out = _arldiag(tmp_path, "dashboard", str(imported.parent), debug=False)  # debug re-raises
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "arldiag dashboard: needs dash, which is not installed: pip install 'arldiag[dashboard]'"]
