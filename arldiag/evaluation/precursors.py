"""What moved before a collapse: a per-metric shift test over the steps frame, for `arldiag eval-detect
--precursors` and the post-mortem report. It answers "could any recorded statistic have warned in time?"."""
from __future__ import annotations

LEAD = (10, 20)   # the lead window: steps c-20 .. c-10 before the collapse step c
BASE = 40         # compared with the 40 steps before the lead window


def precursor_scan(frame, collapse: int, lead: tuple[int, int] = LEAD, base: int = BASE,
                   top: int = 10) -> list[dict]:
    """Which step metrics moved before a collapse: for each numeric column, z = (mean over the steps
    [c - lead[1], c - lead[0]] - mean over the ``base`` steps before them) / (std of those base steps / sqrt(n)),
    n the number of steps in the lead window. The ``top`` largest |z| first. A collapse that no recorded metric
    announces shows up here as small |z| everywhere (steps with the metric missing are left out)."""
    import numpy as np
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    s = frame["step"].to_numpy()
    pre = (s >= collapse - lead[1]) & (s <= collapse - lead[0])
    ref = (s >= collapse - lead[1] - base) & (s < collapse - lead[1])
    out = []
    for col in frame.columns:
        if col in ("step", "time") or not is_numeric_dtype(frame[col]) or is_bool_dtype(frame[col]):
            continue
        x = frame[col].to_numpy(dtype=np.float64, na_value=np.nan)
        a, b = x[pre][np.isfinite(x[pre])], x[ref][np.isfinite(x[ref])]
        if a.size < 3 or b.size < 10:
            continue
        sd = float(b.std(ddof=1))
        if not sd > 1e-9 * abs(float(b.mean())):  # a constant (up to float rounding), e.g. a fixed learning rate
            continue
        z = (float(a.mean()) - float(b.mean())) / (sd / np.sqrt(a.size))
        out.append({"metric": col, "z": round(z, 2), "base_mean": float(b.mean()), "lead_mean": float(a.mean())})
    out.sort(key=lambda r: (-abs(r["z"]), r["metric"]))
    return out[:top]
