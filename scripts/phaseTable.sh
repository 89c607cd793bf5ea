#!/usr/bin/env bash
# Prints the phases scripts/phase.sh recorded in PHASE_LOG as a table, with the run's wall time.
# Usage: scripts/phaseTable.sh PHASE_LOG TOTAL_SECONDS
set -euo pipefail
log="$1"
total="$2"
echo
echo "phase times (this run):"
printf '  %-34s %9s %8s  %s\n' phase seconds min:s exit
awk -F'\t' '{ printf "  %-34s %9.1f %5d:%02d  %s\n", $1, $2, int($2 / 60), int($2) % 60, $3 }' "$log"
awk -v t="$total" 'BEGIN { printf "  %-34s %9.1f %5d:%02d\n", "total (wall)", t, int(t / 60), int(t) % 60 }'
