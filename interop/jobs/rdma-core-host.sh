# shellcheck shell=bash
# Host side of interop/rdma-core.sh (run by run-job.sh --host, inside the namespace, with
# jobs/guest-agent.sh as the guest job): softib's tools built with the rdma-core backend run
# *inside the guest* on the kernel's rxe0 (SOFTIB_BACKEND=rdma-core: libibverbs loaded at run
# time), against rdma-core's own tools and the guest's perftest in the same guest.
#
# The softib binary goes in through the 9p share; the guest installs it with its tool links in
# /opt/softib/bin. Each cell is one guest script that starts the server, waits for its TCP port,
# runs the client (to the guest's own eth0 address: rxe delivers locally) and reports both exit
# statuses. Results: $INTEROP_OUT/rdma-core.txt, one line a cell; outputs in $INTEROP_OUT/cells/.
set -u
. "$INTEROP_DIR/lib.sh"

RESULT="$INTEROP_OUT/rdma-core.txt"
CELLS="$INTEROP_OUT/cells"
mkdir -p "$CELLS"
: >"$RESULT"
T=${SOFTIB_INTEROP_CELL_TIMEOUT:-120}
ONLY=${SOFTIB_INTEROP_ONLY:-}
PORT=18515

cp "$SOFTIB" "$INTEROP_SHARE/softib"
guest_wait_ready 300 || { echo "guest never became ready"; exit 3; }
echo "guest ready"
guest_run install 60 "mkdir -p /opt/softib/bin && cp /share/softib /opt/softib/softib && chmod +x /opt/softib/softib && /opt/softib/softib install-links /opt/softib/bin && ls /opt/softib/bin | tr '\n' ' '" \
    || { echo "install failed: $(cat "$CMD_DIR/install.out")"; exit 3; }
echo "installed: $(cat "$CMD_DIR/install.out")"
S=/opt/softib/bin

n=0
fails=0
verdict() {
    local name=$1 rc=$2 t0=$3 extra=$4 v=PASS
    [ "$rc" = 0 ] || { v=FAIL; fails=$((fails + 1)); }
    printf '%-44s %-4s %4ss  %s\n' "$name" "$v" $(( $(date +%s) - t0 )) "$extra" | tee -a "$RESULT"
}

# single NAME COMMAND — one guest command (a device tool); its output is the cell's.
single() {
    local name=$1; shift
    if [ -n "$ONLY" ] && ! [[ "$name" =~ $ONLY ]]; then return; fi
    n=$((n + 1))
    local id t0 rc
    id=$(printf '%02d-%s' "$n" "$name")
    t0=$(date +%s)
    echo "== $id"
    guest_run "$id" "$T" "$*"; rc=$?
    cp "$CMD_DIR/$id.out" "$CELLS/$id.txt" 2>/dev/null
    verdict "$id" "$rc" "$t0" "rc=$rc"
}

# pair NAME SERVER_CMD -- CLIENT_CMD — both in the guest; the client gets the guest's address.
pair() {
    local name=$1; shift
    local scmd="" ccmd="" seen=0 a
    for a in "$@"; do
        if [ "$a" = "--" ]; then seen=1; continue; fi
        if [ $seen = 0 ]; then scmd="$scmd $a"; else ccmd="$ccmd $a"; fi
    done
    if [ -n "$ONLY" ] && ! [[ "$name" =~ $ONLY ]]; then return; fi
    n=$((n + 1))
    local id t0 rc
    id=$(printf '%02d-%s' "$n" "$name")
    t0=$(date +%s)
    echo "== $id"
    guest "$id" "export SOFTIB_BACKEND=rdma-core
C=/share/cmd/$id
timeout $T$scmd >\$C.server.txt 2>&1 & sp=\$!
for i in \$(seq 300); do ss -Hltn 'sport = :$PORT' | grep -q . && break; sleep 0.1; done
timeout $T$ccmd $GUEST_IP >\$C.client.txt 2>&1; crc=\$?
wait \$sp; src=\$?
echo server_rc=\$src client_rc=\$crc
[ \$src = 0 ] && [ \$crc = 0 ]"
    guest_wait "$id" $((2 * T + 20)); rc=$?
    cp "$CMD_DIR/$id.server.txt" "$CELLS/$id.server.txt" 2>/dev/null
    cp "$CMD_DIR/$id.client.txt" "$CELLS/$id.client.txt" 2>/dev/null
    # Let both sides close the port before the next cell.
    sleep 1
    verdict "$id" "$rc" "$t0" "$(tr '\n' ' ' <"$CMD_DIR/$id.out" 2>/dev/null)"
}

