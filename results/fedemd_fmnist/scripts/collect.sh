#!/bin/bash
# Copy the finished tables and per-round files of run_chain.sh's runs from runs/ to results/
# (never checkpoints). Usage, from anywhere: results/fedemd_fmnist_text/collect.sh
# A cell is copied only when its run finished (summary.json says "complete": true); the tables (*.md, *.csv,
# *.png written by experiments.fedemd) are copied whole: they cover the cells that finished.
set -euo pipefail
cd "$(dirname "$0")/../.."  # the repository root
for name in fedemd_fmnist_text{,_round_lr,_round_lr_nostep,_round_lr_mean,_round_lr_svb,_fig4,_fig4_pp}; do
  src=runs/$name dst=results/$name
  [ -d "$src" ] || continue
  mkdir -p "$dst"
  for f in "$src"/*.md "$src"/*.csv "$src"/*.png; do
    [ -e "$f" ] && cp "$f" "$dst/"
  done
  for cell in "$src"/cells/*/seed*; do
    python3 -c 'import json,sys; sys.exit(not json.load(open(sys.argv[1])).get("complete"))' \
      "$cell/summary.json" 2>/dev/null || continue
    out=$dst/${cell#"$src"/}
    mkdir -p "$out"
    cp "$cell"/{config.json,metrics.jsonl,summary.json} "$out/"
    echo "copied $cell"
  done
done
