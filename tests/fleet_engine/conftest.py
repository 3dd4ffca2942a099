"""Fixtures of the fleet-engine tests: a root of 54 synthetic runs (some collapsing, three damaged, one still being
written), a local Ray started once per session (2 CPUs, no dashboard), and moto's S3 server.

The environment a Ray worker needs (the S3 endpoint and credentials, ARLDIAG_SUMMARY_CACHE=0 so each engine really
computes its rows) is set before Ray starts: local workers inherit the driver's environment at ``ray.init``.
Writing 54 runs through the Collector would take half a minute, so 9 distinct runs are written and copied under
new names and algorithms (a copy's rows differ by name, path and algorithm)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from integrations.need import need

ALGOS = ("grpo", "cispo", "gspo")
N_COPIES = 6  # 9 originals x 6 = 54 runs


def _set_name(run: Path, name: str, algorithm: str) -> None:
    m = json.loads((run / "run.json").read_text())
    m["name"], m["algorithm"] = name, algorithm
    (run / "run.json").write_text(json.dumps(m))


def write_fleet(root: Path) -> dict:
    """The fleet under ``root``: sweep_a/ and sweep_b/ of healthy and collapsing runs, damaged/ (a broken run.json,
    a truncated token part, a truncated steps part) and live/ (a run being written). Returns the layout."""
    from arldiag.synth import write_synth

    seeds = root / "_seeds"
    specs = [(60, None), (60, 48), (50, None), (60, 45), (40, None), (60, 50), (45, None), (60, 47), (30, None)]
    for i, (steps, c) in enumerate(specs):
        write_synth(seeds / f"s{i}", tokens=3000, steps=steps, max_len=16, collapse_at=c, seed=i, flush_every=20)
    n = 0
    for k in range(N_COPIES):
        sweep = "sweep_a" if k < 3 else "sweep_b"
        for i in range(len(specs)):
            dst = root / sweep / f"run{n:02d}"
            shutil.copytree(seeds / f"s{i}", dst)
            _set_name(dst, f"run{n:02d}", ALGOS[(i + k) % 3])
            n += 1
    shutil.rmtree(seeds)
    # damaged runs, moved out of the sweeps
    dmg = root / "damaged"
    dmg.mkdir()
    for name in ("run00", "run01", "run02"):
        shutil.move(str(root / "sweep_a" / name), dmg / name)
    (dmg / "run00" / "run.json").write_text('{"name": "run00", "schema_ver')  # cut short
    tok = sorted((dmg / "run01" / "tokens").glob("*.parquet"))[0]
    tok.write_bytes(tok.read_bytes()[: tok.stat().st_size // 2])  # a copy cut short: its rows are lost
    stp = sorted((dmg / "run02" / "steps").glob("*.parquet"))[-1]
    stp.write_bytes(stp.read_bytes()[:100])
    # a run being written: status running, a part not yet renamed into place
    live = root / "live" / "run03"
    live.parent.mkdir()
    shutil.move(str(root / "sweep_a" / "run03"), live)
    m = json.loads((live / "run.json").read_text())
    m["status"] = "running"
    (live / "run.json").write_text(json.dumps(m))
    (live / "tokens" / "rank00000-part000099.parquet.tmp").write_bytes(b"PAR1 half written")
    return {"runs": n, "broken": "damaged/run00"}


@pytest.fixture(scope="session")
def fleet_env(s3_endpoint):
    """The environment every Ray worker inherits (set before Ray starts): moto's S3 server (tests/conftest.py)."""
    url = s3_endpoint
    env = {"AWS_ENDPOINT_URL": url, "AWS_ENDPOINT_URL_S3": url, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1", "ARLDIAG_SUMMARY_CACHE": "0"}
    saved = {k: os.environ.get(k) for k in list(env) + ["AWS_PROFILE", "AWS_SESSION_TOKEN", "ARLDIAG_ENGINE"]}
    os.environ.update(env)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "ARLDIAG_ENGINE"):
        os.environ.pop(k, None)
    yield url
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def ray_local(fleet_env):
    """Local Ray, started once for the session (the engines find it initialised and leave it running)."""
    ray = need("ray")
    need("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def fleet(tmp_path_factory, fleet_env) -> Path:
    root = tmp_path_factory.mktemp("fleet")
    write_fleet(root)
    return root


@pytest.fixture(scope="session")
def bucket(fleet, fleet_env) -> str:
    """The first 6 runs of sweep_b/ and damaged/ uploaded to a fresh bucket: s3://BUCKET/fleet/..."""
    import uuid

    import fsspec
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = fsspec.filesystem("s3")
    name = f"arldiag-{uuid.uuid4().hex[:12]}"
    fs.mkdir(name)
    for run in sorted((fleet / "sweep_b").iterdir())[:6]:
        fs.put(str(run), f"{name}/fleet/sweep_b/{run.name}", recursive=True)
    fs.put(str(fleet / "damaged"), f"{name}/fleet/damaged", recursive=True)
    return f"s3://{name}/fleet"
