#!/bin/bash
# FedEMD Table 1 whole, Fashion-MNIST row: TiFL, FedFast and FedProx beside Random and FedEMD
# under FedAvg (the study's default set-up: the text's reading, one StepLR stepped every 100
# rounds), all five under FedSGD (its default reading: one local epoch, the plain mean), then
# SVB under FedAvg. One cell and seed per command, seed 0
# of every cell first, so each finished cell can be committed as it lands.
# Resumable: rerun this script: nohup results/fedemd_fmnist/scripts/run_table1.sh > runs/fedemd_table1_chain.log 2>&1 &
# (every command has --resume; finished cells are skipped, so a fresh machine continues at the
# first cell that is not in results/). Copy finished cells to results/ with
# results/fedemd_fmnist/scripts/run_table1.sh collect
# and, once the table commands at the end have run, the tables too with "collect tables"
# (the one-cell commands leave partial tables in runs/, never copied).
set -x
cd "$(dirname "$0")/../../.."  # the repository root
# the Python with fedjax_sel installed (PYTHON=.venv/bin/python ...), and the folder of the four
# Fashion-MNIST IDX files (default: where Debian's dataset-fashion-mnist installs them)
PY=${PYTHON:-python}
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
source results/fedemd_fmnist/scripts/lanes.sh  # LANES, DEVICES, phase
# Where each run folder (runs/<name>/) is committed under results/.
declare -A RESULT_OF=(
  [fedemd_fmnist_text_round_lr]=fedemd_fmnist/text_reading_lr_per_round_default/table1
  [fedemd_fmnist_text_round_lr_fedsgd]=fedemd_fmnist/text_reading_lr_per_round_default/table1_fedsgd
  [fedemd_fmnist_text_round_lr_svb]=fedemd_fmnist/text_reading_lr_per_round_default/svb
  [fedemd_fmnist_text_round_lr_fedsgd_gradient]=fedemd_fmnist/text_reading_lr_per_round_default/table1_fedsgd_gradient
)
if [ "$1" = collect ]; then  # finished cells (never checkpoints) [and the tables], to results/
  for name in "${!RESULT_OF[@]}"; do
    src=runs/$name dst=results/${RESULT_OF[$name]}
    [ -d "$src" ] || continue
    mkdir -p "$dst"
    if [ "$2" = tables ]; then
      for f in "$src"/*.md "$src"/*.csv "$src"/*.png; do [ -e "$f" ] && cp "$f" "$dst/"; done
    fi
    for cell in "$src"/cells/*/seed*; do
      # the SVB folder's Random cells are copies of Table 1's (committed there)
      [ "$name" = fedemd_fmnist_text_round_lr_svb ] && [[ $cell == */1_excl_random/* ]] && continue
      finished "$cell" || continue
      out=$dst/${cell#"$src"/}
      mkdir -p "$out" && cp "$cell"/{config.json,metrics.jsonl,summary.json} "$out/"
    done
  done
  exit 0
fi
# A fresh machine has no runs/: seed it with the committed finished cells (config.json,
# metrics.jsonl, summary.json with "complete"), which the binary reads back instead of training
# again (experiments.common.run_cells). -n never overwrites a cell that runs/ already holds.
for name in "${!RESULT_OF[@]}"; do
  cells=results/${RESULT_OF[$name]}/cells
  [ -d "$cells" ] || continue
  mkdir -p "runs/$name" && cp -rn "$cells" "runs/$name/"
done
T1=(--data_dir="$FMNIST" --cpu_devices="$DEVICES" --resume --config.maverick_classes="(1,0,2)"
    --config.trace_shapley=False --config.scenarios="('1_excl',)"
    --config.base.lr_schedule_unit=round --config.base.lr_step_size=100)
AVG=(--output_dir=runs/fedemd_fmnist_text_round_lr)
SGD=(--config.aggregation_setup=fedsgd --output_dir=runs/fedemd_fmnist_text_round_lr_fedsgd)
SVB=(--output_dir=runs/fedemd_fmnist_text_round_lr_svb)
# one (method, seed) cell beside Random's (R@99 is relative to Random's best, same seed):
# Random's cell of that seed trains first where it is missing
cell() {  # cell <AVG|SGD|SVB> <method> <seed>
  local -n setup=$1
  local methods="('random','$2')"
  [ "$2" = random ] && methods="('random',)"
  nice -n 10 $PY -m experiments.fedemd "${T1[@]}" "${setup[@]}" --config.methods="$methods" \
    --seeds="$3"
}
# Two lanes (lanes.sh) never train the same cell: a command that would train Random's cell of
# a seed (FedSGD seeds 1, 2) waits for the phase that trains it.
# seed 0 of every cell (Random's FedAvg and FedSGD cells of seed 0 are committed) and
# Random's FedSGD cells of seeds 1, 2; then seeds 1, 2 of the rest
phase "AVG tifl 0" "AVG fedfast 0" "AVG fedprox 0" "SGD tifl 0" "SGD fedfast 0" "SGD fedprox 0" \
  "SGD fedemd 0" "SGD random 1" "SGD random 2"
JOBS=()
for seed in 1 2; do
  for m in tifl fedfast fedprox; do JOBS+=("AVG $m $seed"); done
  for m in tifl fedfast fedprox fedemd; do JOBS+=("SGD $m $seed"); done
done
phase "${JOBS[@]}"
# the tables of all five methods and three seeds (every cell finished: nothing trains)
ALL="--config.methods=('random','tifl','fedfast','fedprox','fedemd')"
nice -n 10 $PY -m experiments.fedemd "${T1[@]}" "${AVG[@]}" "$ALL" --seeds=0,1,2 || exit 1
nice -n 10 $PY -m experiments.fedemd "${T1[@]}" "${SGD[@]}" "$ALL" --seeds=0,1,2 || exit 1
# SVB (Shapley) under FedAvg, ~1.5 h a seed; Random's finished cells are copied in, so that
# only SVB trains
mkdir -p runs/fedemd_fmnist_text_round_lr_svb/cells/1_excl_random
cp -rn runs/fedemd_fmnist_text_round_lr/cells/1_excl_random/seed* runs/fedemd_fmnist_text_round_lr_svb/cells/1_excl_random/
phase "SVB shapley 0" "SVB shapley 1" "SVB shapley 2"
# SVB's tables over its three seeds beside Random's (every cell finished: nothing trains); the
# one-cell commands above leave tables of their last seed only, which "collect tables" copies
nice -n 10 $PY -m experiments.fedemd "${T1[@]}" "${SVB[@]}" "--config.methods=('random','shapley')" \
  --seeds=0,1,2 || exit 1
