#!/usr/bin/env bash
# Re-execute course notebooks in place, top to bottom in a fresh kernel each, two at a time (one per core), and
# print how long each took. Figures are stored (the inline backend: MPLBACKEND is unset for the kernels).
#
#   scripts/execute_notebooks.sh                       every notebook under course/
#   scripts/execute_notebooks.sh course/01_*.ipynb     only these
#
# Run it on a quiet machine after a change that alters what a notebook prints; then `git diff course/` shows what
# changed, and the README's test command checks the stored outputs again.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYDEVD_DISABLE_FILE_VALIDATION=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONHASHSEED=0
unset MPLBACKEND
python=${PYTHON:-$(if [ -x .venv/bin/python ]; then echo .venv/bin/python; else echo python; fi)}  # the set-up's environment when there is one
if [ $# -eq 0 ]; then
    mapfile -t notebooks < <(find course -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' | sort)
else
    notebooks=("$@")
fi
execute() {
    local start=$SECONDS
    "$python" -m jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=600 "$1" \
        > /dev/null 2> "${TMPDIR:-/tmp}/execute-$(basename "$1").log" || { echo "FAILED  $1 (see ${TMPDIR:-/tmp}/execute-$(basename "$1").log)"; return 1; }
    printf '%4d s  %s\n' "$((SECONDS - start))" "$1"
}
export -f execute
export python
printf '%s\n' "${notebooks[@]}" | xargs -P 2 -I{} bash -c 'execute "$@"' _ {}
