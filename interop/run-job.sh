#!/usr/bin/env bash
# Boot the cached Debian 12 guest (interop/build-image.sh) under qemu inside a network namespace
# of our own, run a job in it, collect the output, and tear everything down.
#
#   interop/run-job.sh [-o OUTDIR] [--host HOST.sh] [--no-softib] JOB.sh
#
# Network: namespace $SOFTIB_INTEROP_NETNS (default softib-interop) holds lo and a tap device
# (tap0, $HOST_IP/24) whose other end is the guest's eth0 ($GUEST_IP/24). qemu, the softib
# daemon and HOST.sh all run inside that namespace; it has no other interface, so no packet of
# a job can leave it. The namespace is created here and deleted at the end, whatever happens.
#
# The guest runs JOB.sh from a 9p share (OUTDIR/share, /share in the guest) as root at boot,
# writes its output to /share/job.out and its exit status to /share/job.rc, and powers off.
# Unless --no-softib, a softib daemon runs in the namespace (runtime dir OUTDIR/softib) with
# `softib link add softib0 type rxe netdev tap0`. HOST.sh, if given, runs in the namespace once
# qemu has started, with HOST_IP, GUEST_IP, SOFTIB, SOFTIB_RUNTIME_DIR, INTEROP_SHARE,
# INTEROP_OUT and INTEROP_DIR in its environment (interop/lib.sh has helpers for it).
#
# Timeouts: the whole guest run $SOFTIB_INTEROP_TIMEOUT seconds (default 1200), HOST.sh the same.
# Exit status: the guest job's status if it ran, 3 if the guest never reported one, and the
# host script's status if that failed.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CACHE=${SOFTIB_INTEROP_CACHE:-/var/cache/softib-interop}
NS=${SOFTIB_INTEROP_NETNS:-softib-interop}
TIMEOUT=${SOFTIB_INTEROP_TIMEOUT:-1200}
HOST_IP=${SOFTIB_INTEROP_HOST_IP:-10.211.0.1}
GUEST_IP=${SOFTIB_INTEROP_GUEST_IP:-10.211.0.2}
SOFTIB=${SOFTIB:-$REPO/target/release/softib}

OUT=""
HOST_SCRIPT=""
WITH_SOFTIB=1
while [ $# -gt 0 ]; do
    case "$1" in
        -o) OUT=$2; shift 2 ;;
        --host) HOST_SCRIPT=$(realpath "$2"); shift 2 ;;
        --no-softib) WITH_SOFTIB=0; shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        -*) echo "run-job.sh: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ $# -eq 1 ] || { echo "usage: run-job.sh [-o OUTDIR] [--host HOST.sh] [--no-softib] JOB.sh" >&2; exit 2; }
