#!/bin/sh
# Submit a sharded sweep to Slurm: the array, then the merge after it.
# Environment (SPECULA, AGENT, INPUT, SWEEP_DIR, CONFIGS, CLOCK) is passed on.
set -eu
here=$(dirname "$0")
jid=$(sbatch --parsable --export=ALL "$here/sweep.slurm")
sbatch --export=ALL --dependency=afterok:"${jid%%;*}" "$here/merge.slurm"
echo "submitted array job $jid and its merge"
