#!/usr/bin/env bash
# node-probe footprint benchmark: 8 fake GPUs (fake-nvml), 1 s polling, an XID every few seconds,
# a /metrics scrape every 15 s, for DURATION seconds (default 60). Prints resident memory (VmRSS,
# and the peak VmHWM) and CPU use as a percentage of one core, against the targets
# (<= 10 MiB RSS, <= 0.5 % CPU). Exits 1 if a target is missed.
#
#   node-probe/bench-footprint.sh            # 60 s
#   DURATION=300 node-probe/bench-footprint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-60}
WARMUP=${WARMUP:-5}

cargo build --release --quiet -p node-probe -p fake-nvml
T=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# 8 H100-like GPUs: power, temperature and throttle timelines over 10 minutes, XIDs spread out.
{
  echo '{"driver_version": "550.90.07", "gpus": ['
  for i in 0 1 2 3 4 5 6 7; do
    [ "$i" -gt 0 ] && echo ','
    steps_p="" steps_t="" steps_r="" xids=""
    for s in $(seq 0 10 600); do
      p=$(( 300 + (s * 7 + i * 37) % 400 )); t=$(( 40 + (s + i * 5) % 45 )); r=$(( (s / 10 + i) % 4 == 0 ? 4 : 0 ))
      steps_p+="${steps_p:+,}[$s,$p]"; steps_t+="${steps_t:+,}[$s,$t]"; steps_r+="${steps_r:+,}[$s,$r]"
    done
    for s in $(seq $(( 3 + i )) 8 600); do xids+="${xids:+,}{\"at\":$s,\"xid\":$(( s % 2 == 0 ? 13 : 31 ))}"; done
    printf '{"uuid":"GPU-bench-%04d","name":"NVIDIA H100 80GB HBM3","pci_bus_id":"00000000:%02X:00.0",' "$i" $(( 0x18 + i * 16 ))
    printf '"power_w":[%s],"power_limit_w":700,"default_power_limit_w":700,"energy_j":1000,' "$steps_p"
    printf '"temperature_c":[%s],"utilization":{"gpu":95,"memory":40},' "$steps_t"
    printf '"memory":{"total_bytes":85520809984,"used_bytes":60000000000},"clocks_mhz":{"sm":1980,"memory":2619},'
    printf '"throttle_reasons":[%s],"remapped_rows":{},"ecc":{"volatile":{},"aggregate":{}},"xids":[%s]}' "$steps_r" "$xids"
  done
  echo ']}'
} >"$work/scenario.json"

FAKE_NVML_SCENARIO="$work/scenario.json" "$T/node-probe" --listen 127.0.0.1:0 --node bench \
  --nvml-lib "$T/libfake_nvml.so" --poll-interval 1s 2>"$work/log" &
pid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's|.*serving http://\([^/]*\)/metrics.*|\1|p' "$work/log" | head -1)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { echo "node-probe did not start:"; cat "$work/log"; exit 1; }
host=${addr%:*} port=${addr##*:}

scrape() {
  exec 3<>"/dev/tcp/$host/$port"
  printf 'GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n' >&3
  cat <&3 >"$work/metrics"
  exec 3<&-
}
cpu_ticks() { # utime + stime, fields 14 and 15 of /proc/PID/stat (counted after the ")" of comm)
  local rest
  rest=$(sed 's/.*) //' "/proc/$pid/stat")
  set -- $rest
  echo $(( ${12} + ${13} ))
}
sched_ns() { # CPU time of all threads in ns (/proc/PID/task/*/schedstat, first field): finer than ticks
  cat /proc/"$pid"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'
}
now_ns() { date +%s%N; }

sleep "$WARMUP"
scrape
t0=$(now_ns); c0=$(cpu_ticks); n0=$(sched_ns)
elapsed=0
while [ "$elapsed" -lt "$DURATION" ]; do
  step=$(( DURATION - elapsed < 15 ? DURATION - elapsed : 15 ))
  sleep "$step"; elapsed=$(( elapsed + step ))
  scrape
done
t1=$(now_ns); c1=$(cpu_ticks); n1=$(sched_ns)
kill -0 "$pid" 2>/dev/null || { echo "node-probe died:"; cat "$work/log"; exit 1; }

hz=$(getconf CLK_TCK)
rss_kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
hwm_kb=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")
wall_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
cpu_s=$(awk -v d=$(( c1 - c0 )) -v hz="$hz" 'BEGIN {printf "%.3f", d / hz}')
cpu_pct=$(awk -v c="$cpu_s" -v w="$wall_s" 'BEGIN {printf "%.3f", 100 * c / w}')
sched_pct=$(awk -v a="$n0" -v b="$n1" -v w="$wall_s" 'BEGIN {printf "%.4f", 100 * (b - a) / 1e9 / w}')
gpus=$(grep -c '^node_probe_gpu_power_watts{' "$work/metrics" || true)
xids=$(awk '/^node_probe_gpu_xid_errors_total\{/ {s += $NF} END {print s + 0}' "$work/metrics")
polls=$(awk '/^node_probe_polls_total\{/ {print $NF}' "$work/metrics")
series=$(grep -vc '^#' "$work/metrics" || true)

echo "node-probe footprint: 8 fake GPUs, 1 s polling, ${wall_s} s measured after ${WARMUP} s warm-up"
echo "  GPUs reporting power: $gpus   polls: $polls   XIDs counted: $xids   series per scrape: $series"
awk -v r="$rss_kb" -v h="$hwm_kb" 'BEGIN {printf "  RSS now  (VmRSS): %.2f MiB\n  RSS peak (VmHWM): %.2f MiB   target <= 10 MiB\n", r/1024, h/1024}'
echo "  CPU (utime+stime, /proc/PID/stat): ${cpu_s} s in ${wall_s} s = ${cpu_pct} % of one core   target <= 0.5 %"
echo "  CPU (all threads' schedstat, ns):   ${sched_pct} % of one core"
ok=1
awk -v h="$hwm_kb" 'BEGIN {exit !(h <= 10240)}' || { echo "  FAIL: peak RSS over 10 MiB"; ok=0; }
awk -v p="$cpu_pct" 'BEGIN {exit !(p <= 0.5)}' || { echo "  FAIL: CPU over 0.5 % of one core"; ok=0; }
[ "$gpus" -eq 8 ] || { echo "  FAIL: expected 8 GPUs in /metrics"; ok=0; }
[ "$ok" -eq 1 ] && echo "  PASS"
[ "$ok" -eq 1 ]
