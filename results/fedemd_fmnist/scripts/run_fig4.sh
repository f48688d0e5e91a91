#!/bin/bash
# FedEMD Fig. 4 whole, Fashion-MNIST, the default set-up (the text's reading, one StepLR
# stepped every 100 rounds): TiFL, FedFast and FedProx on seed 0 and seeds 1, 2 of Random and
# FedEMD, in the four scenarios with 2-3 Mavericks (seed 0 of Random and FedEMD is
# committed). One (scenario, method, seed) per command, in the order that settles the claims
# soonest: the shared scenarios' baselines (Fig. 4b: "Random performs the most similar to
# FedEMD"), their seeds 1, 2 ("the standard deviation of FedEMD is smaller"), then the
# exclusive scenarios', and last TiFL's seeds 1, 2 there (Fig. 4a: "TiFL's results differ
# drastically over runs"). STEPS picks some of the five: STEPS=1 runs the shared baselines.
# Resumable: rerun this script (every command has --resume; finished cells are skipped, and
# on a fresh machine the committed cells are copied from results/ into runs/ first):
#   nohup env PYTHON=.venv/bin/python results/fedemd_fmnist/scripts/run_fig4.sh > runs/fedemd_fig4_chain.log 2>&1 &
# Copy the finished cells (config.json, metrics.jsonl, summary.json; never checkpoints) into
# results/fedemd_fmnist/text_reading_lr_per_round_default/fig4/cells/ with
#   results/fedemd_fmnist/scripts/run_fig4.sh collect
# The page's tables come from the cells: results/fedemd_fmnist/scripts/fig4_table.py.
# Once every step has run, the binary's tables of Random and FedEMD over seeds 0-2 in the four
# scenarios (r99.md, final_accuracy.md, maverick_share.md, participation.md, the figures) are
#   results/fedemd_fmnist/scripts/run_fig4.sh tables
# which reads the finished cells (it refuses while one of the 24 is missing: nothing trains)
# and copies the tables into results/fedemd_fmnist/text_reading_lr_per_round_default/fig4/.
# LANES=2 (default) runs two one-device commands side by side, LANES=1 one two-device command
# at a time (lanes.sh).
set -x
cd "$(dirname "$0")/../../.."  # the repository root
PY=${PYTHON:-python}
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
source results/fedemd_fmnist/scripts/lanes.sh  # LANES, DEVICES, phase
for seed in ${SEEDS:-1 2}; do
  case $seed in
    1|2) ;;
    *) echo "SEEDS=$SEEDS: unknown seed $seed; allowed: 1 2 (seed 0 is step 1's and 3's)" >&2; exit 2 ;;
  esac
done
RUNS=runs/fedemd_fmnist_text_fig4
CELLS=results/fedemd_fmnist/text_reading_lr_per_round_default/fig4/cells
if [ "$1" = collect ]; then
  for cell in "$RUNS"/cells/*/seed*; do
    finished "$cell" || continue
    out=$CELLS/${cell#"$RUNS"/cells/}
    [ -f "$out/summary.json" ] && continue
    mkdir -p "$out" && cp "$cell"/{config.json,metrics.jsonl,summary.json} "$out/"
  done
  exit 0
fi
mkdir -p "$RUNS" && cp -rn "$CELLS" "$RUNS/"
FIG4=(--data_dir="$FMNIST" --cpu_devices="$DEVICES" --resume --config.maverick_classes="(1,0,2)"
      --config.trace_shapley=False --output_dir="$RUNS")
if [ "$1" = tables ]; then
  ALL=(2_excl 3_excl 2_shared 3_shared)
  for sc in "${ALL[@]}"; do for m in random fedemd; do for seed in 0 1 2; do
    finished "$RUNS/cells/${sc}_$m/seed$seed" || {
      echo "run_fig4.sh tables: cell ${sc}_$m/seed$seed has not finished; run the steps first" >&2
      exit 2
    }
  done; done; done
  nice -n 10 $PY -m experiments.fedemd "${FIG4[@]}" \
    --config.scenarios="('2_excl','3_excl','2_shared','3_shared')" \
    --config.methods="('random','fedemd')" --seeds=0,1,2 || exit 1
  for f in "$RUNS"/*.md "$RUNS"/*.csv "$RUNS"/*.png; do [ -e "$f" ] && cp "$f" "${CELLS%/cells}/"; done
  exit 0
fi
cell() {  # cell <scenario> <method> <seed>: Random's cell of that seed trains first if missing
  nice -n 10 $PY -m experiments.fedemd "${FIG4[@]}" --config.scenarios="('$1',)" \
    --config.methods="('random','$2')" --seeds="$3"
}
# STEPS (default "1 2 3 4 5") picks the steps to run, e.g. STEPS=1 for the shared baselines only;
# SEEDS (default "1 2") the seeds of steps 2, 4 and 5, e.g. SEEDS=1 to finish seed 1 first.
# Two commands running at once never share a (scenario, seed): step 2's and 4's commands train
# Random's cell of their own scenario and seed; step 5's need step 4's Random cells, so they
# run in a later phase.
JOBS=() LATER=()
for step in ${STEPS:-1 2 3 4 5}; do
  case $step in
    1) for sc in 2_shared 3_shared; do for m in tifl fedfast fedprox; do JOBS+=("$sc $m 0"); done; done ;;
    2) for seed in ${SEEDS:-1 2}; do for sc in 2_shared 3_shared; do JOBS+=("$sc fedemd $seed"); done; done ;;
    3) for sc in 2_excl 3_excl; do for m in tifl fedfast fedprox; do JOBS+=("$sc $m 0"); done; done ;;
    4) for seed in ${SEEDS:-1 2}; do for sc in 2_excl 3_excl; do JOBS+=("$sc fedemd $seed"); done; done ;;
    5) for seed in ${SEEDS:-1 2}; do for sc in 2_excl 3_excl; do LATER+=("$sc tifl $seed"); done; done ;;
    *) echo "STEPS=$STEPS: unknown step $step; allowed: 1 2 3 4 5" >&2; exit 2 ;;
  esac
done
phase "${JOBS[@]}"
phase "${LATER[@]}"
