#!/usr/bin/env bash
# softib beside the systems a user would otherwise pick, on this machine, in one run (issue 7).
#
#   bench/run.sh [--quick] [--only intra,inter,scale] [--runs N] [--mtu "1500 9000"]
#                [--datapath "daemon process"] [--rev REV | --no-build] [--no-install] [--keep]
#
# softib is built from the working tree (cargo build --release -p softib-cli), or with
# --rev REV from that commit alone (git archive into target/bench/src, built there), or not at
# all with --no-build (SOFTIB=path picks the binary).
#
# intra  two processes on one softib daemon (two RoCEv2 devices on loopback) beside
#        ucx_perftest over shared memory (UCX_TLS=posix,cma,self) and a single-core memcpy,
#        softib once for each --datapath: daemon (series intra.softib.*, the engine in
#        softibd) and process (intra.process.*: SOFTIB_DATAPATH=process, the engine in each
#        perftest process, rings between them; issue 22's targets);
# inter  two daemons in two network namespaces joined by a veth pair, at each MTU, beside
#        iperf3 (one TCP stream; UDP 64 B), qperf (tcp_bw, udp_lat, tcp_lat) and ucx_perftest
#        over TCP on the same veth;
# scale  aggregate ib_write_bw -q 1/16/256, the daemon's RSS with 1,000 RC QPs connected, and
#        the CPU an idle daemon uses;
# dropin Debian's own perftest (/usr/bin/ib_write_bw, ib_send_lat) on softib's drop-in
#        libibverbs.so.1 (softib run) beside softib's own perftest, on the intra setup, runs
#        interleaved (issue 18: the drop-in adds at most 5%), on each --datapath (process:
#        series dropin.process.*);
# ipoib  iperf3 (one TCP stream) between two hosts' ib0 on the softib fabric (topoA, a network
#        namespace per host) beside iperf3 over a veth pair with ib0's MTU (issue 10: a figure,
#        no target);
# sm     an SM's time from its start to SUBNET UP in its log on the 504-host fat tree
#        (`softib fabric gen --hosts 504 fat-tree`, 46 switches): Debian's opensm on softib
#        (softib fabric up --no-sm, opensm through the drop-in libibumad.so.3) beside the same
#        opensm on ibsim (umad2sim), and softib's own opensm on softib (issue 20: figures, no
#        target).
# cm     RDMA-CM between two hosts (a daemon each, on lo in one namespace): connections set
#        up per second to one listener by Debian's cmtime (rdmacm-utils, on the drop-in
#        librdmacm.so.1; create id to ESTABLISHED, and the REQ/REP/RTU step alone), Debian's
#        rping's time per ping, beside softib's own perftest connecting 256 more QPs over its
#        TCP exchange and over rdma_cm (-R): QP connections per second each way (issue 19:
#        figures, no target).
#
# Every figure is the median of --runs runs (3; --quick: 1) with min and max. It prints one
# table (figure, softib, peer, ratio, target from issue 7, met) and writes it as JSON to
# bench/results/<UTC timestamp>.json. A failed softib run is recorded with its error message;
# nothing is retried or hidden. Needs root (namespaces); touches only the namespaces, veth pair
# and loopback addresses it creates, and removes them on exit.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=3
QUICK=0
ONLY=intra,inter,scale,ipoib,dropin,sm,cm
MTUS="1500 9000"
DATAPATHS="daemon process"
INSTALL=1
BUILD=1
KEEP=0
REV=""
DUR=1          # seconds per bandwidth run (softib -D, iperf3 -t, qperf -t)
LAT_N=3000     # softib latency iterations
T_RUN=30       # timeout of any single client or server (seconds)
SCALE_T=64     # tx depth of the -q 1/16/256 runs (see the note in bench/README.md)

usage() { sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1; RUNS=1 ;;
    --only) ONLY=$2; shift ;;
    --only=*) ONLY=${1#--only=} ;;
    --runs) RUNS=$2; shift ;;
    --mtu) MTUS=$2; shift ;;
    --datapath) DATAPATHS=$2; shift ;;
    --no-install) INSTALL=0 ;;
    --no-build) BUILD=0 ;;
    --rev) REV=$2; shift ;;
    --rev=*) REV=${1#--rev=} ;;
    --keep) KEEP=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
want() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
for p in ${ONLY//,/ }; do
  case $p in intra|inter|scale|ipoib|dropin|sm|cm) ;; *) echo "--only: unknown phase $p" >&2; exit 2 ;; esac
done
[ "$(id -u)" = 0 ] || { echo "bench/run.sh needs root (network namespaces, veth)" >&2; exit 2; }

T_START=$(date +%s.%N)
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
log() { printf '[%s] %s\n' "$(date -u +%T)" "$*" >&2; }

# --- peers and build ----------------------------------------------------------------------
need=()
# ping: the IPoIB figure checks that ib0 carries traffic with it before iperf3.
for c in ucx_perftest:ucx-utils iperf3:iperf3 qperf:qperf jq:jq gcc:gcc bc:bc ss:iproute2 ip:iproute2 \
    ping:iputils-ping /usr/bin/ib_write_bw:perftest cmtime:rdmacm-utils rping:rdmacm-utils; do
  command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ $INSTALL = 1 ]; then
    log "installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q "${need[@]}" >/dev/null \
      || { timeout 300 apt-get update -q >/dev/null &&
           DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q "${need[@]}" >/dev/null; } \
      || { echo "could not install ${need[*]}" >&2; exit 2; }
  else
    echo "missing: ${need[*]} (run without --no-install)" >&2; exit 2
  fi
fi
S=${SOFTIB:-$ROOT/target/release/softib}
T_BUILD=0
SRC_NOTE="working tree"
if [ -n "$REV" ]; then
  sha=$(git -C "$ROOT" rev-parse --verify "$REV^{commit}") || { echo "no commit $REV" >&2; exit 2; }
  src=${BENCH_DIR:-$ROOT/target/bench}/src
  log "cargo build --release -p softib-cli of $REV ($sha) in $src"
  tb=$(date +%s.%N)
  mkdir -p "$src"
  # keep src/target between runs: only the sources are replaced
  find "$src" -mindepth 1 -maxdepth 1 ! -name target -exec rm -rf {} +
  git -C "$ROOT" archive "$sha" | tar -x -C "$src" || { echo "git archive $sha failed" >&2; exit 2; }
  (cd "$src" && timeout 3600 cargo build -q --release -p softib-cli) || { echo "build failed" >&2; exit 2; }
  T_BUILD=$(echo "$(date +%s.%N) - $tb" | bc)
  S=$src/target/release/softib
  SRC_NOTE="commit $sha (git archive)"
elif [ $BUILD = 1 ]; then
  log "cargo build --release -p softib-cli"
  tb=$(date +%s.%N)
  (cd "$ROOT" && timeout 1800 cargo build -q --release -p softib-cli) || { echo "build failed" >&2; exit 2; }
  T_BUILD=$(echo "$(date +%s.%N) - $tb" | bc)
else
  SRC_NOTE="given binary, not built by this run"
fi
[ -x "$S" ] || { echo "no softib binary at $S" >&2; exit 2; }

W=$(mktemp -d /tmp/softib-bench.XXXXXX)
mkdir -p "$W/logs"
# Run a private copy: a cargo build elsewhere replacing target/release/softib mid-run would
# leave the daemons and the tools speaking different protocol versions.
cp "$S" "$W/softib" || { echo "cannot copy $S" >&2; exit 2; }
# and the drop-in libraries it runs programs on (libibverbs, librdmacm, libibumad), written out
# from the build beside the binary: the private copy has no build beside it.
"$S" install-libs "$W/lib" > /dev/null 2>&1 && export SOFTIB_LIB_DIR=$W/lib
S_ORIG=$S
S=$W/softib
gcc -O2 -o "$W/memcpy_bw" "$ROOT/bench/memcpy_bw.c" || { echo "cannot compile memcpy_bw.c" >&2; exit 2; }

