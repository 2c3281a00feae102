#!/usr/bin/env bash
# The whole course on a GPU in one call: the doctor, the unit tests, every notebook (in float32, then in bfloat16),
# the numerics bench in float32 and bfloat16, the speed bench and the token-tree bench (chains, static and dynamic
# trees: data/bench/trees-gpu.json when copied), each step under what is left of one time limit,
# then a short report (Markdown) with each step's status, seconds and log tail.
#
#   scripts/gpu_check.sh [--quick] [--limit SECONDS] [--out DIR]
#
#   --quick        a smoke test: the fast tests of the devices, the verifiers, the decode loops and the fork
#                  analysis, notebooks 00, 01 and 09 (both dtypes), a smaller numerics bench, and the bench
#   --limit S      the time limit for everything together (default 540: fits one 10-minute device call)
#   --out DIR      where the logs and report.md go (default runs/gpu_check)
#
# The device: SPECDEC_DEVICE if set, else cuda when torch sees one, else cpu (the script then checks that the
# course runs end to end where it is; the report says which device ran). Notebooks run with --nbval-lax on a GPU:
# they must run without errors, but their stored outputs (device names, CPU timings) are not compared.
# The numerics bench's JSON lands in DIR/numerics.json: on a GPU, copy it to data/bench/numerics-gpu.json with the
# report beside it (data/bench/gpu-check.md), so the course keeps what the GPU measured.
# Exit status: 0 when every step passed, 1 otherwise (a step that ran out of time fails).
set -uo pipefail
cd "$(dirname "$0")/.."

quick=0 limit=540 out=runs/gpu_check
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --limit) limit="$2"; shift ;;
        --out) out="$2"; shift ;;
        *) echo "gpu_check.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$out"
export PYDEVD_DISABLE_FILE_VALIDATION=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export MPLBACKEND=Agg PYTHONHASHSEED=0
python=${PYTHON:-python}
device=${SPECDEC_DEVICE:-$("$python" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}
export SPECDEC_DEVICE="$device"
start=$(date +%s)
report="$out/report.md"
failed=0
{
    echo "# gpu_check report"
    echo
    echo "device: $device; $("$python" -c 'import torch; print("torch", torch.__version__, "| cuda", torch.version.cuda, "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")')"
    echo "limit: ${limit} s; mode: $([ $quick = 1 ] && echo quick || echo full); started $(date -u +%FT%TZ)"
    echo
    echo "| step | status | seconds |"
    echo "|---|---|---|"
} > "$report"

run_step() {  # run_step NAME COMMAND...: run under the time left, append a row, keep the log
    local name=$1; shift
    local left=$(( limit - ($(date +%s) - start) ))
    local log="$out/$name.log" status
    if [ "$left" -le 5 ]; then
        echo "| $name | skipped: no time left | 0 |" >> "$report"; failed=1; return
    fi
    local t0=$(date +%s)
    timeout "$left" "$@" > "$log" 2>&1
    local rc=$?
    local seconds=$(( $(date +%s) - t0 ))
    case $rc in
        0) status="passed" ;;
        124) status="FAILED: out of time"; failed=1 ;;
        *) status="FAILED (exit $rc)"; failed=1 ;;
    esac
    echo "| $name | $status | $seconds |" >> "$report"
    echo "== $name: $status in ${seconds} s" >&2
}

nbval_mode="--nbval"
[ "$device" != cpu ] && nbval_mode="--nbval-lax"
if [ $quick = 1 ]; then  # a smoke test: the devices, the verifiers, the decode loops, the fork analysis, three notebooks
    unit_args=(tests/test_devices.py tests/test_verify.py tests/test_speculative.py tests/test_batched.py
               tests/test_forks.py -m "not slow")
    notebooks=(course/00_setup_and_baseline.ipynb course/01_greedy_matching.ipynb
               course/09_lossless_in_floating_point.ipynb)
    numerics_args=(--prompts 2 --gammas 1,7)
else
    unit_args=(tests)
    notebooks=(course)
    numerics_args=()
fi

run_step doctor "$python" -m specdec_lib doctor
run_step unit-tests "$python" -m pytest -q -p no:cacheprovider "${unit_args[@]}"
run_step notebooks "$python" -m pytest "${notebooks[@]}" "$nbval_mode" --nbval-current-env \
    --nbval-sanitize-with course/sanitize.cfg -p no:cacheprovider -q
run_step notebooks-bfloat16 env SPECDEC_DTYPE=bfloat16 "$python" -m pytest "${notebooks[@]}" --nbval-lax \
    --nbval-current-env -p no:cacheprovider -q
run_step numerics "$python" -m specdec_lib bench numerics --device "$device" --dtypes float32,bfloat16 \
    "${numerics_args[@]}" --no-progress --json "$out/numerics.json"
run_step bench "$python" -m specdec_lib bench --device "$device" --prompts 2 --max-new-tokens 24 --gammas 2,4 \
    --repeats 2 --no-progress --json "$out/bench.json"
run_step trees "$python" -m specdec_lib.bench.trees --device "$device" --prompts 4 --repeats 2 --no-progress \
    --json "$out/trees.json"

{
    echo
    echo "total: $(( $(date +%s) - start )) s"
    for log in "$out"/*.log; do
        echo
        echo "## $(basename "$log" .log): last lines"
        echo '```'
        tail -n 8 "$log"
        echo '```'
    done
} >> "$report"
cat "$report"
exit $failed
