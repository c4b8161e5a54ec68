#!/usr/bin/env bash
# A Ticketing cluster on loopback, for development and demos.
#
#   scripts/cluster-local.sh start [3|5] [--durable]   start N nodes (default 3), wait for a leader
#   scripts/cluster-local.sh stop                      stop them (SIGTERM, SIGKILL after 15 s)
#   scripts/cluster-local.sh status                    the processes, then `ticketing node list`
#   scripts/cluster-local.sh env                       print the export line for TICKETING_ADDR
#   scripts/cluster-local.sh clean                     stop, then delete the state directory
#
# Every command is idempotent: start on a running cluster of the same size
# prints it again; stop on a stopped cluster does nothing. start on a
# cluster one of whose nodes died restarts that node when the cluster is
# --durable (from its data directory; its log is appended to), and refuses
# (exit 1, saying why) when it keeps its state in memory: a node that lost
# its state must not rejoin under its id (stop, then start, for a fresh one).
#
# Ports (fixed, so TICKETING_ADDR stays the same between runs): node i
# (n1..n5) listens for clients on BASE+2(i-1) and for peers on BASE+2(i-1)+1,
# BASE = $TICKETING_CLUSTER_PORT (default 7470): n1 7470/7471, n2 7472/7473,
# n3 7474/7475, n4 7476/7477, n5 7478/7479. start refuses ports in use.
#
# State: $TICKETING_CLUSTER_DIR (default ${XDG_RUNTIME_DIR:-/tmp}/ticketing-cluster-$UID)
# holds nN.pid, nN.log (rewritten by every start), the node count, and with --durable nN/ (each node's
# --data-dir: a stopped durable cluster starts again with its locks and
# tokens; without it every start is a fresh cluster, state in memory). To
# start over with another node count after --durable, run clean first.
# status exits 3 when the cluster is not running (as systemctl does).
#
# The binary: $TICKETING_BIN, else built from this checkout into the state
# directory, else `ticketing` on PATH. The nodes run without tokens (loopback
# only) unless TICKETING_TOKEN / TICKETING_TOKEN_FILE are set, which both the
# nodes and the ticketing commands then read.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$script_dir/.." && pwd)
state=${TICKETING_CLUSTER_DIR:-${XDG_RUNTIME_DIR:-/tmp}/ticketing-cluster-$(id -u)}
base=${TICKETING_CLUSTER_PORT:-7470}
host=127.0.0.1

