#!/usr/bin/env bash
# Runs a command as one named phase of a run: with PHASE_LOG set, appends "<name>\t<seconds>\t<exit
# status>" to that file when the command ends (.ci/run prints the table); without it, only runs it.
# Usage: scripts/phase.sh NAME [VAR=VALUE...] COMMAND [ARGS...]
set -uo pipefail
name="$1"
shift
[[ -n "${PHASE_LOG:-}" ]] || exec env "$@"
start="$(date +%s.%N)"
env "$@"
status=$?
awk -v n="$name" -v s="$start" -v e="$(date +%s.%N)" -v c="$status" 'BEGIN { printf "%s\t%.1f\t%d\n", n, e - s, c }' >>"$PHASE_LOG"
exit "$status"
