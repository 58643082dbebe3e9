#!/usr/bin/env bash
# How long the softib SM takes to bring a generated fat tree to all-Active, beside real opensm
# on ibsim for the same topology when ibsim-utils and opensm are installed (apt-get install
# ibsim-utils opensm). A figure, not a test: the machine is shared and noisy.
#
#   bench/fabric-up.sh [HOSTS]        (default 504: 504 hosts, 46 switches)
set -euo pipefail
hosts=${1:-504}
cd "$(dirname "$0")/.."
cargo build -q --release -p softib-cli
S=$PWD/target/release/softib
work=$(mktemp -d)
trap '"$S" fabric down --dir "$work/fab" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$S" fabric gen fat-tree --hosts "$hosts" > "$work/ft.net"
cas=$(grep -c '^Ca' "$work/ft.net"); sws=$(grep -c '^Switch' "$work/ft.net")
t0=$(date +%s.%N)
"$S" fabric up "$work/ft.net" --dir "$work/fab" > /dev/null
t1=$(date +%s.%N)
while [ "$("$S" fabric status --dir "$work/fab" | grep -c ' Active ')" -lt "$cas" ]; do
  sleep 0.1
  if [ "$(echo "$(date +%s.%N) - $t1 > 300" | bc)" = 1 ]; then echo "not all Active after 300 s" >&2; exit 1; fi
done
t2=$(date +%s.%N)
log=$(ls "$work"/fab/opensm-*.log)
sweep=$(grep -m1 'INITIATING HEAVY SWEEP' "$log" | awk '{print $3"."$4}')
up=$(grep -m1 'SUBNET UP' "$log" | awk '{print $3"."$4}')
printf 'softib: %d CAs, %d switches: daemon up in %.2f s, all CA ports Active %.2f s later\n' \
  "$cas" "$sws" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
echo "softib opensm.log: first heavy sweep at $sweep, SUBNET UP at $up"
if command -v ibsim >/dev/null && command -v opensm >/dev/null; then
  export IBSIM_SOCKNAME=softibbench$$
  ibsim -s -n "$work/ft.net" > "$work/ibsim.log" 2>&1 &
  ibsim_pid=$!
  sleep 1
  first=$(awk '/^\[1\]/{print $1; exit}' "$work/ft.net" | tr -d '[]')
  t3=$(date +%s.%N)
  OSM_CACHE_DIR=$work OSM_TMP_DIR=$work LD_PRELOAD=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so \
    timeout 120 opensm -f "$work/osm.log" -e -s 0 --once > /dev/null 2>&1 || true
  t4=$(date +%s.%N)
  kill "$ibsim_pid" 2>/dev/null || true
  printf 'opensm on ibsim, same topology: %.2f s to exit after one sweep\n' "$(echo "$t4 - $t3" | bc)"
else
  echo "opensm/ibsim not installed: no peer figure (apt-get install ibsim-utils opensm)"
fi
