#!/usr/bin/env bash
# Distributed partitioning with ParMETIS under Slurm (docs/partitioning.md).
#
#   sbatch -N 2 --ntasks-per-node=4 scripts/parmetis_srun.sh GRAPH PARTS OUT
#
# `gnnflow partition --method parmetis --launcher srun --np $SLURM_NTASKS` starts
# `srun -n K python -m gnnflow.partition.parmetis ...` itself: every rank reads only
# its contiguous vertex range of the graph store (which must be on a shared file
# system), rank 0 gathers the parts, and the book is written on the submitting node.
set -euo pipefail
graph=${1:?graph store}; parts=${2:?number of parts}; out=${3:?output partition book}
export SCOTCH_PTHREAD_NUMBER=1
exec gnnflow partition "$graph" --method parmetis --launcher srun --np "${SLURM_NTASKS:-2}" \
    --parts "$parts" --out "$out"