die() { echo "cluster-local: $*" >&2; exit 1; }
usage() { sed -n '4,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[[ $base =~ ^[0-9]+$ ]] && ((base >= 1024 && base <= 65525)) || die "TICKETING_CLUSTER_PORT=$base: want a port 1024..65525"

client_port() { echo $((base + 2 * ($1 - 1))); }
peer_port() { echo $((base + 2 * ($1 - 1) + 1)); }

# The serve settings a user's shell may carry that must not reach the nodes
# (each node gets its own on the command line).
node_env_unset=(-u TICKETING_CONFIG -u TICKETING_NODE_ID -u TICKETING_LISTEN -u TICKETING_PEERS
  -u TICKETING_BOOTSTRAP -u TICKETING_JOIN -u TICKETING_PEER_LISTEN -u TICKETING_PEER_ADVERTISE
  -u TICKETING_ADVERTISE -u TICKETING_DATA_DIR -u TICKETING_METRICS_LISTEN -u TICKETING_INSECURE
  -u TICKETING_TLS_CERT -u TICKETING_TLS_KEY -u TICKETING_TLS_CLIENT_CA)
# ...and the client settings that must not redirect our own commands.
cli_env_unset=(-u TICKETING_ADDR -u TICKETING_OUTPUT -u TICKETING_TIMEOUT -u TICKETING_TLS_CA
  -u TICKETING_TLS_CERT -u TICKETING_TLS_KEY -u TICKETING_TLS_SERVER_NAME)

nodes_file="$state/nodes"
durable_file="$state/durable" # the running cluster was started with --durable
bin="" peers=""
count() { [[ -f $nodes_file ]] && cat "$nodes_file" || echo 0; }

addrs() {
  local n=$1 i out=""
  for ((i = 1; i <= n; i++)); do out+="${out:+,}$host:$(client_port "$i")"; done
  echo "$out"
}

# running PID: the process exists and is not a zombie.
running() {
  kill -0 "$1" 2>/dev/null || return 1
  if [[ -r /proc/$1/stat ]]; then
    local _pid _comm st
    read -r _pid _comm st _ <"/proc/$1/stat" 2>/dev/null || return 1
    [[ $st != Z ]] || return 1
  fi
}

# alive PIDFILE: the pid in it is a running ticketing process.
alive() {
  local pid
  [[ -f $1 ]] || return 1
  pid=$(cat "$1")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  running "$pid" || return 1
  if [[ -r /proc/$pid/cmdline ]]; then
    # Not a recycled pid: the process must be a ticketing serve.
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- 'serve --node-id' || return 1
  fi
}

any_alive() {
  local f
  for f in "$state"/n*.pid; do
    [[ -e $f ]] || continue
    alive "$f" && return 0
  done
  return 1
}

# port_busy PORT: something accepts connections on it.
port_busy() { (exec 3<>"/dev/tcp/$host/$1") 2>/dev/null; }

find_bin() {
  if [[ -n ${TICKETING_BIN:-} ]]; then
    [[ -x $TICKETING_BIN ]] || die "TICKETING_BIN=$TICKETING_BIN is not executable"
    echo "$TICKETING_BIN"
  elif [[ -f $repo/go.mod ]] && command -v go >/dev/null; then
    (cd "$repo" && CGO_ENABLED=0 go build -o "$state/ticketing" ./cmd/ticketing) >&2 || die "go build failed"
    echo "$state/ticketing"
  elif command -v ticketing >/dev/null; then
    command -v ticketing
  else
    die "no ticketing binary: set TICKETING_BIN, or run from a checkout with go installed"
  fi
}

bin_for_cli() {
  if [[ -n ${TICKETING_BIN:-} ]]; then echo "$TICKETING_BIN"
  elif [[ -x $state/ticketing ]]; then echo "$state/ticketing"
  else command -v ticketing || true
  fi
}

print_cluster() {
  local n=$1 i
  echo "Ticketing cluster of $n nodes on $host (state in $state):"
  for ((i = 1; i <= n; i++)); do
    printf '  n%d  client %s:%d  peer %s:%d  pid %s  log %s\n' "$i" "$host" "$(client_port "$i")" \
      "$host" "$(peer_port "$i")" "$(cat "$state/n$i.pid" 2>/dev/null || echo -)" "$state/n$i.log"
  done
  echo "export TICKETING_ADDR=$(addrs "$n")"
}

# stop_nodes: SIGTERM every live node, wait up to 15 s, then SIGKILL.
stop_nodes() {
  local f pid pids=() i
  for f in "$state"/n*.pid; do
    [[ -e $f ]] || continue
    if alive "$f"; then
      pid=$(cat "$f")
      pids+=("$pid")
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  for ((i = 0; i < 150; i++)); do
    local left=()
    for pid in ${pids[@]+"${pids[@]}"}; do
      running "$pid" && left+=("$pid")
    done
    pids=(${left[@]+"${left[@]}"})
    ((${#pids[@]} == 0)) && break
    sleep 0.1
  done
  for pid in ${pids[@]+"${pids[@]}"}; do
    echo "cluster-local: pid $pid did not stop within 15 s: SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  done
  # Reap: our own children (a start in this shell) are waited for; others
  # are reaped by init once dead. Wait until they are gone.
  wait 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    local any=0
    for pid in ${pids[@]+"${pids[@]}"}; do running "$pid" && any=1; done
    ((any == 0)) && break
    sleep 0.1
  done
  rm -f "$state"/n*.pid "$nodes_file" "$durable_file"
}

# start_node I: start node nI in the background (its log: nI.log, appended
# to with append=1), detached when setsid exists, and record its pid.
start_node() {
  local i=$1 append=${2:-0} extra=() detach=()
  command -v setsid >/dev/null && detach=(setsid)
  [[ -f $durable_file ]] && extra=(--data-dir "$state/n$i")
  if ((append)); then exec 3>>"$state/n$i.log"; else exec 3>"$state/n$i.log"; fi
  env "${node_env_unset[@]}" ${detach[@]+"${detach[@]}"} "$bin" serve --node-id "n$i" \
    --listen "$host:$(client_port "$i")" --peer-listen "$host:$(peer_port "$i")" \
    --peers "$peers" --bootstrap ${extra[@]+"${extra[@]}"} \
    </dev/null >&3 2>&1 3>&- &
  exec 3>&-
  echo $! >"$state/n$i.pid"
}

# wait_healthy N ON_FAIL: wait (up to 30 s) until the cluster of N nodes is
# healthy (a leader that can grant, every voter healthy); else run ON_FAIL
# (stop_nodes, or true) and exit 1.
wait_healthy() {
  local n=$1 on_fail=$2 i addr_list deadline=$((SECONDS + 30))
  addr_list=$(addrs "$n")
  until env "${cli_env_unset[@]}" "$bin" health --addr "$addr_list" --timeout 1s >/dev/null 2>&1; do
    for ((i = 1; i <= n; i++)); do
      if ! alive "$state/n$i.pid"; then
        echo "cluster-local: n$i exited; last lines of $state/n$i.log:" >&2
        tail -n 20 "$state/n$i.log" >&2 || true
        $on_fail
        exit 1
      fi
    done
    if ((SECONDS >= deadline)); then
      echo "cluster-local: no healthy cluster within 30 s:" >&2
      env "${cli_env_unset[@]}" "$bin" health --addr "$addr_list" --timeout 1s >&2 || true
      $on_fail
      exit 1
    fi
    sleep 0.2
  done
}

# restart_dead N: restart the nodes of a running cluster of N whose process
# is gone, or refuse (exit 1) saying why.
restart_dead() {
  local n=$1 i dead=()
  for ((i = 1; i <= n; i++)); do
    alive "$state/n$i.pid" || dead+=("n$i")
  done
  ((${#dead[@]} == 0)) && return 0
  if [[ ! -f $durable_file ]]; then
    die "${dead[*]} not running (see $state/${dead[0]}.log), and this cluster keeps its state in memory: a node that lost its state cannot rejoin under its id (the leader would remove it). Run '$0 stop' then '$0 start' for a fresh cluster, or start it with --durable to have dead nodes restarted"
  fi
  local id
  for id in "${dead[@]}"; do
    i=${id#n}
    for p in $(client_port "$i") $(peer_port "$i"); do
      port_busy "$p" && die "$id is not running but port $p on $host is in use by another process"
    done
  done
  bin=$(find_bin)
  peers=$(peer_list "$n")
  for id in "${dead[@]}"; do
    i=${id#n}
    echo "cluster-local: $id was not running: restarting it from $state/$id" >&2
    echo "--- restarted by cluster-local.sh start at $(date -u +%FT%TZ)" >>"$state/$id.log"
    start_node "$i" 1
  done
  wait_healthy "$n" true
}

peer_list() {
  local n=$1 i out=""
  for ((i = 1; i <= n; i++)); do out+="${out:+,}n$i=$host:$(peer_port "$i")"; done
  echo "$out"
}

cmd_start() {
  local n=3 durable=0 arg
  for arg in "$@"; do
    case $arg in
      3 | 5) n=$arg ;;
      --durable) durable=1 ;;
      *) die "start: $arg: want 3 or 5 nodes (and optionally --durable)" ;;
    esac
  done
  mkdir -p "$state"
  chmod 700 "$state"
  if any_alive; then
    local have
    have=$(count)
    [[ $have == "$n" ]] || die "a cluster of $have nodes is running; stop it first ($0 stop)"
    restart_dead "$n"
    print_cluster "$n"
    return 0
  fi
  rm -f "$state"/n*.pid "$nodes_file" "$durable_file" # stale
  local i
  for ((i = 1; i <= n; i++)); do
    for p in $(client_port "$i") $(peer_port "$i"); do
      port_busy "$p" && die "port $p on $host is in use (set TICKETING_CLUSTER_PORT to another base)"
    done
  done
  bin=$(find_bin)
  peers=$(peer_list "$n")
  echo "$n" >"$nodes_file"
  ((durable)) && touch "$durable_file"
  for ((i = 1; i <= n; i++)); do
    start_node "$i"
  done
  wait_healthy "$n" stop_nodes
  print_cluster "$n"
}

cmd_stop() {
  if ! any_alive; then
    rm -f "$state"/n*.pid "$nodes_file" "$durable_file"
    echo "cluster-local: not running"
    return 0
  fi
  stop_nodes
  echo "cluster-local: stopped"
}

cmd_status() {
  local n i running=0
  n=$(count)
  if ((n == 0)) || ! any_alive; then
    echo "cluster-local: not running"
    return 3
  fi
  for ((i = 1; i <= n; i++)); do
    local st=stopped
    if alive "$state/n$i.pid"; then st="running (pid $(cat "$state/n$i.pid"))"; running=$((running + 1)); fi
    printf '  n%d  client %s:%d  peer %s:%d  %s\n' "$i" "$host" "$(client_port "$i")" "$host" "$(peer_port "$i")" "$st"
  done
  echo "$running of $n nodes running"
  local bin
  bin=$(bin_for_cli)
  if [[ -n $bin ]]; then
    env "${cli_env_unset[@]}" "$bin" node list --addr "$(addrs "$n")" --timeout 2s || true
  fi
}

cmd_env() {
  local n
  n=$(count)
  ((n > 0)) && any_alive || die "not running"
  echo "export TICKETING_ADDR=$(addrs "$n")"
}

cmd_clean() {
  cmd_stop
  case $state in
    / | "$HOME" | "") die "refusing to delete $state" ;;
  esac
  rm -rf -- "$state"
  echo "cluster-local: removed $state"
}

case ${1:-} in
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  clean) cmd_clean ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *) usage ;;
esac
