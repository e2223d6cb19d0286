#!/usr/bin/env bash
# On a machine with a real NVIDIA GPU: builds node-probe, runs it against the real driver for 30 s,
# then compares what it reports with `nvidia-smi --query-gpu=...` taken at the same moment. Prints
# one line per GPU and field with both values. Exits 1 if a field is missing or off.
#
#   node-probe/gpu-check.sh
#   NODE_PROBE_BIN=path/to/node-probe node-probe/gpu-check.sh
#   DURATION=30 NVML_LIB=/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 node-probe/gpu-check.sh
#
# Tolerances: power draw moves between two reads, so +-10 % or 15 W; limits +-1 W; temperature
# +-3 C; memory used +-5 % or 256 MiB (NVML's v2 "used" leaves out reserved memory, like nvidia-smi);
# memory total +-1 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-30}
NVML_LIB=${NVML_LIB:-libnvidia-ml.so.1}

command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: this check needs a machine with an NVIDIA GPU"; exit 1; }
# NODE_PROBE_BIN: a prebuilt binary (for machines without a Rust toolchain); otherwise build it.
if [ -n "${NODE_PROBE_BIN:-}" ]; then
  probe=$NODE_PROBE_BIN
else
  cargo build --release --quiet -p node-probe
  probe=${CARGO_TARGET_DIR:-target}/release/node-probe
fi
work=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$probe" --listen 127.0.0.1:0 --node gpu-check --poll-interval 1s --nvml-lib "$NVML_LIB" 2>"$work/log" &
pid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's|.*serving http://\([^/]*\)/metrics.*|\1|p' "$work/log" | head -1)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { echo "node-probe did not start:"; cat "$work/log"; exit 1; }
echo "node-probe running against $NVML_LIB for ${DURATION} s ..."
sleep "$DURATION"
kill -0 "$pid" 2>/dev/null || { echo "node-probe died:"; cat "$work/log"; exit 1; }

# Read both as close together as possible.
exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}"
printf 'GET /metrics HTTP/1.1\r\nHost: check\r\nConnection: close\r\n\r\n' >&3
nvidia-smi --query-gpu=index,power.draw,enforced.power.limit,power.default_limit,temperature.gpu,memory.used,memory.total \
  --format=csv,noheader,nounits >"$work/smi"
cat <&3 >"$work/metrics"
exec 3<&-

# metric NAME GPU -> value or "-"
metric() {
  awk -v n="$1" -v g="gpu=\"$2\"" 'index($0, n "{") == 1 && index($0, g) {v = $NF} END {print (v == "" ? "-" : v)}' "$work/metrics"
}

echo "nvml_up: $(awk 'index($0, "node_probe_nvml_up{") == 1 {print $NF}' "$work/metrics")" \
  " xid_events_up: $(awk 'index($0, "node_probe_xid_events_up{") == 1 {print $NF}' "$work/metrics")" \
  " driver: $(sed -n 's/^node_probe_driver_info{.*driver_version="\([^"]*\)".*/\1/p' "$work/metrics")"
printf '%-4s %-24s %16s %16s  %s\n' gpu field node-probe nvidia-smi result
fail=0
# compare GPU FIELD PROBE SMI ABS_TOL REL_TOL
compare() {
  local res
  res=$(awk -v a="$3" -v b="$4" -v at="$5" -v rt="$6" 'BEGIN {
    if (a == "-" || b == "" || b ~ /N\/A|Not Supported|\[/) { print (a == "-" && (b ~ /N\/A|Not Supported|\[/) ? "both unsupported" : "MISSING"); exit }
    d = a - b; if (d < 0) d = -d; tol = at; if (rt * b > tol) tol = rt * b
    print (d <= tol ? "ok" : "MISMATCH") }')
  printf '%-4s %-24s %16s %16s  %s\n' "$1" "$2" "$3" "$4" "$res"
  case "$res" in ok | "both unsupported") ;; *) fail=1 ;; esac
}
mib() { awk -v v="$1" 'BEGIN {if (v == "-") print "-"; else printf "%.1f", v / 1048576}'; }
while IFS=, read -r idx power limit deflimit temp used total; do
  idx=$(echo "$idx" | xargs); power=$(echo "$power" | xargs); limit=$(echo "$limit" | xargs)
  deflimit=$(echo "$deflimit" | xargs); temp=$(echo "$temp" | xargs); used=$(echo "$used" | xargs); total=$(echo "$total" | xargs)
  compare "$idx" "power W" "$(metric node_probe_gpu_power_watts "$idx")" "$power" 15 0.10
  compare "$idx" "enforced limit W" "$(metric node_probe_gpu_power_limit_watts "$idx")" "$limit" 1 0
  compare "$idx" "default limit W (TDP)" "$(metric node_probe_gpu_default_power_limit_watts "$idx")" "$deflimit" 1 0
  compare "$idx" "temperature C" "$(metric node_probe_gpu_temperature_celsius "$idx")" "$temp" 3 0
  compare "$idx" "memory used MiB" "$(mib "$(metric node_probe_gpu_memory_used_bytes "$idx")")" "$used" 256 0.05
  compare "$idx" "memory total MiB" "$(mib "$(metric node_probe_gpu_memory_total_bytes "$idx")")" "$total" 1 0
done <"$work/smi"
if [ "$fail" -eq 0 ]; then echo "PASS"; else echo "FAIL"; echo "node-probe log:"; cat "$work/log"; exit 1; fi
