#!/usr/bin/env bash
# The interop matrix in one command: builds (or reuses) the guest image and softib, boots the
# guest with rxe, and runs every cell of interop/jobs/matrix-host.sh against it.
#
#   interop/matrix.sh [-o OUTDIR]
#
# Environment: SOFTIB_INTEROP_ONLY=REGEX runs only the cells whose names match;
# SOFTIB_INTEROP_CELL_TIMEOUT (default 120 s) bounds each cell; SOFTIB_INTEROP_RETRIES (default 1)
# reruns a failed cell that many times (the guest under TCG can stall); see run-job.sh.
# Needs root. Results: OUTDIR/matrix.txt (default target/interop/matrix-<time>).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
OUT=$REPO/target/interop/matrix-$(date -u +%Y%m%dT%H%M%SZ)
[ "${1:-}" = "-o" ] && OUT=$2

# The matrix captures the tap with tshark: the proof that every ICRC on the wire is right.
if ! command -v tshark >/dev/null; then
    echo "installing tshark" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tshark >/dev/null
fi
t=$(date +%s)
"$HERE/build-image.sh"
echo "image: $(( $(date +%s) - t ))s" >&2
if [ -z "${SOFTIB:-}" ]; then
    t=$(date +%s)
    (cd "$REPO" && nice -n 10 cargo build --release -q -p softib-cli)
    echo "softib build: $(( $(date +%s) - t ))s" >&2
fi
rc=0
"$HERE/run-job.sh" -o "$OUT" --host "$HERE/jobs/matrix-host.sh" "$HERE/jobs/guest-agent.sh" || rc=$?
echo
cat "$OUT/matrix.txt" 2>/dev/null || true
cat "$OUT/host.out" | tail -1
echo "output: $OUT"
exit "$rc"
