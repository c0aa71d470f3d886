# Sourced by the GPU-machine scripts: smi_start LOG samples nvidia-smi every 200 ms into LOG
# (tools/device/smi_summary.py's format) until smi_stop; smi_stop LABEL stops it and prints
# smi_summary.py's line. Clock, power and temperature are what tell a power- or heat-limited
# run from a slow kernel: the matrix rate a GPU sustains for minutes is below the rate of a
# short burst when the board's power limit lowers its clock.
smi_fields=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active
smi_start() {
  smi_log=$1
  nvidia-smi --query-gpu=$smi_fields --format=csv,noheader,nounits -lms 200 > "$smi_log" 2>&1 &
  smi_pid=$!
}
smi_stop() {
  kill "$smi_pid" 2>/dev/null
  wait "$smi_pid" 2>/dev/null
  python3 "$(dirname "${BASH_SOURCE[0]}")/smi_summary.py" "$smi_log" "$1"
}
