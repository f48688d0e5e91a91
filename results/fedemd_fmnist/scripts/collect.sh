#!/bin/bash
# Copy the finished tables and per-round files of run_chain.sh's runs from runs/ to results/
# (runs/<name>/ goes to results/ as folders.sh says)
# (never checkpoints). Usage, from anywhere: results/fedemd_fmnist/scripts/collect.sh
# A cell is copied only when its run finished (summary.json says "complete": true); the tables (*.md, *.csv,
# *.png written by experiments.fedemd) are copied whole: they cover the cells that finished.
set -euo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
source results/fedemd_fmnist/scripts/folders.sh
for name in "${!RESULT_OF[@]}"; do
  src=runs/$name dst=results/${RESULT_OF[$name]}
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
