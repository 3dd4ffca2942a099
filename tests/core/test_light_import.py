"""The collector's import stays light: no DuckDB, Dash, plotly, pandas or torch on the trainer's hot path."""
import subprocess
import sys

CODE = """
import sys, numpy as np, arldiag
col = arldiag.Collector(sys.argv[1])
col.record_update(0, logp=np.zeros((2, 3)), logp_old=np.zeros((2, 3)), advantages=[1.0, -1.0],
                  response_mask=np.ones((2, 3), bool))
col.record_update(0, 1, logp=np.zeros((2, 3)), logp_old=np.zeros((2, 3)), advantages=[1.0, -1.0],
                  response_mask=np.ones((2, 3), bool), defer=True)  # the stacked, once-per-step path
col.record_step(0, {"grad_norm": 1.0})
col.close()
heavy = [m for m in ("duckdb", "dash", "plotly", "pandas", "polars", "torch", "scipy", "wandb", "requests")
         if m in sys.modules]
print(",".join(heavy))
"""


def test_collector_imports_no_heavy_modules(tmp_path):
    out = subprocess.run([sys.executable, "-c", CODE, str(tmp_path / "r")], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "", f"heavy modules imported on the trainer path: {out.stdout.strip()}"
