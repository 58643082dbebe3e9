# shellcheck shell=bash
# Guest job for interop/matrix.sh: brings up rxe0 on eth0, then runs the commands the host side
# posts into /share/cmd (NAME.sh → NAME.out, NAME.rc) until /share/cmd/stop appears or an hour
# has passed. Runs as root in the guest (interop/run-job.sh).
. /share/env.sh
set -u
ip addr add "$GUEST_IP/24" dev eth0
ip link set eth0 mtu 1500 up
modprobe rdma_rxe
rdma link add rxe0 type rxe netdev eth0
sysctl -qw kernel.printk="4 4 1 7"
{
    uname -r
    dpkg-query -W -f='${Package} ${Version}\n' linux-image-amd64 rdma-core ibverbs-providers \
        ibverbs-utils perftest infiniband-diags
    echo "perftest internal version: $(ib_send_bw -V 2>&1 | tr -d '\n')"
    rdma link show
    ibv_devinfo -d rxe0 | grep -E 'active_mtu|state|link_layer'
    grep -H . /sys/class/infiniband/rxe0/ports/1/gids/[01] /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/[01] 2>/dev/null
} >/share/guest-info.txt 2>&1
rdma statistic show link rxe0/1 >/share/rdma-stat-before.txt 2>&1
mkdir -p /share/cmd
: >/share/guest-ready
echo "agent: ready $(date -u +%T)"
while [ ! -e /share/cmd/stop ] && [ "$SECONDS" -lt 3600 ]; do
    for f in /share/cmd/*.sh; do
        [ -e "$f" ] || continue
        n=${f%.sh}
        [ -e "$n.taken" ] && continue
        : >"$n.taken"
        echo "agent: $(date -u +%T) start $(basename "$n")"
        (bash "$f" >"$n.out" 2>&1; echo $? >"$n.rc.tmp"; mv "$n.rc.tmp" "$n.rc") &
    done
    sleep 0.2
done
echo "agent: stop $(date -u +%T)"
rdma statistic show link rxe0/1 >/share/rdma-stat-after.txt 2>&1
dmesg | grep -iE 'rxe|icrc' | tail -50 >/share/guest-dmesg.txt
exit 0