# --- cleanup ------------------------------------------------------------------------------
NSA=sbA$$ NSB=sbB$$ VA=sbva$$ VB=sbvb$$
IPA=10.213.0.1 IPB=10.213.0.2
# Every server, client and daemon is a background job of this shell (clients too, see fgwait),
# so `jobs -p` names exactly the live processes this script started.
cleanup() {
  local p i
  for p in $(jobs -p); do kill -TERM "$p" 2>/dev/null; done
  for i in 1 2 3 4 5 6 7 8 9 10; do [ -z "$(jobs -rp)" ] && break; sleep 0.2; done
  for p in $(jobs -rp); do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  ip netns del "$NSA" 2>/dev/null
  ip netns del "$NSB" 2>/dev/null
  ip link del "$VA" 2>/dev/null
  ip link del "$VA"i 2>/dev/null
  [ -d "$W/ipoib-fabric" ] && "$S" fabric down --dir "$W/ipoib-fabric" > /dev/null 2>&1
  if [ $KEEP = 1 ]; then echo "logs kept in $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# run a command as a background job and wait for it: an INT or TERM then reaches the trap at
# once instead of after the command ends
fgwait() { "$@" & wait $!; }

# --- records ------------------------------------------------------------------------------
# runs.tsv: series, unit, ok|err, value or message.   rows.tsv: what the table shows.
RUNS_F=$W/runs.tsv ROWS_F=$W/rows.tsv INFO_F=$W/info.tsv
: > "$RUNS_F"; : > "$ROWS_F"; : > "$INFO_F"
rec() { printf '%s\t%s\tok\t%s\n' "$1" "$2" "$3" >> "$RUNS_F"; }
rec_err() { printf '%s\t%s\terr\t%s\n' "$1" "$2" "$(printf '%s' "$3" | tr '\t\n' '  ')" >> "$RUNS_F"; }
# record VALUE if it is a number, else the error MSG
rec_num() { # series unit value msg
  if [[ $3 =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]]; then rec "$1" "$2" "$(printf '%.6g' "$3")"; else rec_err "$1" "$2" "$4"; fi
}
info() { printf '%s\t%s\n' "$1" "$2" >> "$INFO_F"; }
# row FIGURE UNIT SOFTIB_SERIES PEER_LABEL PEER_SERIES TARGET_KIND TARGET_VALUE
#   TARGET_KIND: ge|le (ratio softib/peer), abs_le|abs_ge (softib alone), - (none).
#   PEER_SERIES may be const:N or -.
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$ROWS_F"; }
show() { # progress line: last values of a series
  awk -F'\t' -v s="$1" '$1==s {v = v ($3=="ok" ? $4 : "ERR") " "; u=$2} END {printf "  %-44s %s%s\n", s, v, u}' "$RUNS_F" >&2
}

# why a run failed: the most telling line of its outputs
why() { # rc file...
  local rc=$1; shift
  local f m=""
  for f in "$@"; do
    [ -s "$f" ] || continue
    m=$(grep -aiE 'error|fail|invalid|exceed|timed out|timeout|cannot|closed|refused|not supported|panick|no such|denied' "$f" \
      | grep -avE 'PCIe relax|Lock-free' | tail -2 | tr '\n' ' ')
    [ -n "$m" ] && break
  done
  [ -z "$m" ] && m=$(cat "$@" 2>/dev/null | grep -av '^[- ]*$' | tail -1)
  [ "$rc" = 124 ] && m="timed out after ${T_RUN}s (killed); $m"
  printf 'rc=%s: %s' "$rc" "$m" | cut -c1-400
}

SEQ=0
PORT=20000
next() { SEQ=$((SEQ + 1)); PORT=$((PORT + 1)); L=$W/logs/$(printf %04d $SEQ); }

# wait until something listens on TCP PORT in namespace NS (or PID died)
wait_listen() { # ns port pid
  local i
  for i in $(seq 1 200); do
    ip netns exec "$1" ss -Hltn "sport = :$2" 2>/dev/null | grep -q . && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# --- namespaces and daemons ---------------------------------------------------------------
# the namespace's UDP counters (cumulative): datagrams the kernel dropped for a full socket
# receive buffer show up as RcvbufErrors
udp_snap() { # label ns
  info "udp.$1" "$(ip netns exec "$2" cat /proc/net/snmp | awk '$1 == "Udp:" {if (!h) {for (i = 2; i <= NF; i++) k[i] = $i; h = 1} else for (i = 2; i <= 7; i++) printf "%s=%s ", k[i], $i}')"
}
make_ns() { # name
  ip netns add "$1" || { echo "cannot create namespace $1" >&2; exit 2; }
  ip -n "$1" link set lo up
}
start_daemon() { # ns dir → DPID
  mkdir -p "$2"
  SOFTIB_RUNTIME_DIR=$2 ip netns exec "$1" "$S" daemon > "$2.log" 2>&1 &
  DPID=$!
  local i
  for i in $(seq 1 100); do
    SOFTIB_RUNTIME_DIR=$2 timeout 5 "$S" ibv_devices > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "softib daemon in $1 did not start: $(tail -3 "$2.log")" >&2
  exit 1
}
stop_daemon() { # pid
  kill -TERM "$1" 2>/dev/null
  local i
  for i in $(seq 1 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
}
sib() { # ns dir args...: a softib command, checked
  local ns=$1 dir=$2; shift 2
  SOFTIB_RUNTIME_DIR=$dir ip netns exec "$ns" timeout 10 "$S" "$@" > "$W/last.out" 2>&1 \
    || { echo "softib $* failed: $(cat "$W/last.out")" >&2; exit 1; }
}

# --- softib perftest ----------------------------------------------------------------------
# sib_pair NS_S DIR_S DEV_S NS_C DIR_C DEV_C HOST TOOL ARGS... → RC_S RC_C, $L-s.txt $L-c.txt
sib_pair() {
  local ns_s=$1 dir_s=$2 dev_s=$3 ns_c=$4 dir_c=$5 dev_c=$6 host=$7; shift 7
  next
  echo "softib $* -d $dev_s / -d $dev_c $host" > "$L-cmd.txt"
  SOFTIB_RUNTIME_DIR=$dir_s ip netns exec "$ns_s" timeout $T_RUN "$S" "$@" -d "$dev_s" -F \
    -p $PORT --timeout=10 > "$L-s.txt" 2>&1 &
  local sp=$!
  wait_listen "$ns_s" $PORT $sp
  SOFTIB_RUNTIME_DIR=$dir_c fgwait ip netns exec "$ns_c" timeout $T_RUN "$S" "$@" -d "$dev_c" -F \
    -p $PORT --timeout=10 "$host" > "$L-c.txt" 2>&1
  RC_C=$?
  wait $sp
  RC_S=$?
}
# up_pair: sib_pair for Debian's perftest TOOL (/usr/bin) on the drop-in library
# (softib run), with the same flags but --timeout (perftest 4.5 has none)
up_pair() {
  local ns_s=$1 dir_s=$2 dev_s=$3 ns_c=$4 dir_c=$5 dev_c=$6 host=$7 tool=$8; shift 8
  next
  echo "softib run -- /usr/bin/$tool $* -d $dev_s / -d $dev_c $host" > "$L-cmd.txt"
  ip netns exec "$ns_s" timeout $T_RUN "$S" run --no-dev --host "$dir_s" -- "/usr/bin/$tool" "$@" \
    -d "$dev_s" -F -p $PORT > "$L-s.txt" 2>&1 &
  local sp=$!
  wait_listen "$ns_s" $PORT $sp
  fgwait ip netns exec "$ns_c" timeout $T_RUN "$S" run --no-dev --host "$dir_c" -- "/usr/bin/$tool" \
    "$@" -d "$dev_c" -F -p $PORT "$host" > "$L-c.txt" 2>&1
  RC_C=$?
  wait $sp
  RC_S=$?
}
# the result line's field F for message size SIZE in FILE
field() { awk -v s="$2" -v f="$3" '$1==s && $2 ~ /^[0-9]+$/ && NF >= 5 {v=$f} END {print v}' "$1"; }

# sib_bw SERIES CONN SIZE TOOL NS_S DIR_S DEV_S NS_C DIR_C DEV_C HOST [extra args]
# MiB/s (UD: Mpps). Send tests report the receiver's figure (the server), write and read the
# requester's (the client), as upstream perftest prints them.
sib_bw() {
  local series=$1 conn=$2 size=$3 tool=$4; shift 4
  local pair=("$@"); pair=("${pair[@]:0:7}")
  local extra=("${@:8}")
  sib_pair "${pair[@]}" "$tool" -c "$conn" -s "$size" -D $DUR "${extra[@]}"
  local f=$L-c.txt col=4 unit=MiB/s
  [ "$tool" = ib_send_bw ] && f=$L-s.txt
  [ "$conn" = UD ] && { col=5; unit=Mpps; }
  local v=""
  [ $RC_C = 0 ] && [ $RC_S = 0 ] && v=$(field "$f" "$size" $col)
  rec_num "$series" $unit "$v" "$(why $RC_C "$L-c.txt"; echo -n ' | server '; why $RC_S "$L-s.txt")"
  show "$series"
}
# sib_lat SERIES TOOL NS_S DIR_S DEV_S NS_C DIR_C DEV_C HOST: t_typical µs, the median (and
# t_avg as SERIES:avg). Medians, because on a shared 2-core machine a spinning pair is now and
# then descheduled for milliseconds, which swings averages tenfold.
sib_lat() {
  local series=$1 tool=$2; shift 2
  sib_pair "$@" "$tool" -s 8 -n $LAT_N
  local avg="" typ=""
  if [ $RC_C = 0 ] && [ $RC_S = 0 ]; then
    avg=$(field "$L-c.txt" 8 6); typ=$(field "$L-c.txt" 8 5)
  fi
  local msg; msg="$(why $RC_C "$L-c.txt"; echo -n ' | server '; why $RC_S "$L-s.txt")"
  rec_num "$series" us "$typ" "$msg"
  rec_num "$series:avg" us "$avg" "$msg"
  show "$series"
}

# --- ucx_perftest -------------------------------------------------------------------------
# ucx SERIES NS_S ENV_S NS_C ENV_C HOST TEST SIZE ITERS → MiB/s (bw tests) or µs (lat tests:
# the median, 50.0_percentile_lat, like perftest's t_typical; the mean as SERIES:avg)
ucx() {
  local series=$1 ns_s=$2 env_s=$3 ns_c=$4 env_c=$5 host=$6 test=$7 size=$8 n=$9
  next
  local w=$((n / 10))
  echo "ucx_perftest -t $test -s $size -n $n -w $w ($env_c) $host" > "$L-cmd.txt"
  # shellcheck disable=SC2086
  env $env_s ip netns exec "$ns_s" timeout $T_RUN ucx_perftest -p $PORT > "$L-s.txt" 2>&1 &
  local sp=$!
  wait_listen "$ns_s" $PORT $sp
  # shellcheck disable=SC2086
  fgwait env $env_c ip netns exec "$ns_c" timeout $T_RUN ucx_perftest -p $PORT -t "$test" -s "$size" \
    -n "$n" -w "$w" -f -v "$host" > "$L-c.txt" 2>&1
  local rc=$?
  wait $sp
  # iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
  local line; line=$(grep -a '^ *[0-9][0-9]*,' "$L-c.txt" | tail -1 | tr -d ' ')
  local msg; msg=$(why $rc "$L-c.txt" "$L-s.txt")
  case $test in
    *lat)
      rec_num "$series" us "$([ $rc = 0 ] && echo "$line" | cut -d, -f2)" "$msg"
      rec_num "$series:avg" us "$([ $rc = 0 ] && echo "$line" | cut -d, -f4)" "$msg" ;;
    *)
      rec_num "$series" MiB/s "$([ $rc = 0 ] && echo "$line" | cut -d, -f6)" "$msg" ;;
  esac
  show "$series"
}
ucx_iters() { # test size → iterations for about half a second on this machine
  case $1 in
    *lat) echo 20000 ;;
    *) case $2 in 8) echo 200000 ;; 4096) echo 50000 ;; 65536) echo 10000 ;; *) echo 1000 ;; esac ;;
  esac
}
ucx_tcp_iters() {
  case $1 in
    *lat) echo 2000 ;;
    *) case $2 in 8) echo 50000 ;; 4096) echo 30000 ;; 65536) echo 3000 ;; *) echo 300 ;; esac ;;
  esac
}

