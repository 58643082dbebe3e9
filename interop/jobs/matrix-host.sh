# shellcheck shell=bash
# Host side of the interop matrix (run by interop/matrix.sh through run-job.sh --host, inside
# the namespace): every cell runs one tool pair, softib's on softib0 here and the guest's on
# rxe0, once with each side as the server. Results: $INTEROP_OUT/matrix.txt, one line a cell;
# each side's output in $INTEROP_OUT/cells/.
set -u
. "$INTEROP_DIR/lib.sh"

MATRIX="$INTEROP_OUT/matrix.txt"
CELLS="$INTEROP_OUT/cells"
mkdir -p "$CELLS"
: >"$MATRIX"
T=${SOFTIB_INTEROP_CELL_TIMEOUT:-120}
ONLY=${SOFTIB_INTEROP_ONLY:-}
PORT=18515
RETRIES=${SOFTIB_INTEROP_RETRIES:-1}

guest_wait_ready 300 || { echo "guest never became ready"; exit 3; }
echo "guest ready"

# Everything on the tap, as the wire carries it (rxe's real IP headers included).
command -v tshark >/dev/null \
    || echo "tshark is missing (build-image.sh installs it): the wire and its ICRCs go unchecked"
# The size cap keeps a runaway cell from filling the disk; the whole matrix (76 cells with the
# drop-in's) writes about 500 MB, and a capture that hits the cap is reported below.
CAP_KB=2000000
tshark -q -i tap0 -w "$INTEROP_OUT/tap0.pcap" -F pcap -a filesize:$CAP_KB >/dev/null 2>&1 &
CAP=$!
sleep 2

n=0
# cell NAME SERVER(guest|host) GUEST_TOOL_AND_FLAGS -- HOST_TOOL_AND_FLAGS
cell() {
    local name=$1 server=$2; shift 2
    local gcmd="" hcmd=() seen=0 a
    for a in "$@"; do
        # The first -- ends the guest's command (a host command may hold its own: run --).
        if [ $seen = 0 ] && [ "$a" = "--" ]; then seen=1; continue; fi
        if [ $seen = 0 ]; then gcmd="$gcmd $a"; else hcmd+=("$a"); fi
    done
    if [ -n "$ONLY" ] && ! [[ "$name" =~ $ONLY ]]; then return; fi
    n=$((n + 1))
    local id base t0 hrc grc try=1
    base=$(printf '%02d-%s' "$n" "$name")
    t0=$(date +%s)
    # Under TCG on a loaded machine the guest can stall for longer than a tool's retry budget
    # (ibv_rc_pingpong gives up after ~0.5 s without an ACK): a failed cell runs once more,
    # and the line says so (try=2). Both attempts' outputs are kept.
    while :; do
        id=$base
        [ $try -gt 1 ] && id=$base.try$try
        echo "== $id"
        if [ "$server" = guest ]; then
            guest "$id" "timeout $T$gcmd"
            if [[ " $gcmd " == *" -R "* ]] || [[ "$name" == rdma_cm.* ]]; then
                # An rdma_cm server listens on no TCP port: the kernel lists its listening id.
                guest_run "$id-listen" 60 "bash -c \"until rdma resource show cm_id | grep -q 'LISTEN.*:$PORT'; do sleep 0.1; done\""
            else
                guest_run "$id-listen" 60 "bash -c \"until ss -Hltn 'sport = :$PORT' | grep -q .; do sleep 0.1; done\""
            fi
            timeout "$T" "$SOFTIB" "${hcmd[@]}" "$GUEST_IP" >"$CELLS/$id.host.txt" 2>&1
            hrc=$?
            guest_wait "$id" $((T + 10)); grc=$?
        else
            timeout "$T" "$SOFTIB" "${hcmd[@]}" >"$CELLS/$id.host.txt" 2>&1 &
            local hp=$!
            if [[ " ${hcmd[*]} " == *" -R "* ]] || [[ "$name" == rdma_cm.* ]]; then
                # softib's rdma_cm listen is not visible from outside: a head start instead
                # (the guest's client gives up at once on a REJ).
                sleep 3
            else
                host_listening $PORT 30
            fi
            guest "$id" "timeout $T$gcmd $HOST_IP"
            guest_wait "$id" $((T + 10)); grc=$?
            wait "$hp"; hrc=$?
        fi
        cp "$CMD_DIR/$id.out" "$CELLS/$id.guest.txt" 2>/dev/null
        # rxe's counters after the cell (it drops a bad ICRC silently: rcvd_pkts tells).
        guest_run "$id-stat" 20 "rdma statistic show link rxe0/1" && cp "$CMD_DIR/$id-stat.out" "$CELLS/$id.rxe-stat.txt"
        # Let both sides close port 18515 before the next run.
        sleep 1
        if [ "$hrc" = 0 ] && [ "$grc" = 0 ] || [ $try -gt "$RETRIES" ]; then
            break
        fi
        try=$((try + 1))
    done
    local verdict=PASS
    [ "$hrc" = 0 ] && [ "$grc" = 0 ] || verdict=FAIL
    printf '%-34s %-4s %4ss  softib_rc=%s rxe_rc=%s%s\n' "$base" "$verdict" $(( $(date +%s) - t0 )) \
        "$hrc" "$grc" "$([ $try -gt 1 ] && echo " try=$try")" | tee -a "$MATRIX"
}

