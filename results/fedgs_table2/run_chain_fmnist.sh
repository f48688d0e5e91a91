#!/bin/bash
# FedGS Table 2, Fashion-MNIST column, under the authors' released protocol (the config's
# default: easyFL's task, standardized inputs, PyTorch's init, their YC, evaluation every
# round), 500 rounds a run, one run per command so that each lands (and is kept) on its own:
#   1. seed 0 of UniformSample, MDSample, FedGS alpha = 0 and alpha = 1 under IDL, YMF0.9, YC0.9
#   2. seed 0 of Power-of-Choice and FedProx under the same three modes
#   3. seeds 1 and 2 of step 1's twelve
# then the tables of what is finished. Resumable and safe to rerun on any machine:
#   nohup results/fedgs_table2/run_chain_fmnist.sh > runs/fedgs_table2_fmnist_chain.log 2>&1 &
# Every command has --seed_from=results/fedgs_table2/fashion_mnist (the committed finished
# runs are copied into runs/ and read back, never trained again: on a fresh machine the chain
# goes on at the first run that folder lacks) and --resume (an unfinished run continues from
# its checkpoint). A finished run's config.json, metrics.jsonl and summary.json are copied
# into results/fedgs_table2/fashion_mnist/ as it lands, and committed with COMMIT=1.
# LANES=2 (default) runs two single-device commands side by side; LANES=1 runs one command
# at a time on both cores (--cpu_devices=2); docs/performance.md has the measurement.
set -u
cd "$(dirname "$0")/../.."  # the repository root
PY=${PY:-.venv/bin/python}
LANES=${LANES:-2}
COMMIT=${COMMIT:-0}
OUT=runs/fedgs_table2_fmnist
RES=results/fedgs_table2/fashion_mnist
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
DEVICES=$([ "$LANES" = 1 ] && echo 2 || echo 1)
COMMON=(--datasets=fashion_mnist "--data_dir=$DATA" --parts=table2 --resume
  "--seed_from=$RES" "--output_dir=$OUT" "--cpu_devices=$DEVICES")
mkdir -p "$OUT" "$RES"
# seeded once before the lanes start (the binary does it too; two lanes must not race on it)
$PY -c "from experiments import common; common.seed_from_results('$RES', '$OUT')" || exit 1

keep() {  # mode method seed: copy a finished run into results/ (and commit it with COMMIT=1)
  local cell="fashion_mnist-$1-$2" s="$3"
  local src="$OUT/cells/$cell/seed$s" dst="$RES/cells/$cell/seed$s"
  grep -q '"complete": true' "$src/summary.json" 2>/dev/null || return 1
  [ -f "$dst/summary.json" ] && return 0
  mkdir -p "$dst" && cp "$src/config.json" "$src/metrics.jsonl" "$src/summary.json" "$dst/"
  [ "$COMMIT" = 1 ] || return 0
  (
    flock 9
    for _ in $(seq 30); do  # another git command may hold the index for a moment
      git add -- "$dst" && git commit -q -m "FedGS Table 2 Fashion-MNIST (released protocol): $cell seed $s, 500 rounds" -- "$dst" && exit 0
      sleep 10
    done
    exit 1
  ) 9>"$OUT/.commit.lock"
}

run() {  # mode method seed
  nice -n 10 $PY -m experiments.fedgs_table2 "${COMMON[@]}" --modes="$1" --methods="$2" \
    --seeds="$3" || return 1
  keep "$1" "$2" "$3"
}

JOBS=()
for m in uniform md fedgs_a0 fedgs_a1; do for mode in idl ymf yc; do JOBS+=("$mode $m 0"); done; done
for m in power_of_choice fedprox; do for mode in idl ymf yc; do JOBS+=("$mode $m 0"); done; done
for s in 1 2; do
  for m in uniform md fedgs_a0 fedgs_a1; do for mode in idl ymf yc; do JOBS+=("$mode $m $s"); done; done
done

lane() {  # lane index: jobs i, i + LANES, ...; a failed run stops its lane
  for ((i = $1; i < ${#JOBS[@]}; i += LANES)); do
    # shellcheck disable=SC2086
    run ${JOBS[$i]} || { echo "lane $1: stopped at ${JOBS[$i]}"; return 1; }
  done
}

PIDS=()
for ((l = 0; l < LANES; l++)); do lane "$l" & PIDS+=($!); done
for p in "${PIDS[@]}"; do wait "$p" || exit 1; done
# the tables (every run finished and read back: nothing trains here)
tables() {  # seeds methods suffix
  nice -n 10 $PY -m experiments.fedgs_table2 "${COMMON[@]}" --seeds="$1" --methods="$2" || exit 1
  for t in table2 table2_vs_paper; do
    for ext in md csv; do cp "$OUT/$t.$ext" "$RES/${t}_$3.$ext"; done
  done
}
tables 0 uniform,md,power_of_choice,fedprox,fedgs_a0,fedgs_a1 seed0
tables 0,1,2 uniform,md,fedgs_a0,fedgs_a1 seeds012