SIZES="8 4096 65536 1048576"
human() { case $1 in 8) echo "8 B" ;; 4096) echo "4 KiB" ;; 65536) echo "64 KiB" ;; 1048576) echo "1 MiB" ;; *) echo "$1 B" ;; esac; }

info date_utc "$(date -u +%FT%TZ)"
info host "$(uname -n) $(uname -r), $(nproc) cores, $(awk '/model name/{$1=$2=$3=""; print; exit}' /proc/cpuinfo | sed 's/^ *//')"
info softib_source "$SRC_NOTE"
info git_commit "$(git -C "$ROOT" rev-parse HEAD 2>/dev/null)"
# A working-tree build includes whatever uncommitted edits the tree holds at build time.
info git_uncommitted_in_crates "$(git -C "$ROOT" status --porcelain -- crates Cargo.toml Cargo.lock 2>/dev/null | awk '{printf "%s%s", (NR > 1 ? " " : ""), $2}')"
info git_uncommitted_diff_sha256 "$(git -C "$ROOT" diff HEAD -- crates Cargo.toml Cargo.lock 2>/dev/null | sha256sum | cut -c1-16)"
info softib_binary "$S_ORIG (sha256 $(sha256sum "$S" | cut -c1-16))"
info loadavg_start "$(cut -d' ' -f1-3 /proc/loadavg)"
info options "runs=$RUNS only=$ONLY mtus=$MTUS dur=${DUR}s lat_iters=$LAT_N"
info build_seconds "$T_BUILD"

make_ns "$NSA"