# The device tools, softib's beside rdma-core's (the cell passes when softib's exits 0; the
# diff is kept for docs/interop.md).
single softib.ibv_devinfo "env SOFTIB_BACKEND=rdma-core $S/ibv_devinfo -d rxe0"
single softib.ibv_devinfo.v "env SOFTIB_BACKEND=rdma-core $S/ibv_devinfo -v -d rxe0"
single softib.ibstat "env SOFTIB_BACKEND=rdma-core $S/ibstat rxe0"
single softib.ibv_devices "env SOFTIB_BACKEND=rdma-core $S/ibv_devices"
single rdma-core.ibv_devinfo "ibv_devinfo -d rxe0"
single rdma-core.ibv_devinfo.v "ibv_devinfo -v -d rxe0"
single rdma-core.ibstat "ibstat rxe0"
single rdma-core.ibv_devices "ibv_devices"
# softib's output against rdma-core's, line by line.
for t in ibv_devinfo ibv_devinfo.v ibstat ibv_devices; do
    a=$(ls "$CELLS"/*-softib.$t.txt 2>/dev/null | head -1)
    b=$(ls "$CELLS"/*-rdma-core.$t.txt 2>/dev/null | head -1)
    [ -n "$a" ] && [ -n "$b" ] || continue
    if diff -u "$b" "$a" >"$CELLS/diff.$t.txt"; then
        echo "diff $t (rdma-core vs softib): identical" | tee -a "$RESULT"
    else
        echo "diff $t (rdma-core vs softib): $(grep -c '^[-+][^-+]' "$CELLS/diff.$t.txt") lines differ (cells/diff.$t.txt)" | tee -a "$RESULT"
    fi
done
# Chosen automatically: no softibd in the guest, so rdma-core.
single softib.ibv_devinfo.auto "$S/ibv_devinfo -d rxe0"
# A softib-only tool says so.
single softib.ibnetdiscover.refused "env SOFTIB_BACKEND=rdma-core $S/ibnetdiscover 2>&1 | tee /dev/stderr | grep -q 'not available on an rdma-core device'"

G="-d rxe0 -g 1"
for t in rc uc ud; do
    extra="-n 50"
    [ $t = ud ] && extra="-n 50 -s 512"
    pair "ibv_${t}_pingpong.rdma-core-server" ibv_${t}_pingpong $G $extra -- $S/ibv_${t}_pingpong $G $extra
    pair "ibv_${t}_pingpong.softib-server" $S/ibv_${t}_pingpong $G $extra -- ibv_${t}_pingpong $G $extra
done

P="-d rxe0 -x 1 -F -n 100"
for tool in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw "ib_send_bw -c UD" "ib_send_bw -c UC" \
    "ib_write_bw -s 64 -q 2" ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat; do
    name=$(echo "$tool" | sed 's/ -c / /; s/ -/./g; s/ /./g')
    pair "$name.perftest-server" $tool $P -- $S/$tool $P
    pair "$name.softib-server" $S/$tool $P -- $tool $P
done

echo "cells: $n, failed: $fails" | tee -a "$RESULT"
: >"$CMD_DIR/stop"
exit 0
