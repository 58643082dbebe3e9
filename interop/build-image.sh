#!/usr/bin/env bash
# Build (once) the Debian 12 guest that runs the Linux kernel's Soft-RoCE driver (rdma_rxe) as a
# RoCEv2 peer for softib's interop jobs. Debian packages only: debootstrap bookworm, then
# linux-image-amd64 and rdma-core's user space in a chroot, then an ext4 image (mkfs.ext4 -d).
#
#   interop/build-image.sh [--force]
#
# Output, in $SOFTIB_INTEROP_CACHE (default /var/cache/softib-interop):
#   rootfs.ext4  the guest's root filesystem (run-job.sh opens it with snapshot=on: never written)
#   vmlinuz, initrd.img  its kernel and initramfs (booted with -kernel/-initrd)
#   versions.txt  the package versions inside the guest
#   build-times.txt  how long each step took
# Idempotent: a step whose result exists is skipped; --force rebuilds everything.
# Needs root (debootstrap, chroot, apt-get on the host).
set -euo pipefail

CACHE=${SOFTIB_INTEROP_CACHE:-/var/cache/softib-interop}
MIRROR=${SOFTIB_INTEROP_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
IMAGE_SIZE=${SOFTIB_INTEROP_IMAGE_SIZE:-3G}
GUEST_PKGS="linux-image-amd64 rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest infiniband-diags iproute2 tcpdump kmod procps iputils-ping"
# Bumped whenever what goes into the image changes, so a cached image is rebuilt.
IMAGE_VERSION=4

log() { printf '[build-image %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 2; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, apt-get)"

if [ "${1:-}" = "--force" ]; then
    log "--force: removing $CACHE"
    rm -rf "$CACHE"
fi
mkdir -p "$CACHE"
ROOT="$CACHE/rootfs"
TIMES="$CACHE/build-times.txt"

step_time() { # NAME START
    local s=$(( $(date +%s) - $2 ))
    printf '%s %ss\n' "$1" "$s" >>"$TIMES"
    log "$1 took ${s}s"
}

if [ -f "$CACHE/rootfs.ext4" ] && [ -f "$CACHE/vmlinuz" ] && [ -f "$CACHE/initrd.img" ] \
    && [ "$(cat "$CACHE/image-version" 2>/dev/null)" = "$IMAGE_VERSION" ]; then
    log "cached image is current: $CACHE/rootfs.ext4 (use --force to rebuild)"
    exit 0
fi
: >"$TIMES"

# --- host packages ---------------------------------------------------------------------------
# qemu-system-x86 comes from bookworm-backports: the machine's qemu-utils may already be the
# backports one (10.x) and bookworm's own qemu-system-x86 (7.2) conflicts with it.
host_pkgs() {
    local missing=()
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
    command -v ip >/dev/null || missing+=(iproute2)
    command -v timeout >/dev/null || missing+=(coreutils)
    if [ ${#missing[@]} -gt 0 ]; then
        log "apt-get install ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    if ! command -v qemu-system-x86_64 >/dev/null; then
        if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
            log "adding bookworm-backports to apt sources"
            printf 'deb %s bookworm-backports main\n' "$MIRROR" \
                >/etc/apt/sources.list.d/softib-interop-backports.list
        fi
        apt-get update -qq
        log "apt-get install -t bookworm-backports qemu-system-x86"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -t bookworm-backports qemu-system-x86 qemu-utils >/dev/null
    fi
}
t=$(date +%s)
host_pkgs
step_time host-packages "$t"

# --- debootstrap -----------------------------------------------------------------------------
if [ ! -f "$ROOT/.softib-debootstrap-done" ]; then
    rm -rf "$ROOT"
    t=$(date +%s)
    log "debootstrap $SUITE into $ROOT"
    nice -n 10 debootstrap --variant=minbase --include=systemd,systemd-sysv,udev,ca-certificates \
        "$SUITE" "$ROOT" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
        || { tail -20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
    touch "$ROOT/.softib-debootstrap-done"
    step_time debootstrap "$t"
fi

# --- packages in the chroot ------------------------------------------------------------------
if [ "$(cat "$ROOT/.softib-packages-done" 2>/dev/null)" != "$GUEST_PKGS" ]; then
    t=$(date +%s)
    log "installing $GUEST_PKGS in the chroot"
    mount -t proc proc "$ROOT/proc"
    trap 'umount "$ROOT/proc" 2>/dev/null || true' EXIT
    printf 'deb %s %s main\n' "$MIRROR" "$SUITE" >"$ROOT/etc/apt/sources.list"
    # No initramfs hook trouble without /dev in the chroot: initramfs-tools only needs /proc.
    chroot "$ROOT" /usr/bin/env DEBIAN_FRONTEND=noninteractive \
        nice -n 10 apt-get update -qq >"$CACHE/chroot-apt.log" 2>&1
    chroot "$ROOT" /usr/bin/env DEBIAN_FRONTEND=noninteractive \
        nice -n 10 apt-get install -y --no-install-recommends $GUEST_PKGS >>"$CACHE/chroot-apt.log" 2>&1 \
        || { tail -20 "$CACHE/chroot-apt.log" >&2; die "apt-get in the chroot failed (log: $CACHE/chroot-apt.log)"; }
    chroot "$ROOT" apt-get clean
    umount "$ROOT/proc"
    trap - EXIT
    echo "$GUEST_PKGS" >"$ROOT/.softib-packages-done"
    step_time chroot-packages "$t"
fi

# --- guest configuration (cheap: redone on every build) -----------------------------------------
t=$(date +%s)
echo softib-guest >"$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 softib-guest\n' >"$ROOT/etc/hosts"
cat >"$ROOT/etc/fstab" <<'EOF'
/dev/vda / ext4 rw,errors=remount-ro 0 1
share /share 9p trans=virtio,version=9p2000.L,msize=262144,nofail 0 0
EOF
mkdir -p "$ROOT/share"
# Root without a password on the serial console only (the guest has no other way in).
chroot "$ROOT" passwd -d root >/dev/null
# Modules the jobs need, loaded early.
printf '9p\n9pnet_virtio\nrdma_rxe\n' >"$ROOT/etc/modules-load.d/softib.conf"
# The job runner: /share/job.sh at boot, its output to /share/job.out, then power off.
cat >"$ROOT/usr/local/sbin/softib-job" <<'EOF'
#!/bin/bash
# Runs /share/job.sh (the 9p share the host's run-job.sh passes) and powers the guest off.
mountpoint -q /share || mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /share
if [ -x /share/job.sh ] || [ -f /share/job.sh ]; then
    echo "softib-job: start $(date -u +%T)" >/dev/console
    cd /share
    bash /share/job.sh >/share/job.out 2>&1
    echo $? >/share/job.rc
    echo "softib-job: done rc=$(cat /share/job.rc) $(date -u +%T)" >/dev/console
else
    echo "softib-job: no /share/job.sh" >/dev/console
fi
sync
systemctl poweroff --no-block
EOF
chmod 755 "$ROOT/usr/local/sbin/softib-job"
cat >"$ROOT/etc/systemd/system/softib-job.service" <<'EOF'
[Unit]
Description=softib interop job from the 9p share
After=network.target systemd-modules-load.service
Wants=network.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/softib-job
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
EOF
ln -sf /etc/systemd/system/softib-job.service \
    "$ROOT/etc/systemd/system/multi-user.target.wants/softib-job.service"
# A faster boot: nothing waits for a network that the job configures itself.
for u in systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer \
    man-db.timer e2scrub_all.timer fstrim.timer; do
    ln -sf /dev/null "$ROOT/etc/systemd/system/$u"
done
chroot "$ROOT" dpkg-query -W -f='${Package} ${Version}\n' \
    linux-image-amd64 rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest \
    infiniband-diags iproute2 tcpdump systemd >"$CACHE/versions.txt"
ls "$ROOT/boot" >>"$CACHE/versions.txt"
cp -L "$ROOT"/boot/vmlinuz-* "$CACHE/vmlinuz"
cp -L "$ROOT"/boot/initrd.img-* "$CACHE/initrd.img"
step_time configure "$t"

# --- the ext4 image --------------------------------------------------------------------------
t=$(date +%s)
rm -f "$CACHE/rootfs.ext4.tmp"
nice -n 10 mkfs.ext4 -q -F -L softib-root -d "$ROOT" "$CACHE/rootfs.ext4.tmp" "$IMAGE_SIZE"
mv "$CACHE/rootfs.ext4.tmp" "$CACHE/rootfs.ext4"
echo "$IMAGE_VERSION" >"$CACHE/image-version"
step_time mkfs "$t"
log "image ready: $CACHE/rootfs.ext4"
cat "$CACHE/versions.txt" >&2
