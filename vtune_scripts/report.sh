#!/usr/bin/env bash
# Turn a VTune result directory into CSV reports, and print the numbers diagnose reads.
#
#   vtune_scripts/report.sh RESULT_DIR [OUT_DIR]
#
# Writes OUT_DIR (default RESULT_DIR/csv)/summary.csv, hotspots.csv (by function) and
# tasks.csv (by ITT task: one row per aten op when the run used emit_itt), then prints
# CPI, spin and overhead time and effective CPU use (python -m diagnose.tools.vtune).
#   PYTHON  interpreter with diagnose installed (default: python3)
set -euo pipefail

if [ "$#" -lt 1 ] || [ "$#" -gt 2 ]; then
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
result_dir=$1
out_dir=${2:-$result_dir/csv}
python=${PYTHON:-python3}

command -v vtune >/dev/null 2>&1 || {
    echo "report.sh: vtune is not on PATH; source /opt/intel/oneapi/vtune/latest/env/vars.sh first" >&2
    exit 3
}
[ -d "$result_dir" ] || { echo "report.sh: no such result directory: $result_dir" >&2; exit 2; }
mkdir -p "$out_dir"

csv=(-format csv -csv-delimiter comma)
vtune -report summary -result-dir "$result_dir" "${csv[@]}" -report-output "$out_dir/summary.csv"
vtune -report hotspots -result-dir "$result_dir" "${csv[@]}" -report-output "$out_dir/hotspots.csv"
# grouping by task fails on results without ITT tasks; the other two reports still stand
vtune -report hotspots -result-dir "$result_dir" -group-by task "${csv[@]}" \
    -report-output "$out_dir/tasks.csv" || echo "report.sh: no ITT tasks in this result" >&2

echo "report.sh: wrote $out_dir/summary.csv, hotspots.csv, tasks.csv" >&2
"$python" -m diagnose.tools.vtune "$out_dir"