G="-d rxe0 -g 1"
H="-d softib0 -g 1"
for t in rc uc ud; do
    extra="-n 100"
    [ $t = ud ] && extra="-n 100 -s 512"
    cell "ibv_${t}_pingpong.rxe-server" guest ibv_${t}_pingpong $G $extra -- ibv_${t}_pingpong $H $extra
    cell "ibv_${t}_pingpong.softib-server" host ibv_${t}_pingpong $G $extra -- ibv_${t}_pingpong $H $extra
done

PG="-d rxe0 -x 1 -F"
PH="-d softib0 -x 1 -F"
for tool in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw "ib_send_bw -c UD" \
    ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat; do
    iters="-n 200"
    name=${tool// -c /.}
    cell "$name.rxe-server" guest $tool $PG $iters -- $tool $PH $iters
    cell "$name.softib-server" host $tool $PG $iters -- $tool $PH $iters
done

# A few variants that exercise what the defaults do not: small messages (the sender walks its
# remote address through the peer's cycle buffer), a size sweep, both directions at once.
for tool in "ib_write_bw -s 64" "ib_read_bw -s 64" "ib_send_bw -c UD -a" "ib_write_bw -b" "ib_send_bw -b" \
    "ib_atomic_bw -A CMP_AND_SWAP" "ib_atomic_lat -A CMP_AND_SWAP" "ib_send_bw -c UC" "ib_write_bw -c UC" \
    "ib_write_bw -q 2"; do
    iters="-n 200"
    name=$(echo "$tool" | sed 's/ -c / /; s/ -/./g; s/ /./g')
    cell "$name.rxe-server" guest $tool $PG $iters -- $tool $PH $iters
    cell "$name.softib-server" host $tool $PG $iters -- $tool $PH $iters
done

# The drop-in libibverbs.so.1: Debian's own perftest and pingpongs on the host, unmodified,
# run on softib (`softib run`: softib's library first on their library path) against rxe.
G="-d rxe0 -g 1"
H="-d softib0 -g 1"
for t in rc ud; do
    extra="-n 100"
    [ $t = ud ] && extra="-n 100 -s 512"
    cell "dropin.ibv_${t}_pingpong.rxe-server" guest ibv_${t}_pingpong $G $extra -- run -- ibv_${t}_pingpong $H $extra
    cell "dropin.ibv_${t}_pingpong.softib-server" host ibv_${t}_pingpong $G $extra -- run -- ibv_${t}_pingpong $H $extra
done
for tool in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw "ib_send_bw -c UD" \
    ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat; do
    iters="-n 200"
    name=dropin.${tool// -c /.}
    cell "$name.rxe-server" guest $tool $PG $iters -- run -- $tool $PH $iters
    cell "$name.softib-server" host $tool $PG $iters -- run -- $tool $PH $iters
done

# RDMA-CM on the wire: the kernel's IB CM (rdma_cm on rxe) against softib's, both roles —
# softib's own perftest with -R and Debian's perftest -R on the drop-in librdmacm.so.1.
for tool in ib_send_bw ib_write_lat ib_read_bw; do
    name=rdma_cm.$tool
    cell "$name.rxe-server" guest $tool -R $PG -n 200 -- $tool -R $PH -n 200
    cell "$name.softib-server" host $tool -R $PG -n 200 -- $tool -R $PH -n 200
    cell "rdma_cm.dropin.$tool.rxe-server" guest $tool -R $PG -n 200 -- run -- $tool -R $PH -n 200
    cell "rdma_cm.dropin.$tool.softib-server" host $tool -R $PG -n 200 -- run -- $tool -R $PH -n 200
done

# rping (rdmacm-utils) with data checks, the host's on the drop-in librdmacm.so.1.
cell "rdma_cm.dropin.rping.rxe-server" guest rping -s -v -C 100 -p $PORT -a $GUEST_IP \
    -- run -- rping -c -v -C 100 -p $PORT -a
cell "rdma_cm.dropin.rping.softib-server" host rping -c -v -C 100 -p $PORT -a \
    -- run -- rping -s -v -C 100 -p $PORT -a $HOST_IP

# RoCEv2 over IPv6: no IP Identification, so softib checks rxe's ICRCs at full strength.
# A second softib device on the same tap with an IPv6 address; the guest's rxe0 gets a GID
# for the guest's IPv6 address (its index is looked up). The TCP exchange stays on IPv4.
HOST_IP6=fd00:211::1
GUEST_IP6=fd00:211::2
if [ -z "$ONLY" ] || [[ "ipv6" =~ $ONLY ]]; then
    ip -6 addr add "$HOST_IP6/64" dev tap0 nodad
    "$SOFTIB" link add softib6 type rxe netdev tap0 --addr "$HOST_IP6" >"$CELLS/ipv6-link-add.txt" 2>&1
    guest_run ipv6-setup 30 "ip -6 addr add $GUEST_IP6/64 dev eth0 nodad && sleep 1 && grep -l '^fd00:0211:' /sys/class/infiniband/rxe0/ports/1/gids/* | head -1 | xargs basename"
    GX6=$(tr -d '[:space:]' <"$CMD_DIR/ipv6-setup.out")
    HX6=1
    echo "IPv6 GID index: rxe0 $GX6, softib6 $HX6"
    if [ -n "$GX6" ]; then
        G="-d rxe0 -g $GX6"
        H="-d softib6 -g $HX6"
        for t in rc ud; do
            extra="-n 100"
            [ $t = ud ] && extra="-n 100 -s 512"
            cell "ipv6.ibv_${t}_pingpong.rxe-server" guest ibv_${t}_pingpong $G $extra -- ibv_${t}_pingpong $H $extra
            cell "ipv6.ibv_${t}_pingpong.softib-server" host ibv_${t}_pingpong $G $extra -- ibv_${t}_pingpong $H $extra
        done
        for tool in ib_write_bw ib_read_bw "ib_send_bw -c UD"; do
            name=ipv6.$(echo "$tool" | sed 's/ -c / /; s/ -/./g; s/ /./g')
            cell "$name.rxe-server" guest $tool -d rxe0 -x "$GX6" -F -n 200 -- $tool -d softib6 -x $HX6 -F -n 200
            cell "$name.softib-server" host $tool -d rxe0 -x "$GX6" -F -n 200 -- $tool -d softib6 -x $HX6 -F -n 200
        done
    else
        echo "ipv6: rxe0 has no GID for $GUEST_IP6" | tee -a "$MATRIX"
    fi
fi

kill -INT "$CAP" 2>/dev/null; wait "$CAP" 2>/dev/null
if [ "$(( $(stat -c %s "$INTEROP_OUT/tap0.pcap" 2>/dev/null || echo 0) / 1000 ))" -ge "$CAP_KB" ]; then
    echo "the capture stopped at its size cap ($CAP_KB kB): the last cells' packets went unchecked" \
        | tee -a "$MATRIX"
fi
# Every RoCEv2 packet on the tap, both directions, with the ICRC recomputed over the real IP
# headers (rxe's nonzero IP Identification included): rxe drops a bad ICRC silently, so this
# is the proof that softib's are right, and that rxe's are what softib accepted.
"$SOFTIB" pcap decode "$INTEROP_OUT/tap0.pcap" >"$INTEROP_OUT/tap0.decode.txt" 2>&1
decode_rc=$?
{
    printf 'wire: %s RoCEv2 packets softib->rxe, %s rxe->softib; ICRC ok %s, bad %s (pcap decode rc=%s)\n' \
        "$(grep -c "^ *[0-9]* *[0-9.]* $HOST_IP\.[0-9]* > $GUEST_IP\.4791: " "$INTEROP_OUT/tap0.decode.txt")" \
        "$(grep -c "^ *[0-9]* *[0-9.]* $GUEST_IP\.[0-9]* > $HOST_IP\.4791: " "$INTEROP_OUT/tap0.decode.txt")" \
        "$(grep -c 'icrc=ok' "$INTEROP_OUT/tap0.decode.txt")" \
        "$(grep -c 'icrc=BAD' "$INTEROP_OUT/tap0.decode.txt")" "$decode_rc"
    printf 'wire (IPv6): %s RoCEv2 packets softib->rxe, %s rxe->softib\n' \
        "$(grep -c " $HOST_IP6\.[0-9]* > $GUEST_IP6\.4791: " "$INTEROP_OUT/tap0.decode.txt")" \
        "$(grep -c " $GUEST_IP6\.[0-9]* > $HOST_IP6\.4791: " "$INTEROP_OUT/tap0.decode.txt")"
} | tee -a "$MATRIX"
guest_stop
echo "matrix done: $(grep -c PASS "$MATRIX") passed, $(grep -c FAIL "$MATRIX") failed"
grep -q FAIL "$MATRIX" && exit 1
exit 0
