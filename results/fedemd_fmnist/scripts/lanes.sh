# Sourced by run_fig4.sh and run_table1.sh (from the repository root): two one-device commands
# side by side give 1.18x the rounds an hour of one two-device command on this study
# (docs/performance.md). LANES=2 (default) runs them so, LANES=1 one command at a time on both
# cores. Sets DEVICES (each command's --cpu_devices) and defines phase.
case ${LANES:=2} in 1|2) ;; *) echo "LANES=$LANES: allowed: 1 or 2" >&2; exit 2 ;; esac
DEVICES=$([ "$LANES" = 1 ] && echo 2 || echo 1)

# finished <cell folder>: true when the cell's summary.json says it is complete (its run
# ended); a cell that has not started, or stopped, is not finished.
finished() {
  $PY -c 'import json,sys; sys.exit(not json.load(open(sys.argv[1])).get("complete"))' \
    "$1/summary.json" 2>/dev/null
}

# phase <job>...: runs `cell <job>` for every job (the calling script's cell, its words
# split) in LANES lanes, job i in lane i mod LANES, and returns when all have ended. A failed
# command stops its lane, and the script then exits with 1 once the other lanes end. Jobs of
# one phase run at once, so a job that needs another's cell goes in a later phase.
phase() {
  local jobs=("$@") pids=() status=0
  lane() {
    for ((i = $1; i < ${#jobs[@]}; i += LANES)); do
      # shellcheck disable=SC2086
      cell ${jobs[$i]} || { echo "lane $1: stopped at ${jobs[$i]}" >&2; return 1; }
    done
  }
  for ((l = 0; l < LANES; l++)); do lane "$l" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  [ $status = 0 ] || exit 1
}
