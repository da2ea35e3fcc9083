#!/usr/bin/env bash
# One device call whose work depends on the GPU that came (a call for an H200 may get an H100):
#   OUT=$OUT scripts/by_gpu.sh "H200 command" "other command"
# runs the first command when nvidia-smi names an H200, else the second (each a string for bash -c).
set -uo pipefail
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $name"
case $name in
  *H200*) bash -c "$1" ;;
  *) bash -c "$2" ;;
esac