# --- intra-host ---------------------------------------------------------------------------
if want intra; then
  log "intra-host: one daemon, rxe0 127.0.0.2 and rxe1 127.0.0.3 on lo (namespace $NSA)"
  D=$W/intra
  start_daemon "$NSA" "$D"; IDPID=$DPID
  sib "$NSA" "$D" link add rxe0 type rxe netdev lo --addr 127.0.0.2
  sib "$NSA" "$D" link add rxe1 type rxe netdev lo --addr 127.0.0.3
  P=("$NSA" "$D" rxe1 "$NSA" "$D" rxe0 127.0.0.1)
  SHM="UCX_TLS=posix,cma,self"
  for r in $(seq 1 "$RUNS"); do
    log "intra run $r/$RUNS"
    for dp in $DATAPATHS; do
      case $dp in daemon) k=softib ;; process) k=process ;; *) echo "--datapath: unknown $dp" >&2; exit 2 ;; esac
      export SOFTIB_DATAPATH=$dp
      for s in $SIZES; do
        for t in ib_write_bw ib_send_bw ib_read_bw; do sib_bw "intra.$k.$t.RC.$s" RC "$s" $t "${P[@]}"; done
      done
      sib_bw "intra.$k.ib_send_bw.UD.2" UD 2 ib_send_bw "${P[@]}"
      sib_lat "intra.$k.ib_send_lat.RC.8" ib_send_lat "${P[@]}"
      sib_lat "intra.$k.ib_write_lat.RC.8" ib_write_lat "${P[@]}"
    done
    unset SOFTIB_DATAPATH
    for s in $SIZES; do
      for t in ucp_put_bw tag_bw; do
        ucx "intra.ucx_shm.$t.$s" "$NSA" "$SHM" "$NSA" "$SHM" 127.0.0.1 $t "$s" "$(ucx_iters $t "$s")"
      done
    done
    for t in tag_lat ucp_put_lat; do
      ucx "intra.ucx_shm.$t.8" "$NSA" "$SHM" "$NSA" "$SHM" 127.0.0.1 $t 8 "$(ucx_iters $t 8)"
    done
    for s in $SIZES; do
      rec_num "intra.memcpy.$s" MiB/s "$("$W/memcpy_bw" "$s" "$s" 0.3)" "memcpy_bw failed"
      show "intra.memcpy.$s"
    done
    rec_num intra.memcpy_dram.1048576 MiB/s "$("$W/memcpy_bw" 1048576 268435456 0.3)" "memcpy_bw failed"
    show intra.memcpy_dram.1048576
  done
  stop_daemon "$IDPID"
  udp_snap after_intra.$NSA "$NSA"
  U="UCX posix+cma"
  for s in $SIZES; do
    h=$(human "$s")
    tk=- tv=-; [ "$s" = 65536 ] && { tk=ge; tv=0.5; }
    row "intra RC ib_write_bw $h" MiB/s "intra.softib.ib_write_bw.RC.$s" "$U ucp_put_bw" "intra.ucx_shm.ucp_put_bw.$s" $tk $tv
  done
  for s in $SIZES; do
    h=$(human "$s")
    tk=- tv=-; [ "$s" = 1048576 ] && { tk=ge; tv=1.0; }
    row "intra RC ib_send_bw $h" MiB/s "intra.softib.ib_send_bw.RC.$s" "$U tag_bw" "intra.ucx_shm.tag_bw.$s" $tk $tv
  done
  for s in $SIZES; do
    row "intra RC ib_read_bw $(human "$s")" MiB/s "intra.softib.ib_read_bw.RC.$s" "memcpy 1 core" "intra.memcpy.$s" - -
  done
  row "intra RC ib_send_bw 1 MiB" MiB/s intra.softib.ib_send_bw.RC.1048576 "memcpy 1 core DRAM" intra.memcpy_dram.1048576 - -
  row "intra RC ib_send_lat 8 B (median)" us intra.softib.ib_send_lat.RC.8 "$U tag_lat" intra.ucx_shm.tag_lat.8 le 2.0
  row "intra RC ib_write_lat 8 B (median)" us intra.softib.ib_write_lat.RC.8 "$U ucp_put_lat" intra.ucx_shm.ucp_put_lat.8 - -
  row "intra UD ib_send_bw 2 B msg rate" Mpps intra.softib.ib_send_bw.UD.2 "ConnectX-3 IB (seed)" const:8.24 ge 1.0
  if [[ " $DATAPATHS " == *" process "* ]]; then
    # issue 22's table for the process data path
    row "intra process RC ib_send_lat 8 B (median)" us intra.process.ib_send_lat.RC.8 "$U tag_lat" intra.ucx_shm.tag_lat.8 le 2.0
    row "intra process RC ib_write_lat 8 B (median)" us intra.process.ib_write_lat.RC.8 "$U ucp_put_lat" intra.ucx_shm.ucp_put_lat.8 le 3.0
    row "intra process UD ib_send_bw 2 B msg rate" Mpps intra.process.ib_send_bw.UD.2 "ConnectX-3 IB (seed)" const:8.24 ge 1.0
    row "intra process RC ib_write_bw 8 B" MiB/s intra.process.ib_write_bw.RC.8 "$U ucp_put_bw" intra.ucx_shm.ucp_put_bw.8 ge 1.0
    row "intra process RC ib_write_bw 64 KiB" MiB/s intra.process.ib_write_bw.RC.65536 "$U ucp_put_bw" intra.ucx_shm.ucp_put_bw.65536 ge 0.8
    row "intra process RC ib_send_bw 1 MiB" MiB/s intra.process.ib_send_bw.RC.1048576 "$U tag_bw" intra.ucx_shm.tag_bw.1048576 ge 1.0
    row "intra process RC ib_read_bw 64 KiB" MiB/s intra.process.ib_read_bw.RC.65536 "daemon path" intra.softib.ib_read_bw.RC.65536 - -
  fi
fi

# --- the drop-in libibverbs.so.1 ----------------------------------------------------------
if want dropin; then
  log "dropin: Debian's perftest on softib's libibverbs.so.1 beside softib's own (namespace $NSA)"
  D=$W/dropin
  start_daemon "$NSA" "$D"; DDPID=$DPID
  sib "$NSA" "$D" link add rxe0 type rxe netdev lo --addr 127.0.0.2
  sib "$NSA" "$D" link add rxe1 type rxe netdev lo --addr 127.0.0.3
  P=("$NSA" "$D" rxe1 "$NSA" "$D" rxe0 127.0.0.1)
  [ -f "$W/lib/libibverbs.so.1" ] || echo "no drop-in libraries beside $S_ORIG: every dropin run fails" >&2
  for r in $(seq 1 "$RUNS"); do
    log "dropin run $r/$RUNS"
    for dp in $DATAPATHS; do
      # The daemon path keeps the series' old names (dropin.own.*, dropin.upstream.*).
      case $dp in daemon) k="" ;; process) k="process." ;; *) echo "--datapath: unknown $dp" >&2; exit 2 ;; esac
      export SOFTIB_DATAPATH=$dp
      for s in 4096 65536; do
        sib_bw "dropin.${k}own.ib_write_bw.RC.$s" RC "$s" ib_write_bw "${P[@]}"
        up_pair "${P[@]}" ib_write_bw -c RC -s "$s" -D $DUR
        v=""; [ $RC_C = 0 ] && [ $RC_S = 0 ] && v=$(field "$L-c.txt" "$s" 4)
        rec_num "dropin.${k}upstream.ib_write_bw.RC.$s" MiB/s "$v" "$(why $RC_C "$L-c.txt"; echo -n ' | server '; why $RC_S "$L-s.txt")"
        show "dropin.${k}upstream.ib_write_bw.RC.$s"
      done
      sib_lat "dropin.${k}own.ib_send_lat.RC.8" ib_send_lat "${P[@]}"
      up_pair "${P[@]}" ib_send_lat -s 8 -n $LAT_N
      typ=""; avg=""
      [ $RC_C = 0 ] && [ $RC_S = 0 ] && { typ=$(field "$L-c.txt" 8 5); avg=$(field "$L-c.txt" 8 6); }
      msg="$(why $RC_C "$L-c.txt"; echo -n ' | server '; why $RC_S "$L-s.txt")"
      rec_num "dropin.${k}upstream.ib_send_lat.RC.8" us "$typ" "$msg"
      rec_num "dropin.${k}upstream.ib_send_lat.RC.8:avg" us "$avg" "$msg"
      show "dropin.${k}upstream.ib_send_lat.RC.8"
    done
    unset SOFTIB_DATAPATH
  done
  stop_daemon "$DDPID"
  for dp in $DATAPATHS; do
    case $dp in daemon) k=""; w="" ;; *) k="process."; w=" (process path)" ;; esac
    for s in 4096 65536; do
      row "dropin Debian ib_write_bw $(human "$s")$w" MiB/s "dropin.${k}upstream.ib_write_bw.RC.$s" "softib's ib_write_bw" "dropin.${k}own.ib_write_bw.RC.$s" ge 0.95
    done
    row "dropin Debian ib_send_lat 8 B (median)$w" us "dropin.${k}upstream.ib_send_lat.RC.8" "softib's ib_send_lat" "dropin.${k}own.ib_send_lat.RC.8" le 1.05
  done
