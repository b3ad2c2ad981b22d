#!/bin/bash
# The race smoke recipe on two Slurm nodes, 8 GPUs each, from a login node: writes the sbatch
# script into the run directory, submits it, follows the job and prints the summary.
# Exit code: 0 complete, 1 a node failed or the job timed out, 2 refused before submitting,
# 130 interrupted (the job was cancelled; resume with `aorta sweep resume RUN_DIR`).
set -euo pipefail
OUT=${OUT:-/shared/triage_results}          # on a file system every node shares

aorta launch --slurm --nodes 2 --partition "${PARTITION:-gpu}" --time 0:30:00 \
    --gpus-per-node 8 --sbatch-arg=--exclusive \
    --recipe recipes/race-smoke.yaml --nproc-per-node 8 -o "$OUT"

# The same inside an allocation you already hold:
#   salloc -N2 --gpus-per-node=8 --exclusive \
#     aorta launch --slurm --recipe recipes/race-smoke.yaml --nproc-per-node 8 -o "$OUT"
# One srun task per GPU instead of torchrun:
#   salloc -N2 --ntasks-per-node=8 --gpus-per-node=8 \
#     aorta launch --slurm --srun-ranks --recipe recipes/race-smoke.yaml --nproc-per-node 8 -o "$OUT"
