#!/usr/bin/env bash
# Regenerate the sample runs (see README.md): sample_runs/run_all.sh [all|aggressive|drift|cispo|cispo_nalis|sapo|gspo|sampo]. Same model, environment, seed and settings for every run; only the
# algorithm (and --nalis-mask for the masked CISPO run) differ. Runs go to sample_runs/<name>/, logs to <name>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
COMMON=(--env sokoban --steps "${STEPS:-200}" --seed "${SEED:-0}" --hidden-size 128 --n-tasks 4 --group-size 4
        --lr "${LR:-1e-4}" --n-minibatches 8 --ppo-epochs 1 --token-sample-rate 0.02 --threads 1)
run() {  # run NAME ALGO [extra options]; NAME gets ${SUFFIX} appended
  local name=$1${SUFFIX:-} algo=$2; shift 2
  rm -rf "sample_runs/$name"
  /usr/bin/time -v arldiag train --algo "$algo" --out "sample_runs/$name" --name "$name" "${COMMON[@]}" "$@" \
    > "sample_runs/$name.log" 2>&1
  arldiag compact "sample_runs/$name"  # one part per table (same rows, a fraction of the files and bytes)
}
case "${1:-all}" in
  cispo) run cispo cispo ;;
  cispo_nalis) run cispo_nalis cispo --nalis-mask ;;
  sapo) run sapo sapo ;;
  gspo) run gspo gspo ;;
  sampo) run sampo sampo ;;
  all) run cispo cispo & run cispo_nalis cispo --nalis-mask & run gspo gspo & run sampo sampo & wait
       run sapo sapo ;;
  # the more aggressive set of README.md: LR=2e-4 STEPS=60 SUFFIX=_lr2e-4 sample_runs/run_all.sh aggressive
  aggressive) run cispo cispo & run cispo_nalis cispo --nalis-mask & run gspo gspo &
              run cispo_nalis3e-3 cispo --nalis-mask --nalis-delta 3e-3 & wait; run sapo sapo ;;
  cispo_nalis3e-3) run cispo_nalis3e-3 cispo --nalis-mask --nalis-delta 3e-3 ;;
  # a tool-use run with retokenization drift and a bfloat16 sampler (cases for the mismatch/drift detectors)
  drift) rm -rf sample_runs/calculator_atpo_drift
         /usr/bin/time -v arldiag train --algo atpo --env calculator --out sample_runs/calculator_atpo_drift \
           --name calculator_atpo_drift --steps 60 --seed 0 --hidden-size 64 --n-tasks 4 --group-size 4 --lr 1e-4 \
           --n-minibatches 4 --retokenize --rollout-dtype bfloat16 --token-sample-rate 0.05 --threads 1 \
           > sample_runs/calculator_atpo_drift.log 2>&1
         arldiag compact sample_runs/calculator_atpo_drift ;;
esac
