#!/bin/bash
# Prepare the device check of benchmarks/gpu_check.sh on a machine with pip access: wheels of what the GPU machine
# lacks (its image has torch, transformers, pyarrow, pandas, numpy; not duckdb, trl, datasets, verl, arldiag) into
# DEST/whl, the test and benchmark files into DEST/tree. DEST must be inside the checkout the device tool sends
# and ignored by git (e.g. `echo /.gpu/ >> .git/info/exclude`); name it in the run's `carry`. About 33 MB.
#   bash benchmarks/gpu_bundle.sh /path/to/checkout/.gpu
# then, on the device: bash .gpu/tree/benchmarks/gpu_check.sh
set -euo pipefail
DEST=${1:?usage: gpu_bundle.sh DEST}
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$DEST/whl"
P="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64"
P="$P --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any"
# trl as installed here; verl without its dependency set (as .ci/run installs it): the modules its policy-loss
# registry imports need tensordict, omegaconf, codetiming and pydantic; datasets needs dill and multiprocess
for pkg in duckdb==2.0.1 "trl==$(python3 -c 'import trl; print(trl.__version__)')" datasets==5.2.0 dill==0.4.1 \
           multiprocess==0.70.19 verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 "orjson<3.12" importlib_metadata \
           codetiming==1.4.0 pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2 \
           omegaconf==2.3.1; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $P \
    -d "$DEST/whl" "$pkg"
done
python3 -m pip wheel -q --no-deps -w "$DEST/whl" antlr4-python3-runtime==4.9.3   # sdist only on PyPI: built here
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$DEST/whl" "$SRC"      # arldiag itself
rm -rf "$DEST/tree" && mkdir -p "$DEST/tree/tests/core" "$DEST/tree/tests/integrations" "$DEST/tree/benchmarks"
cp "$SRC/pyproject.toml" "$DEST/tree/"
cp "$SRC/benchmarks/gpu_overhead.py" "$SRC/benchmarks/gpu_check.sh" "$DEST/tree/benchmarks/"
cp "$SRC/tests/conftest.py" "$DEST/tree/tests/"
cp -r "$SRC/tests/gpu" "$DEST/tree/tests/"
cp "$SRC"/tests/integrations/{__init__,need,trl_setup}.py "$DEST/tree/tests/integrations/"
cp "$SRC"/tests/core/{conftest,test_host_reads,test_stats_torch}.py "$DEST/tree/tests/core/"
du -sh "$DEST"
