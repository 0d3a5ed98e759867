#!/usr/bin/env bash
# Run a PyTorch script under Intel VTune, with every aten op labelled (ITT).
#
#   vtune_scripts/collect.sh ANALYSIS SCRIPT.py [SCRIPT ARGS...]
#
# ANALYSIS: hotspots | threading | uarch (uarch-exploration)
# Environment knobs (all optional):
#   VTUNE_RESULT_DIR  result directory (default: vtune-<analysis>-<YYYYmmdd-HHMMSS>)
#   VTUNE_KNOBS       extra "-knob" settings, space separated, e.g. "sampling-interval=1"
#   VTUNE_DURATION    stop collecting after this many seconds (-duration)
#   VTUNE_NO_ITT=1    run the script plainly, without torch.autograd.profiler.emit_itt()
#   PYTHON            interpreter (default: python3)
#   OMP_NUM_THREADS   as usual: what the run uses is what VTune sees
set -euo pipefail

usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[ "$#" -ge 2 ] || usage
analysis=$1
shift
script=$1
shift

here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
stamp=$(date +%Y%m%d-%H%M%S)

case "$analysis" in
    hotspots)
        # user-mode sampling works without VTune's kernel driver; 5 ms suits runs of seconds
        knobs=(-knob sampling-mode=sw -knob sampling-interval=5 -knob enable-stack-collection=true)
        ;;
    threading)
        # waits and spins on OpenMP barriers and locks; sw mode needs no driver
        knobs=(-knob sampling-and-waits=sw)
        ;;
    uarch | uarch-exploration)
        analysis=uarch-exploration
        # needs the sampling driver (or perf-based driverless mode) and a CPU with a PMU
        knobs=(-knob collect-memory-bandwidth=true -knob pmu-collection-mode=summary)
        ;;
    *)
        echo "collect.sh: unknown analysis '$analysis' (hotspots, threading or uarch)" >&2
        exit 2
        ;;
esac

command -v vtune >/dev/null 2>&1 || {
    echo "collect.sh: vtune is not on PATH; source /opt/intel/oneapi/vtune/latest/env/vars.sh first" >&2
    exit 3
}
[ -f "$script" ] || { echo "collect.sh: no such script: $script" >&2; exit 2; }

result_dir=${VTUNE_RESULT_DIR:-vtune-$analysis-$stamp}
if [ -n "${VTUNE_KNOBS:-}" ]; then
    read -r -a extra <<<"$VTUNE_KNOBS"
    for knob in "${extra[@]}"; do
        knobs+=(-knob "$knob")
    done
fi
limits=()
if [ -n "${VTUNE_DURATION:-}" ]; then
    limits=(-duration "$VTUNE_DURATION")
fi

if [ "${VTUNE_NO_ITT:-0}" = 1 ]; then
    target=("$python" "$script" "$@")
else
    target=("$python" "$here/itt_run.py" "$script" "$@")
fi

echo "collect.sh: vtune -collect $analysis -result-dir $result_dir" >&2
vtune -collect "$analysis" -result-dir "$result_dir" "${knobs[@]}" "${limits[@]}" -- "${target[@]}"
echo "collect.sh: done; CSV reports: $here/report.sh $result_dir" >&2
