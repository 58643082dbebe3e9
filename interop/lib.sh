# shellcheck shell=bash
# Helpers for host-side interop scripts (sourced; run inside the namespace by run-job.sh).
# The guest side runs interop/jobs/guest-agent.sh, which executes the commands posted here
# through the 9p share: INTEROP_SHARE/cmd/NAME.sh → NAME.out, NAME.rc.

CMD_DIR="$INTEROP_SHARE/cmd"

# guest NAME COMMAND... — start COMMAND in the guest (in the background there).
guest() {
    local name=$1; shift
    mkdir -p "$CMD_DIR"
    printf '%s\n' "$*" >"$CMD_DIR/$name.tmp"
    mv "$CMD_DIR/$name.tmp" "$CMD_DIR/$name.sh"
}

# guest_wait NAME SECONDS — wait for the guest command NAME; prints nothing, returns its status
# (124 if it did not finish in time).
guest_wait() {
    local name=$1 limit=$2 i
    for ((i = 0; i < limit * 5; i++)); do
        if [ -f "$CMD_DIR/$name.rc" ]; then
            return "$(cat "$CMD_DIR/$name.rc")"
        fi
        sleep 0.2
    done
    return 124
}

# guest_run NAME SECONDS COMMAND... — run COMMAND in the guest and wait for it.
guest_run() {
    local name=$1 limit=$2; shift 2
    guest "$name" "timeout $limit $*"
    guest_wait "$name" $((limit + 5))
}

# guest_wait_ready SECONDS — wait until the agent has set up rxe0 and polls for commands.
guest_wait_ready() {
    local i
    for ((i = 0; i < $1; i++)); do
        [ -f "$INTEROP_SHARE/guest-ready" ] && return 0
        sleep 1
    done
    return 1
}

# guest_stop — let the agent finish (it then powers the guest off).
guest_stop() { : >"$CMD_DIR/stop"; }

# host_listening PORT SECONDS — wait until something in this namespace listens on TCP PORT.
host_listening() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        [ -n "$(ss -Hltn "sport = :$1")" ] && return 0
        sleep 0.1
    done
    return 1
}