fi

# --- inter-host ---------------------------------------------------------------------------
if want inter; then
  make_ns "$NSB"
  ip link add "$VA" type veth peer name "$VB" || { echo "cannot create veth" >&2; exit 2; }
  ip link set "$VA" netns "$NSA"
  ip link set "$VB" netns "$NSB"
  ip -n "$NSA" addr add $IPA/24 dev "$VA"
  ip -n "$NSB" addr add $IPB/24 dev "$VB"
  for mtu in $MTUS; do
    log "inter-host: veth $VA ($NSA, $IPA) <-> $VB ($NSB, $IPB), MTU $mtu"
    ip -n "$NSA" link set "$VA" mtu "$mtu" up
    ip -n "$NSB" link set "$VB" mtu "$mtu" up
    info "inter$mtu.veth_mtu" "$(ip -n "$NSA" -o link show "$VA" | sed -n 's/.* mtu \([0-9]*\) .*/\1/p')"
    DA=$W/inter$mtu-a DB=$W/inter$mtu-b
    start_daemon "$NSA" "$DA"; PA=$DPID
    start_daemon "$NSB" "$DB"; PB=$DPID
    sib "$NSA" "$DA" link add rxe0 type rxe netdev "$VA" --addr $IPA
    sib "$NSB" "$DB" link add rxe0 type rxe netdev "$VB" --addr $IPB
    info "inter$mtu.softib_active_mtu" "$(SOFTIB_RUNTIME_DIR=$DA timeout 10 "$S" ibv_devinfo -d rxe0 | awk '/active_mtu/{print $2; exit}')"
    P=("$NSB" "$DB" rxe0 "$NSA" "$DA" rxe0 $IPB)
    X=inter$mtu
    TA="UCX_TLS=tcp UCX_NET_DEVICES=$VA" TB="UCX_TLS=tcp UCX_NET_DEVICES=$VB"
    for r in $(seq 1 "$RUNS"); do
      log "inter MTU $mtu run $r/$RUNS"
      for s in $SIZES; do
        for t in ib_write_bw ib_send_bw ib_read_bw; do sib_bw "$X.softib.$t.RC.$s" RC "$s" $t "${P[@]}"; done
      done
      sib_bw "$X.softib.ib_send_bw.UD.64" UD 64 ib_send_bw "${P[@]}"
      sib_lat "$X.softib.ib_send_lat.RC.8" ib_send_lat "${P[@]}"
      sib_lat "$X.softib.ib_write_lat.RC.8" ib_write_lat "${P[@]}"
      # iperf3: one TCP stream; UDP 64-byte datagrams, received packets per second
      next
      ip netns exec "$NSB" timeout $T_RUN iperf3 -s -1 -p $PORT > "$L-s.txt" 2>&1 & sp=$!
      wait_listen "$NSB" $PORT $sp
      fgwait ip netns exec "$NSA" timeout $T_RUN iperf3 -c $IPB -p $PORT -t $((DUR + 1)) -J > "$L-c.txt" 2> "$L-e.txt"; rc=$?
      wait $sp
      rec_num "$X.iperf3.tcp" MiB/s "$(jq '.end.sum_received.bits_per_second / 8 / 1048576' "$L-c.txt" 2>/dev/null)" "$(why $rc "$L-e.txt" "$L-c.txt")"
      show "$X.iperf3.tcp"
      next
      ip netns exec "$NSB" timeout $T_RUN iperf3 -s -1 -p $PORT > "$L-s.txt" 2>&1 & sp=$!
      wait_listen "$NSB" $PORT $sp
      fgwait ip netns exec "$NSA" timeout $T_RUN iperf3 -c $IPB -p $PORT -t $((DUR + 1)) -u -b 0 -l 64 -J > "$L-c.txt" 2> "$L-e.txt"; rc=$?
      wait $sp
      rec_num "$X.iperf3.udp64" Mpps "$(jq '.end.sum_received.bytes / 64 / .end.sum_received.seconds / 1e6' "$L-c.txt" 2>/dev/null)" "$(why $rc "$L-e.txt" "$L-c.txt")"
      show "$X.iperf3.udp64"
      # qperf: tcp_bw, udp_lat, tcp_lat (bytes/s and ns with -uu)
      next
      ip netns exec "$NSB" timeout $((T_RUN * 2)) qperf -lp $PORT > "$L-s.txt" 2>&1 & sp=$!
      wait_listen "$NSB" $PORT $sp
      fgwait ip netns exec "$NSA" timeout $((T_RUN * 2)) qperf $IPB -lp $PORT -t $DUR -uu tcp_bw udp_lat tcp_lat quit > "$L-c.txt" 2>&1; rc=$?
      wait $sp
      q() { awk -v t="$1" -v k="$2" '/^[a-z_]+:$/ {cur=$1} cur==t":" && $1==k {print $3; exit}' "$L-c.txt"; }
      bw=$(q tcp_bw bw) ul=$(q udp_lat latency) tl=$(q tcp_lat latency)
      m=$(why $rc "$L-c.txt")
      rec_num "$X.qperf.tcp_bw" MiB/s "$([ -n "$bw" ] && echo "$bw / 1048576" | bc -l)" "$m"
      rec_num "$X.qperf.udp_lat" us "$([ -n "$ul" ] && echo "$ul / 1000" | bc -l)" "$m"
      rec_num "$X.qperf.tcp_lat" us "$([ -n "$tl" ] && echo "$tl / 1000" | bc -l)" "$m"
      show "$X.qperf.tcp_bw"; show "$X.qperf.udp_lat"; show "$X.qperf.tcp_lat"
      for s in $SIZES; do
        for t in ucp_put_bw tag_bw; do
          ucx "$X.ucx_tcp.$t.$s" "$NSB" "$TB" "$NSA" "$TA" $IPB $t "$s" "$(ucx_tcp_iters $t "$s")"
        done
      done
      for t in tag_lat ucp_put_lat; do
        ucx "$X.ucx_tcp.$t.8" "$NSB" "$TB" "$NSA" "$TA" $IPB $t 8 "$(ucx_tcp_iters $t 8)"
      done
    done
    stop_daemon "$PA"; stop_daemon "$PB"
    udp_snap "after_inter$mtu.$NSA" "$NSA"; udp_snap "after_inter$mtu.$NSB" "$NSB"
    U="UCX tcp"
    for s in $SIZES; do
      row "$X RC ib_write_bw $(human "$s")" MiB/s "$X.softib.ib_write_bw.RC.$s" "$U ucp_put_bw" "$X.ucx_tcp.ucp_put_bw.$s" - -
    done
    row "$X RC ib_write_bw 64 KiB" MiB/s "$X.softib.ib_write_bw.RC.65536" "iperf3 TCP 1 stream" "$X.iperf3.tcp" ge 1.0
    row "$X RC ib_write_bw 1 MiB" MiB/s "$X.softib.ib_write_bw.RC.1048576" "qperf tcp_bw" "$X.qperf.tcp_bw" - -
    for s in $SIZES; do
      row "$X RC ib_send_bw $(human "$s")" MiB/s "$X.softib.ib_send_bw.RC.$s" "$U tag_bw" "$X.ucx_tcp.tag_bw.$s" - -
    done
    for s in $SIZES; do
      row "$X RC ib_read_bw $(human "$s")" MiB/s "$X.softib.ib_read_bw.RC.$s" "iperf3 TCP 1 stream" "$X.iperf3.tcp" - -
    done
    row "$X RC ib_send_lat 8 B (median)" us "$X.softib.ib_send_lat.RC.8" "$U tag_lat" "$X.ucx_tcp.tag_lat.8" le 1.0
    row "$X RC ib_send_lat 8 B (median)" us "$X.softib.ib_send_lat.RC.8" "qperf udp_lat (mean)" "$X.qperf.udp_lat" - -
    row "$X RC ib_write_lat 8 B (median)" us "$X.softib.ib_write_lat.RC.8" "$U ucp_put_lat" "$X.ucx_tcp.ucp_put_lat.8" - -
    row "$X RC ib_write_lat 8 B (median)" us "$X.softib.ib_write_lat.RC.8" "qperf tcp_lat (mean)" "$X.qperf.tcp_lat" - -
    row "$X UD ib_send_bw 64 B msg rate" Mpps "$X.softib.ib_send_bw.UD.64" "iperf3 -u -l 64 (rx)" "$X.iperf3.udp64" ge 1.0
  done
