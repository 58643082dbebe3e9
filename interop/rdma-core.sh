#!/usr/bin/env bash
# softib's tools on a real RDMA device: boots the guest (rxe0 on its eth0, rdma-core 44,
# perftest 4.5), copies the release softib binary in, and runs softib's ibv_devinfo, ibstat,
# pingpongs and perftest tools there with SOFTIB_BACKEND=rdma-core (libibverbs loaded at run
# time) against rdma-core's tools and perftest in the same guest. No softib daemon runs.
#
#   interop/rdma-core.sh [-o OUTDIR]
#
# SOFTIB=path/to/softib (default: target/release/softib, built if absent);
# SOFTIB_INTEROP_ONLY=REGEX, SOFTIB_INTEROP_CELL_TIMEOUT as for matrix.sh. Needs root.
# Results: OUTDIR/rdma-core.txt (default target/interop/rdma-core-<time>).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
OUT=$REPO/target/interop/rdma-core-$(date -u +%Y%m%dT%H%M%SZ)
[ "${1:-}" = "-o" ] && OUT=$2
"$HERE/build-image.sh"
if [ -z "${SOFTIB:-}" ]; then
    (cd "$REPO" && nice -n 10 cargo build --release -q -p softib-cli)
    export SOFTIB=${CARGO_TARGET_DIR:-$REPO/target}/release/softib
fi
rc=0
"$HERE/run-job.sh" --no-softib -o "$OUT" --host "$HERE/jobs/rdma-core-host.sh" "$HERE/jobs/guest-agent.sh" || rc=$?
echo
cat "$OUT/rdma-core.txt" 2>/dev/null || true
echo "output: $OUT"
exit "$rc"