JOB=$(realpath "$1")
[ -f "$JOB" ] || { echo "run-job.sh: no job $JOB" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run-job.sh: needs root (network namespace, tap device)" >&2; exit 2; }
for f in rootfs.ext4 vmlinuz initrd.img; do
    [ -f "$CACHE/$f" ] || { echo "run-job.sh: no $CACHE/$f: run interop/build-image.sh first" >&2; exit 2; }
done
if [ "$WITH_SOFTIB" = 1 ] && [ ! -x "$SOFTIB" ]; then
    echo "run-job.sh: no softib binary at $SOFTIB (cargo build --release -p softib-cli, or set SOFTIB)" >&2
    exit 2
fi

OUT=${OUT:-$REPO/target/interop/$(basename "$JOB" .sh)-$(date -u +%Y%m%dT%H%M%SZ)}
rm -rf "$OUT"
mkdir -p "$OUT/share" "$OUT/softib"
OUT=$(realpath "$OUT")
cp "$JOB" "$OUT/share/job.sh"
printf 'HOST_IP=%s\nGUEST_IP=%s\n' "$HOST_IP" "$GUEST_IP" >"$OUT/share/env.sh"
TIMES="$OUT/times.txt"
: >"$TIMES"

log() { printf '[run-job %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
nsx() { ip netns exec "$NS" "$@"; }

QEMU_PID=""
DAEMON_PID=""
HOST_PID=""
cleanup() {
    set +e
    for pid in $HOST_PID $QEMU_PID $DAEMON_PID; do
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    done
    sleep 1
    for pid in $HOST_PID $QEMU_PID $DAEMON_PID; do
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    done
    ip netns del "$NS" 2>/dev/null
    log "torn down (namespace $NS deleted)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- namespace and tap ----------------------------------------------------------------------
t0=$(date +%s)
ip netns del "$NS" 2>/dev/null || true
ip netns add "$NS"
nsx ip link set lo up
nsx ip tuntap add dev tap0 mode tap
nsx ip addr add "$HOST_IP/24" dev tap0
# A deep queue towards the guest: under TCG it drains slowly, and UC (no retransmission)
# loses whatever the tap drops.
nsx ip link set tap0 mtu 1500 txqueuelen 20000 up
log "namespace $NS: tap0 $HOST_IP/24, guest $GUEST_IP"

# --- softib on the host side ------------------------------------------------------------------
if [ "$WITH_SOFTIB" = 1 ]; then
    export SOFTIB_RUNTIME_DIR="$OUT/softib"
    setsid ip netns exec "$NS" "$SOFTIB" daemon >"$OUT/softibd.log" 2>&1 &
    DAEMON_PID=$!
    for _ in $(seq 100); do
        nsx "$SOFTIB" ibv_devices >/dev/null 2>&1 && break
        sleep 0.1
    done
    nsx "$SOFTIB" link add softib0 type rxe netdev tap0 --addr "$HOST_IP" >"$OUT/link-add.txt" 2>&1 \
        || { cat "$OUT/link-add.txt" >&2; exit 2; }
    log "softib daemon up, softib0 on tap0"
fi
printf 'host-setup %ss\n' $(( $(date +%s) - t0 )) >>"$TIMES"

# --- the guest --------------------------------------------------------------------------------
t_boot=$(date +%s)
setsid ip netns exec "$NS" timeout -k 10 "$TIMEOUT" nice -n 10 qemu-system-x86_64 \
    -accel tcg,thread=multi,tb-size=512 -cpu max -smp 2 -m 4G \
    -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0,115200 panic=-1 net.ifnames=0 quiet" \
    -drive "file=$CACHE/rootfs.ext4,format=raw,if=virtio,snapshot=on" \
    -virtfs "local,path=$OUT/share,mount_tag=share,security_model=none,id=share" \
    -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:00:99:02 \
    -display none -monitor none -serial "file:$OUT/console.log" -no-reboot \
    >"$OUT/qemu.log" 2>&1 &
QEMU_PID=$!
log "qemu started (pid $QEMU_PID), console: $OUT/console.log"

HOST_RC=0
if [ -n "$HOST_SCRIPT" ]; then
    (
        export HOST_IP GUEST_IP SOFTIB INTEROP_SHARE="$OUT/share" INTEROP_OUT="$OUT" \
            INTEROP_DIR="$HERE" INTEROP_NETNS="$NS"
        exec setsid ip netns exec "$NS" timeout -k 10 "$TIMEOUT" bash "$HOST_SCRIPT"
    ) >"$OUT/host.out" 2>&1 &
    HOST_PID=$!
fi

# Boot time: until the job runner says it started.
while kill -0 "$QEMU_PID" 2>/dev/null; do
    if grep -q 'softib-job: start' "$OUT/console.log" 2>/dev/null; then
        printf 'boot-to-job %ss\n' $(( $(date +%s) - t_boot )) >>"$TIMES"
        log "guest booted, job running ($(( $(date +%s) - t_boot ))s)"
        break
    fi
    sleep 1
done
t_job=$(date +%s)
wait "$QEMU_PID" || true
QEMU_PID=""
printf 'job-and-poweroff %ss\n' $(( $(date +%s) - t_job )) >>"$TIMES"
log "guest stopped"
if [ -n "$HOST_PID" ]; then
    # The host script has a little while to notice the guest is gone.
    for _ in $(seq 30); do kill -0 "$HOST_PID" 2>/dev/null || break; sleep 1; done
    if kill -0 "$HOST_PID" 2>/dev/null; then
        log "host script still running after the guest stopped: killing it"
        kill -TERM -- "-$HOST_PID" 2>/dev/null || true
    fi
    wait "$HOST_PID" || HOST_RC=$?
    HOST_PID=""
fi
printf 'total %ss\n' $(( $(date +%s) - t0 )) >>"$TIMES"

RC=3
[ -f "$OUT/share/job.rc" ] && RC=$(cat "$OUT/share/job.rc")
log "guest job rc=$RC, host script rc=$HOST_RC; output in $OUT"
cat "$TIMES" >&2
[ "$RC" = 0 ] && [ "$HOST_RC" != 0 ] && RC=$HOST_RC
exit "$RC"