fi

# --- scale --------------------------------------------------------------------------------
if want scale; then
  log "scale: one daemon, rxe0/rxe1 on lo (namespace $NSA)"
  D=$W/scale
  start_daemon "$NSA" "$D"; SDPID=$DPID
  sib "$NSA" "$D" link add rxe0 type rxe netdev lo --addr 127.0.0.2
  sib "$NSA" "$D" link add rxe1 type rxe netdev lo --addr 127.0.0.3
  P=("$NSA" "$D" rxe1 "$NSA" "$D" rxe0 127.0.0.1)
  rss_mib() { awk '/^VmRSS/ {printf "%.2f", $2 / 1024}' "/proc/$1/status"; }
  info scale.daemon_rss_fresh_mib "$(rss_mib $SDPID)"
  udp_snap before_scale.$NSA "$NSA"
  # As perftest is run by default: one CQ of (tx_depth + rx_depth) x QPs entries.
  sib_bw scale.softib.ib_write_bw.q256_default_tx_depth RC 65536 ib_write_bw "${P[@]}" -q 256
  for r in $(seq 1 "$RUNS"); do
    log "scale run $r/$RUNS"
    for q in 1 16 256; do
      sib_bw "scale.softib.ib_write_bw.q$q" RC 65536 ib_write_bw "${P[@]}" -q $q -t $SCALE_T
      udp_snap "after_scale_q$q.run$r.$NSA" "$NSA"
    done
    # 500 client QPs + 500 server QPs = 1,000 RC QPs in the daemon, all connected (RTS) while
    # the test runs; the figure is the daemon's largest RSS seen while all 1,000 exist.
    next
    echo "ib_write_bw -q 500 -s 8 -t 8 -D 3 (RSS sampling)" > "$L-cmd.txt"
    SOFTIB_RUNTIME_DIR=$D ip netns exec "$NSA" timeout $T_RUN "$S" ib_write_bw -d rxe1 -F -q 500 -s 8 -t 8 -D 3 \
      -p $PORT --timeout=20 > "$L-s.txt" 2>&1 & sp=$!
    wait_listen "$NSA" $PORT $sp
    SOFTIB_RUNTIME_DIR=$D ip netns exec "$NSA" timeout $T_RUN "$S" ib_write_bw -d rxe0 -F -q 500 -s 8 -t 8 -D 3 \
      -p $PORT --timeout=20 127.0.0.1 > "$L-c.txt" 2>&1 & cp=$!
    maxq=0 rss=""
    while kill -0 $cp 2>/dev/null; do
      nq=$(SOFTIB_RUNTIME_DIR=$D timeout 5 "$S" res 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "qp") n += $(i + 1)} END {print n + 0}')
      [ "$nq" -gt "$maxq" ] && maxq=$nq
      if [ "$nq" -ge 1000 ]; then
        cur=$(rss_mib $SDPID)
        if [ -z "$rss" ] || [ "$(echo "$cur > $rss" | bc)" = 1 ]; then rss=$cur; fi
      fi
      sleep 0.2
    done
    wait $cp; rc=$?; wait $sp; rcs=$?
    if [ -n "$rss" ]; then
      rec scale.softib.daemon_rss_1000_rc_qps MiB "$rss"
      [ $rc = 0 ] && [ $rcs = 0 ] || info "scale.rss_run_$r.note" "QPs connected but the test failed: $(why $rc "$L-c.txt")"
    else
      rec_err scale.softib.daemon_rss_1000_rc_qps MiB "never saw 1,000 QPs (max $maxq): $(why $rc "$L-c.txt"; echo -n ' | server '; why $rcs "$L-s.txt")"
    fi
    show scale.softib.daemon_rss_1000_rc_qps
  done
  # Idle: no clients; CPU ticks (utime+stime) over 4 s windows.
  sleep 1
  hz=$(getconf CLK_TCK)
  for r in $(seq 1 "$RUNS"); do
    a=$(awk '{print $14 + $15}' /proc/$SDPID/stat); sleep 4; b=$(awk '{print $14 + $15}' /proc/$SDPID/stat)
    rec_num scale.softib.idle_daemon_cpu % "$(echo "($b - $a) * 100 / $hz / 4" | bc -l)" "cannot read /proc/$SDPID/stat"
    show scale.softib.idle_daemon_cpu
  done
  info scale.daemon_threads "$(awk '/^Threads/ {print $2}' /proc/$SDPID/status)"
  info scale.daemon_rss_end_mib "$(rss_mib $SDPID)"
  stop_daemon "$SDPID"
  udp_snap after_scale.$NSA "$NSA"
  row "scale ib_write_bw -q 16 (64 KiB, -t $SCALE_T)" MiB/s scale.softib.ib_write_bw.q16 "softib -q 1" scale.softib.ib_write_bw.q1 - -
  row "scale ib_write_bw -q 256 (64 KiB, -t $SCALE_T)" MiB/s scale.softib.ib_write_bw.q256 "softib -q 1" scale.softib.ib_write_bw.q1 ge 0.9
  row "scale ib_write_bw -q 256 (default -t 128)" MiB/s scale.softib.ib_write_bw.q256_default_tx_depth "softib -q 1" scale.softib.ib_write_bw.q1 - -
  row "scale daemon RSS, 1,000 RC QPs connected" MiB scale.softib.daemon_rss_1000_rc_qps - - abs_le 64
  row "scale idle daemon CPU (4 s windows)" % scale.softib.idle_daemon_cpu - - abs_le 0
fi

