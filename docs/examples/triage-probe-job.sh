#!/usr/bin/env bash
# A stand-in for a flaky distributed job, the scenario docs/triage.md walks through:
# - without an allocator setting, every other trial dies with an NCCL error (4 of 8);
# - PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (pytorch_alloc_expandable_segments) fixes it;
# - HSA_NO_SCRATCH_RECLAIM=1 (hsa_no_scratch_reclaim) hangs: silent and idle until killed.
set -u
echo "step 1 took 1$((RANDOM % 10)).$((RANDOM % 10)) ms"
if [ -n "${HSA_NO_SCRATCH_RECLAIM:-}" ]; then
    echo "rank 0: waiting in all_reduce"
    exec sleep 600
fi
if [ -z "${PYTORCH_CUDA_ALLOC_CONF:-}" ] && [ $((${AORTA_TRIAL:-0} % 2)) -eq 1 ]; then
    echo "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error" >&2
    exit 1
fi
echo "step 2 took 1$((RANDOM % 10)).$((RANDOM % 10)) ms"
echo "step 3 took 1$((RANDOM % 10)).$((RANDOM % 10)) ms"
