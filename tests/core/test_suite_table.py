"""Reproducing runs never edits the project's files: `suite.py table` prints, only `table --write` writes."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_table_prints_and_leaves_the_readme_alone():
    readme = ROOT / "sample_runs" / "README.md"
    before = readme.read_bytes()
    res = subprocess.run([sys.executable, str(ROOT / "sample_runs" / "suite.py"), "table"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "cispo_s0" in res.stdout and "|" in res.stdout
    assert readme.read_bytes() == before