# --- ipoib -------------------------------------------------------------------------------
if want ipoib; then
  FD=$W/ipoib-fabric
  log "ipoib: topoA with a namespace per host ($FD), ib0 on port 1 of each"
  if ! timeout 60 "$S" fabric up "$ROOT/topologies/topoA.net" --dir "$FD" --netns > "$W/ipoib-up.txt" 2>&1; then
    rec_err ipoib.iperf3.tcp MiB/s "fabric up: $(tail -1 "$W/ipoib-up.txt")"
  else
    for i in $(seq 1 100); do
      [ "$("$S" fabric status --dir "$FD" | grep -c 'port 1 Active')" = 2 ] && break
      sleep 0.2
    done
    fx() { local h=$1; shift; timeout 20 "$S" fabric exec "$h" --dir "$FD" -- "$@"; }
    ok=1
    for hp in test213:192.168.0.2 test214:192.168.0.3; do
      h=${hp%%:*} a=${hp#*:}
      { fx "$h" softib ipoib add ib0 --dev mlx4_0 --port 1 && fx "$h" ip addr add "$a/24" dev ib0 \
        && fx "$h" ip link set ib0 up; } >> "$W/ipoib-up.txt" 2>&1 || ok=0
    done
    fx test213 ping -c 2 -w 10 192.168.0.3 >> "$W/ipoib-up.txt" 2>&1 || ok=0
    IBMTU=$(fx test213 cat /sys/class/net/ib0/mtu 2>/dev/null || echo 2044)
    info ipoib.ib0_mtu "$IBMTU"
    NS1=$(awk '$1 == "test213" {print $2}' "$FD/netns") NS2=$(awk '$1 == "test214" {print $2}' "$FD/netns")
    # The veth to compare with: its own pair of namespaces, ib0's MTU.
    make_ns "$NSA"i; make_ns "$NSB"i
    ip link add "$VA"i type veth peer name "$VB"i
    ip link set "$VA"i netns "$NSA"i; ip link set "$VB"i netns "$NSB"i
    ip -n "$NSA"i addr add 10.214.0.1/24 dev "$VA"i; ip -n "$NSB"i addr add 10.214.0.2/24 dev "$VB"i
    ip -n "$NSA"i link set "$VA"i mtu "$IBMTU" up; ip -n "$NSB"i link set "$VB"i mtu "$IBMTU" up
    for r in $(seq 1 "$RUNS"); do
      log "ipoib run $r/$RUNS"
      for pair in "ipoib.iperf3.tcp $NS2 $NS1 192.168.0.3" "ipoib.veth.iperf3.tcp ${NSB}i ${NSA}i 10.214.0.2"; do
        set -- $pair
        next
        if [ $ok = 1 ] || [ "$1" != ipoib.iperf3.tcp ]; then
          ip netns exec "$2" timeout $T_RUN iperf3 -s -1 -p $PORT > "$L-s.txt" 2>&1 & sp=$!
          wait_listen "$2" $PORT $sp
          fgwait ip netns exec "$3" timeout $T_RUN iperf3 -c "$4" -p $PORT -t $((DUR + 1)) -J > "$L-c.txt" 2> "$L-e.txt"; rc=$?
          wait $sp
          rec_num "$1" MiB/s "$(jq '.end.sum_received.bits_per_second / 8 / 1048576' "$L-c.txt" 2>/dev/null)" "$(why $rc "$L-e.txt" "$L-c.txt")"
        else
          rec_err "$1" MiB/s "ib0 did not come up: $(tail -2 "$W/ipoib-up.txt" | tr '\n' ' ')"
        fi
        show "$1"
      done
    done
    ip netns del "$NSA"i; ip netns del "$NSB"i
    "$S" fabric down --dir "$FD" > /dev/null 2>&1
  fi
  row "ipoib iperf3 TCP over ib0 (MTU ${IBMTU:-?})" MiB/s ipoib.iperf3.tcp "iperf3 TCP over veth, same MTU" ipoib.veth.iperf3.tcp - -
fi

if want cm; then
  log "cm: rdma_cm between two hosts on lo (127.0.0.2, 127.0.0.3; namespace $NSA)"
  CA=$W/cm-a CB=$W/cm-b
  start_daemon "$NSA" "$CA"; CPA=$DPID
  start_daemon "$NSA" "$CB"; CPB=$DPID
  sib "$NSA" "$CA" link add rxe0 type rxe netdev lo --addr 127.0.0.2
  sib "$NSA" "$CB" link add rxe0 type rxe netdev lo --addr 127.0.0.3
  CONNS=200; [ $QUICK = 1 ] && CONNS=100
  PINGS=2000
  # cm_run NAME CLIENT_TIMED... : starts the server ($CM_SERVER, an array) on host B, then the
  # client on host A until it no longer hears that nobody listens yet (rdma_cm clients do not
  # retry a REJ), at most 20 s; CM_T is the client's last run's wall time (s), RC_C/RC_S.
  cm_run() {
    next
    echo "${CM_SERVER[*]} / $*" > "$L-cmd.txt"
    ip netns exec "$NSA" timeout $T_RUN "$S" run --no-dev --host "$CB" -- "${CM_SERVER[@]}" > "$L-s.txt" 2>&1 &
    local sp=$! t0 t1 tries=0
    while :; do
      sleep 0.2
      t0=$(date +%s.%N)
      fgwait ip netns exec "$NSA" timeout $T_RUN "$S" run --no-dev --host "$CA" -- "$@" > "$L-c.txt" 2>&1
      RC_C=$?
      t1=$(date +%s.%N)
      tries=$((tries + 1))
      grep -qE 'REJECTED, error:? 8|REJECTED; error: 8' "$L-c.txt" && [ $tries -lt 100 ] || break
    done
    CM_T=$(echo "$t1 - $t0" | bc)
    # cmtime's server serves until stopped; rping's and perftest's end with their client.
    if [ "${CM_SERVER[0]}" = cmtime ]; then kill $sp 2>/dev/null; wait $sp; RC_S=0; else wait $sp; RC_S=$?; fi
  }
  # own_cm_run TOOL ARGS...: softib's own perftest pair with ARGS (-R or not); CM_T as cm_run
  own_cm_run() {
    next
    echo "softib $* (server 127.0.0.3, client 127.0.0.2)" > "$L-cmd.txt"
    SOFTIB_RUNTIME_DIR=$CB ip netns exec "$NSA" timeout $T_RUN "$S" "$@" -d rxe0 -p $PORT --timeout=10 \
      > "$L-s.txt" 2>&1 &
    local sp=$! t0 t1
    # The same head start either way (an rdma_cm listen cannot be seen from outside as a TCP
    # one can): the client's time is then its own start, the connections and 5 iterations.
    sleep 1
    t0=$(date +%s.%N)
    SOFTIB_RUNTIME_DIR=$CA fgwait ip netns exec "$NSA" timeout $T_RUN "$S" "$@" -d rxe0 -p $PORT \
      --timeout=10 127.0.0.3 > "$L-c.txt" 2>&1
    RC_C=$?
    t1=$(date +%s.%N)
    wait $sp; RC_S=$?
    CM_T=$(echo "$t1 - $t0" | bc)
  }
  for r in $(seq 1 "$RUNS"); do
    log "cm run $r/$RUNS"
    # cmtime: each step for every connection before the next; the steps' totals from
    # creating the ids to the last ESTABLISHED are the time to set CONNS connections up.
    CM_SERVER=(cmtime -b 127.0.0.3 -p $((PORT + 1)))
    cm_run cmtime -s 127.0.0.3 -p $((PORT + 1)) -c $CONNS
    st() { awk -v k="$1" -F: '$1 ~ "^"k" *$" {split($2, f, " "); print f[1]; exit}' "$L-c.txt"; }
    setup=$(echo "$(st 'create id') + $(st 'resolve addr') + $(st 'resolve route') + $(st 'create qp') + $(st connect)" | bc -l 2>/dev/null)
    conn=$(st connect)
    m=$(why $RC_C "$L-c.txt")
    ok=$([ $RC_C = 0 ] && ! grep -q 'event: RDMA_CM_EVENT' "$L-c.txt" && echo 1)
    rec_num cm.cmtime.setup_per_s conn/s "$([ -n "$ok" ] && [ -n "$setup" ] && echo "$CONNS * 1000 / $setup" | bc -l)" "$m"
    rec_num cm.cmtime.connect_per_s conn/s "$([ -n "$ok" ] && [ -n "$conn" ] && echo "$CONNS * 1000 / $conn" | bc -l)" "$m"
    show cm.cmtime.setup_per_s; show cm.cmtime.connect_per_s
    # rping: one ping (the client's SEND, the server's RDMA READ and WRITE, their SENDs) is
    # the time of PINGS + 1 pings less that of one, over PINGS.
    t=() m=""
    for n in 1 $((PINGS + 1)); do
      CM_SERVER=(rping -s -a 127.0.0.3 -p $((PORT + 1)) -C $n)
      cm_run rping -c -a 127.0.0.3 -p $((PORT + 1)) -C $n
      [ $RC_C = 0 ] && [ $RC_S = 0 ] && t+=("$CM_T") || m=$(why $RC_C "$L-c.txt"; echo -n ' | server '; why $RC_S "$L-s.txt")
    done
    rec_num cm.rping.per_ping us "$([ ${#t[@]} = 2 ] && echo "(${t[1]} - ${t[0]}) * 1000000 / $PINGS" | bc -l)" "$m"
    show cm.rping.per_ping
    # softib's own perftest: 256 QPs more (-q 257 against -q 1), 5 iterations each, over the
    # TCP exchange and over rdma_cm; the client's wall time.
    for how in tcp rdma_cm; do
      t=() m="the -q 257 client took no longer than the -q 1 one (noise)"
      for q in 1 257; do
        a=(ib_write_bw -q $q -n 5 -s 8); [ $how = rdma_cm ] && a+=(-R)
        own_cm_run "${a[@]}"
        [ $RC_C = 0 ] && [ $RC_S = 0 ] && t+=("$CM_T") || m=$(why $RC_C "$L-c.txt"; echo -n ' | server '; why $RC_S "$L-s.txt")
      done
      rec_num cm.own.$how.qps_per_s QP/s "$([ ${#t[@]} = 2 ] && echo "256 / (${t[1]} - ${t[0]})" | bc -l)" "$m"
      show cm.own.$how.qps_per_s
    done
  done
  stop_daemon "$CPA"; stop_daemon "$CPB"
  row "cm cmtime: connections set up per second to one listener ($CONNS)" conn/s cm.cmtime.setup_per_s "softib perftest TCP exchange, QP/s" cm.own.tcp.qps_per_s - -
  row "cm cmtime: the connect step alone (REQ/REP/RTU), per second" conn/s cm.cmtime.connect_per_s - - - -
  row "cm softib perftest -R: QPs connected per second" QP/s cm.own.rdma_cm.qps_per_s "the same over its TCP exchange" cm.own.tcp.qps_per_s - -
  row "cm rping: time per ping" us cm.rping.per_ping - - - -
fi

if want sm; then
  log "sm: 504-host fat tree"
  FT=$W/ft504.net
  "$S" fabric gen --hosts 504 fat-tree > "$FT"
  SMG=0x0000000000200001   # host1 port 1
  # opensm buffers its log unless told not to: SUBNET UP would show only when it exits.
  echo "force_log_flush TRUE" > "$W/osm.conf"
  UMAD2SIM=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
  # Seconds from starting "$@" (an SM writing its log to $SMLOG) to SUBNET UP in that log.
  until_up() {
    local t0 t1 pid
    rm -f "$SMLOG"
    t0=$(date +%s.%N)
    "$@" > "$SMLOG.out" 2>&1 & pid=$!
    while ! grep -q 'SUBNET UP' "$SMLOG" 2>/dev/null; do
      if ! kill -0 $pid 2>/dev/null || [ "$(echo "$(date +%s.%N) - $t0 > 300" | bc)" = 1 ]; then
        kill $pid 2>/dev/null; wait $pid 2>/dev/null; return 1
      fi
      sleep 0.02
    done
    t1=$(date +%s.%N)
    kill $pid 2>/dev/null; wait $pid 2>/dev/null
    echo "$t1 - $t0" | bc
  }
  for r in $(seq 1 "$RUNS"); do
    log "sm run $r/$RUNS"
    for who in sm.real_opensm.softib sm.softib_opensm.softib; do
      next
      FD=$W/sm-fabric
      if "$S" fabric up "$FT" --dir "$FD" --no-sm > "$L-up.txt" 2>&1; then
        SMLOG=$L-sm.log
        if [ $who = sm.real_opensm.softib ]; then
          v=$(until_up "$S" fabric exec host1 --dir "$FD" -- /usr/sbin/opensm -F "$W/osm.conf" -g $SMG -s 0 -f "$SMLOG")
        else
          v=$(until_up "$S" fabric exec host1 --dir "$FD" -- "$S" opensm -g $SMG -f "$SMLOG")
        fi
        rec_num $who s "$v" "no SUBNET UP within 300 s: $(tail -2 "$SMLOG.out" 2>/dev/null | tr '\n' ' ')"
      else
        rec_err $who s "fabric up: $(tail -2 "$L-up.txt" | tr '\n' ' ')"
      fi
      "$S" fabric down --dir "$FD" > /dev/null 2>&1
      show $who
    done
    next
    if command -v ibsim > /dev/null && [ -e $UMAD2SIM ]; then
      export IBSIM_SOCKNAME=softibbench$$
      mkdir -p "$L-cache"
      ibsim -s -n "$FT" > "$L-ibsim.txt" 2>&1 & ip=$!
      sleep 1
      SMLOG=$L-sm.log
      v=$(cd "$L-cache" && OSM_CACHE_DIR=$L-cache OSM_TMP_DIR=$L-cache LD_PRELOAD=$UMAD2SIM SIM_HOST=host1 \
        until_up /usr/sbin/opensm -F "$W/osm.conf" -g $SMG -s 0 -f "$SMLOG")
      kill $ip 2>/dev/null; wait $ip 2>/dev/null
      unset IBSIM_SOCKNAME
      rec_num sm.real_opensm.ibsim s "$v" "no SUBNET UP within 300 s on ibsim: $(tail -2 "$SMLOG.out" 2>/dev/null | tr '\n' ' ')"
    else
      rec_err sm.real_opensm.ibsim s "ibsim is not installed (apt-get install ibsim-utils libumad2sim0)"
    fi
    show sm.real_opensm.ibsim
  done
  row "sm Debian opensm start to SUBNET UP, 504-host fat tree, on softib" s sm.real_opensm.softib "the same opensm on ibsim" sm.real_opensm.ibsim - -
  row "sm softib's opensm start to SUBNET UP, same fabric" s sm.softib_opensm.softib "Debian's opensm on softib" sm.real_opensm.softib - -
fi

T_END=$(date +%s.%N)
info loadavg_end "$(cut -d' ' -f1-3 /proc/loadavg)"
info measure_seconds "$(echo "$T_END - $T_START - $T_BUILD" | bc)"
mkdir -p "$ROOT/bench/results"
OUT=$ROOT/bench/results/$STAMP.json
awk -f "$ROOT/bench/report.awk" -v json="$OUT" -v md="${OUT%.json}.md" "$INFO_F" "$RUNS_F" "$ROWS_F"
echo "JSON: ${OUT#"$ROOT"/}   measured in $(printf %.0f "$(echo "$T_END - $T_START - $T_BUILD" | bc)") s (build ${T_BUILD%.*} s)"
