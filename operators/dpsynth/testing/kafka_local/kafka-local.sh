#!/usr/bin/env bash
# Real single-node Apache Kafka broker (KRaft, combined broker + controller) for tests and local
# use, without Docker. The broker jars come from Maven Central through pom.xml beside this script
# (shipped inside the dpsynth package, dpsynth/testing/kafka_local/; deploy/kafka-local.sh in a source
# checkout is a wrapper that runs this file).
#
#   bash deploy/kafka-local.sh start     # fetch jars if missing, start, print KAFKA_BOOTSTRAP_SERVERS=...
#   bash deploy/kafka-local.sh stop      # SIGTERM, wait up to 30 s, then SIGKILL
#   bash deploy/kafka-local.sh status    # "running ..." (exit 0) or "not running" (exit 3)
#   bash deploy/kafka-local.sh address   # 127.0.0.1:<port> of the running broker (exit 1 if none)
#   bash deploy/kafka-local.sh fetch     # only fetch the jars
#   bash deploy/kafka-local.sh ports     # "<broker port> <controller port>" a start would use
#                                        # (one line per node; exit 1 if a set port is taken)
#   bash deploy/kafka-local.sh tool NAME [ARGS...]  # run one of Kafka's tools against the broker,
#        e.g. `tool TopicCommand --list` (what kafka-topics.sh runs; --bootstrap-server is added
#        when ARGS lack it); NAME is a class of org.apache.kafka.tools (ConsumerGroupCommand, ...).
#        `dpsynth topics create` makes the worker's three topics without Kafka's tools.
#
# A cluster of N combined broker + controller nodes on loopback (DPSYNTH_KAFKA_NODES=N, e.g. 3):
# start/stop/status/address act on every node (node i in <run dir>/node-i, one KRaft quorum of N
# voters, replication factor min(N, 3) by default, min.insync.replicas 2, internal topics
# replicated N times); for failure tests:
#   DPSYNTH_KAFKA_NODES=3 bash deploy/kafka-local.sh kill I      # SIGKILL node I (1..N)
#   DPSYNTH_KAFKA_NODES=3 bash deploy/kafka-local.sh restart I   # start node I again, same data
#
# `start` prints exactly one line on stdout, `KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:<port>`, and
# writes it to <run dir>/bootstrap; progress and errors go to stderr. It is idempotent: when the
# broker is already running it only prints the address. Every fresh start formats new storage
# (random cluster id), so topics do not survive a stop/start.
#
# Environment:
#   DPSYNTH_KAFKA_VERSION        Kafka version to fetch/run (default 4.0.0)
#   DPSYNTH_KAFKA_HOME           jar cache (default ~/.cache/dpsynth/kafka-<version>; jars in libs/)
#   DPSYNTH_KAFKA_DIR            run dir: config, data, logs, pid (default ./.kafka)
#   DPSYNTH_KAFKA_START_TIMEOUT  seconds to wait for the broker to answer (default 120)
#   DPSYNTH_KAFKA_HEAP_OPTS      JVM heap flags (default "-Xms128m -Xmx512m")
#   DPSYNTH_PYTHON               python used for port picking and the readiness probe (default
#                                python3); the probe asks for metadata with confluent-kafka's
#                                AdminClient when that python can import it, else probes the port.
#   DPSYNTH_KAFKA_NODES          nodes (default 1: the single broker; 2-9: a cluster)
#   DPSYNTH_KAFKA_PORT           the broker's (client) port on 127.0.0.1 (default: a free port
#                                picked at each start); node i of a cluster listens on
#                                DPSYNTH_KAFKA_PORT + i - 1
#   DPSYNTH_KAFKA_CONTROLLER_PORT  the KRaft controller's port (default: a free port picked at
#                                each start); node i of a cluster: + i - 1. A set port that is
#                                taken fails the start (no retry on other ports).
#   JAVA_HOME                    JDK/JRE to use (java on PATH otherwise); Kafka 4 needs Java >= 17.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
POM=$SCRIPT_DIR/pom.xml
SERVER_TEMPLATE=$SCRIPT_DIR/server.properties.template
LOG4J_TEMPLATE=$SCRIPT_DIR/log4j2.properties
DEPENDENCY_PLUGIN_VERSION=3.8.1  # keep equal to the version pinned in pom.xml

KAFKA_VERSION=${DPSYNTH_KAFKA_VERSION:-4.0.0}
KAFKA_HOME=${DPSYNTH_KAFKA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/dpsynth/kafka-$KAFKA_VERSION}
RUN_DIR=${DPSYNTH_KAFKA_DIR:-$PWD/.kafka}
# Absolute paths: the pid check matches the broker's command line against the run dir.
[[ $RUN_DIR == /* ]] || RUN_DIR=$PWD/$RUN_DIR
[[ $KAFKA_HOME == /* ]] || KAFKA_HOME=$PWD/$KAFKA_HOME
LIBS=$KAFKA_HOME/libs
PID_FILE=$RUN_DIR/kafka.pid
BOOTSTRAP_FILE=$RUN_DIR/bootstrap
START_TIMEOUT=${DPSYNTH_KAFKA_START_TIMEOUT:-120}
STOP_TIMEOUT=30
HEAP_OPTS=${DPSYNTH_KAFKA_HEAP_OPTS:--Xms128m -Xmx512m}
PYTHON=${DPSYNTH_PYTHON:-python3}
NODES=${DPSYNTH_KAFKA_NODES:-1}
[[ $NODES =~ ^[1-9]$ ]] || { echo "kafka-local: DPSYNTH_KAFKA_NODES must be 1-9" >&2; exit 2; }
CLUSTER_DIR=$RUN_DIR
FIXED_BROKER_PORT=${DPSYNTH_KAFKA_PORT:-}
FIXED_CONTROLLER_PORT=${DPSYNTH_KAFKA_CONTROLLER_PORT:-}
check_port_setting() {  # NAME VALUE: empty, or a port that leaves room for every node
  [[ -z $2 ]] && return 0
  [[ $2 =~ ^[1-9][0-9]{0,4}$ ]] && (( $2 + NODES - 1 <= 65535 )) \
    || { echo "kafka-local: $1 must be a port number 1-$((65536 - NODES)) (got '$2')" >&2; exit 2; }
}
check_port_setting DPSYNTH_KAFKA_PORT "$FIXED_BROKER_PORT"
check_port_setting DPSYNTH_KAFKA_CONTROLLER_PORT "$FIXED_CONTROLLER_PORT"
if [[ -n $FIXED_BROKER_PORT && -n $FIXED_CONTROLLER_PORT ]] \
    && (( FIXED_BROKER_PORT - FIXED_CONTROLLER_PORT < NODES \
          && FIXED_CONTROLLER_PORT - FIXED_BROKER_PORT < NODES )); then
  echo "kafka-local: DPSYNTH_KAFKA_PORT and DPSYNTH_KAFKA_CONTROLLER_PORT overlap" \
    "($NODES node(s) use $NODES consecutive ports each)" >&2
  exit 2
fi
if [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]]; then JAVA=$JAVA_HOME/bin/java; else JAVA=java; fi

log() { printf 'kafka-local: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Hold an exclusive lock on fd 9 so concurrent start/stop calls on one run dir (or one jar
# cache) serialise. The fd is closed for the broker process so it never inherits the lock.
lock() {
  local file=$1
  exec 9>"$file"
  if command -v flock >/dev/null 2>&1; then
    flock -w 600 9 || die "could not lock $file within 600 s"
  fi
}

# ---------------------------------------------------------------------------------------------
# Jars
# ---------------------------------------------------------------------------------------------
jars_present() {
  [[ -f $LIBS/.complete && -f $LIBS/kafka_2.13-$KAFKA_VERSION.jar \
     && -f $LIBS/kafka-tools-$KAFKA_VERSION.jar ]]
}

fetch_jars() {
  jars_present && return 0
  command -v mvn >/dev/null 2>&1 || die "mvn (Maven 3) not found on PATH; it fetches the broker jars"
  mkdir -p "$KAFKA_HOME"
  lock "$KAFKA_HOME/.fetch.lock"
  if jars_present; then exec 9>&-; return 0; fi
  local tmp out started=$SECONDS
  tmp=$(mktemp -d "$KAFKA_HOME/libs.tmp.XXXXXX")
  out=$(mktemp "$KAFKA_HOME/mvn.XXXXXX.log")
  # The plugin is named in full (same version as pom.xml pins) so that, offline,
  # Maven reports the unreachable repository instead of "No plugin found for prefix".
  local args=(-B -q -Dstyle.color=never -f "$POM"
              "org.apache.maven.plugins:maven-dependency-plugin:$DEPENDENCY_PLUGIN_VERSION:copy-dependencies"
              "-DoutputDirectory=$tmp" "-Dkafka.version=$KAFKA_VERSION")
  log "fetching Apache Kafka $KAFKA_VERSION jars with Maven into $LIBS"
  # Offline first (everything already in ~/.m2: no network needed), then online.
  if ! mvn -o "${args[@]}" >"$out" 2>&1; then
    if ! mvn "${args[@]}" >"$out" 2>&1; then
      log "ERROR: Maven could not fetch org.apache.kafka:kafka_2.13:$KAFKA_VERSION. Maven said:"
      sed -e $'s/\x1b\[[0-9;]*m//g' "$out" >&2
      rm -rf "$tmp" "$out"
      exit 1
    fi
  fi
  rm -f "$out"
  [[ -f $tmp/kafka_2.13-$KAFKA_VERSION.jar ]] \
    || { rm -rf "$tmp"; die "Maven finished but kafka_2.13-$KAFKA_VERSION.jar is missing"; }
  chmod 755 "$tmp"
  rm -rf "$LIBS"
  mv "$tmp" "$LIBS"
  touch "$LIBS/.complete"
  log "fetched $(find "$LIBS" -name '*.jar' | wc -l) jars ($(du -sh "$LIBS" | cut -f1)) in $((SECONDS - started)) s"
  exec 9>&-
}

check_java() {
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found (set JAVA_HOME or put java on PATH)"
  local ver major
  ver=$("$JAVA" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
  major=${ver%%.*}
  [[ $major == 1 ]] && major=$(cut -d. -f2 <<<"$ver")
  if [[ $major =~ ^[0-9]+$ ]] && (( major < 17 )); then
    die "Kafka $KAFKA_VERSION needs Java >= 17, found $ver ($JAVA)"
  fi
}

# ---------------------------------------------------------------------------------------------
# Process state
# ---------------------------------------------------------------------------------------------
read_pid() {
  [[ -f $PID_FILE ]] || return 1
  local pid
  pid=$(<"$PID_FILE")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  printf '%s' "$pid"
}

# True when $1 is a live (not zombie) process running our kafka.Kafka on this run dir.
is_our_broker() {
  local pid=$1 stat args
  stat=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
  [[ $stat == Z* ]] && return 1
  args=$(ps -ww -o args= -p "$pid" 2>/dev/null) || return 1
  [[ $args == *kafka.Kafka* && $args == *"$RUN_DIR/server.properties"* ]]
}

running_pid() {
  local pid
  pid=$(read_pid) || return 1
  is_our_broker "$pid" || return 1
  printf '%s' "$pid"
}

current_address() {
  [[ -f $BOOTSTRAP_FILE ]] || return 1
  local line
  line=$(<"$BOOTSTRAP_FILE")
  printf '%s' "${line#KAFKA_BOOTSTRAP_SERVERS=}"
}

# ---------------------------------------------------------------------------------------------
# start
# ---------------------------------------------------------------------------------------------
# "<broker port> <controller port>" for node $1 (default 1): DPSYNTH_KAFKA_PORT and
# DPSYNTH_KAFKA_CONTROLLER_PORT (+ node - 1) when set, checked free (bound first, so that a free
# port picked for the other is never the same), else free ports picked by the OS.
pick_ports() {
  local offset=$(( ${1:-1} - 1 ))
  "$PYTHON" - "${FIXED_BROKER_PORT:+$((FIXED_BROKER_PORT + offset))}" \
    "${FIXED_CONTROLLER_PORT:+$((FIXED_CONTROLLER_PORT + offset))}" <<'EOF'
import socket
import sys

names = ("DPSYNTH_KAFKA_PORT", "DPSYNTH_KAFKA_CONTROLLER_PORT")
socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(2)]
for name, s, port in sorted(zip(names, socks, sys.argv[1:3]), key=lambda x: not x[2]):
    if port:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker binds it
    try:
        s.bind(("127.0.0.1", int(port or 0)))
    except OSError as e:
        sys.exit(f"kafka-local: ERROR: 127.0.0.1:{port} ({name}) is not free: {e.strerror}")
print(*(s.getsockname()[1] for s in socks))
for s in socks:
    s.close()
EOF
}

random_cluster_id() {
  "$PYTHON" -c 'import base64, uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))'
}

# Wait until the broker accepts TCP connections and answers a metadata request.
# Exit status: 0 ready, 1 timed out, 2 the process died.
wait_ready() {
  local pid=$1 port=$2
  "$PYTHON" - "$pid" "$port" "$START_TIMEOUT" <<'EOF'
import os
import socket
import sys
import time

pid, port, timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
addr = f"127.0.0.1:{port}"
deadline = time.monotonic() + timeout


def alive() -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


try:
    from confluent_kafka.admin import AdminClient
except ImportError:
    AdminClient = None

while time.monotonic() < deadline:
    if not alive():
        sys.exit(2)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        time.sleep(0.25)
        continue
    if AdminClient is None:
        print("port open (confluent-kafka not importable: metadata not checked)", file=sys.stderr)
        sys.exit(0)
    try:
        admin = AdminClient({"bootstrap.servers": addr, "log_level": 0,
                             "logger": lambda *a, **k: None})
        md = admin.list_topics(timeout=5)
        if md.brokers:
            sys.exit(0)
    except Exception:  # noqa: BLE001 - not ready yet, try again
        pass
    time.sleep(0.25)
sys.exit(1)
EOF
}

tail_logs() {
  local f
  for f in "$RUN_DIR/logs/kafka.out" "$RUN_DIR/logs/server.log"; do
    if [[ -s $f ]]; then
      log "--- last lines of $f ---"
      tail -n 30 "$f" >&2 || true
    fi
  done
}

render_config() {
  local broker_port=$1 controller_port=$2
  sed -e "s|@RUN_DIR@|$RUN_DIR|g" \
      -e "s|@BROKER_PORT@|$broker_port|g" \
      -e "s|@CONTROLLER_PORT@|$controller_port|g" \
      "$SERVER_TEMPLATE" >"$RUN_DIR/server.properties"
  cp "$LOG4J_TEMPLATE" "$RUN_DIR/log4j2.properties"
}

java_common=()
set_java_common() {
  java_common=(
    -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$RUN_DIR/log4j2.properties"
    "-Dkafka.logs.dir=$RUN_DIR/logs"
    -cp "$LIBS/*"
  )
}

format_storage() {
  local cluster_id=${1:-}
  [[ -n $cluster_id ]] || cluster_id=$(random_cluster_id)
  if ! "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 "${java_common[@]}" kafka.tools.StorageTool \
      format --cluster-id="$cluster_id" -c "$RUN_DIR/server.properties" \
      >"$RUN_DIR/logs/format.log" 2>&1 9>&-; then
    log "ERROR: kafka-storage format failed:"
    cat "$RUN_DIR/logs/format.log" >&2
    exit 1
  fi
}

launch() {
  rm -f "$PID_FILE"
  local launcher=()
  command -v setsid >/dev/null 2>&1 && launcher=(setsid)
  # The wrapper shell writes its own pid and then execs java, so the pid file holds the JVM's pid
  # whether or not setsid forks. New session: the broker outlives the caller's terminal/group.
  # shellcheck disable=SC2016,SC2086  # $$ expands in the wrapper; HEAP_OPTS is a list of flags
  "${launcher[@]}" bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PID_FILE" \
    "$JAVA" $HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -XX:+ExitOnOutOfMemoryError "${java_common[@]}" \
    kafka.Kafka "$RUN_DIR/server.properties" \
    </dev/null >"$RUN_DIR/logs/kafka.out" 2>&1 9>&- &
  local i
  for ((i = 0; i < 100; i++)); do
    [[ -s $PID_FILE ]] && return 0
    sleep 0.05
  done
  die "broker process did not start (no pid file)"
}

cmd_start() {
  mkdir -p "$RUN_DIR"
  [[ -f $RUN_DIR/.gitignore ]] || printf '*\n' >"$RUN_DIR/.gitignore"
  local started=$SECONDS
  fetch_jars
  lock "$RUN_DIR/.lock"
  local pid addr
  if pid=$(running_pid) && addr=$(current_address); then
    log "already running (pid $pid)"
    echo "KAFKA_BOOTSTRAP_SERVERS=$addr"
    return 0
  fi
  if running_pid >/dev/null; then
    # Running but its bootstrap file is gone: stop it and start clean.
    cmd_stop_locked
  fi
  rm -f "$PID_FILE" "$BOOTSTRAP_FILE"
  check_java
  set_java_common

  local attempt rc ports broker_port controller_port
  for attempt in 1 2 3; do
    rm -rf "$RUN_DIR/data" "$RUN_DIR/logs"
    mkdir -p "$RUN_DIR/data" "$RUN_DIR/logs"
    ports=$(pick_ports) || exit 1
    read -r broker_port controller_port <<<"$ports"
    render_config "$broker_port" "$controller_port"
    format_storage
    launch
    pid=$(read_pid) || die "pid file unreadable"
    log "broker pid $pid on 127.0.0.1:$broker_port (controller $controller_port), waiting for it"
    rc=0
    wait_ready "$pid" "$broker_port" || rc=$?
    if (( rc == 0 )); then
      echo "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$broker_port" >"$BOOTSTRAP_FILE"
      log "ready in $((SECONDS - started)) s; logs in $RUN_DIR/logs"
      echo "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$broker_port"
      return 0
    fi
    if (( rc == 2 )) && grep -qs 'Address already in use' "$RUN_DIR/logs/kafka.out" \
        "$RUN_DIR/logs/server.log" && (( attempt < 3 )) \
        && [[ -z $FIXED_BROKER_PORT && -z $FIXED_CONTROLLER_PORT ]]; then
      log "port taken between picking and binding; retrying with new ports"
      rm -f "$PID_FILE"
      continue
    fi
    if (( rc == 2 )); then
      log "ERROR: the broker exited during start-up"
    else
      log "ERROR: the broker did not answer within ${START_TIMEOUT} s"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    tail_logs
    rm -f "$PID_FILE"
    exit 1
  done
}

# ---------------------------------------------------------------------------------------------
# stop / status / address
# ---------------------------------------------------------------------------------------------
cmd_stop_locked() {
  local pid deadline t0=${EPOCHREALTIME:-$SECONDS}
  if ! pid=$(running_pid); then
    log "not running"
    rm -f "$PID_FILE" "$BOOTSTRAP_FILE"
    return 0
  fi
  log "stopping broker pid $pid (SIGTERM)"
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + STOP_TIMEOUT))
  while is_our_broker "$pid" && (( SECONDS < deadline )); do
    sleep 0.1
  done
  if is_our_broker "$pid"; then
    log "still running after ${STOP_TIMEOUT} s; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 5))
    while is_our_broker "$pid" && (( SECONDS < deadline )); do
      sleep 0.1
    done
  else
    log "stopped in $(awk -v a="$t0" -v b="${EPOCHREALTIME:-$SECONDS}" 'BEGIN {printf "%.1f", b - a}') s"
  fi
  rm -f "$PID_FILE" "$BOOTSTRAP_FILE"
}

cmd_stop() {
  if [[ ! -d $RUN_DIR ]]; then
    log "not running"
    return 0
  fi
  lock "$RUN_DIR/.lock"
  cmd_stop_locked
}

cmd_status() {
  local pid addr
  if pid=$(running_pid); then
    addr=$(current_address || echo "unknown address")
    echo "running (pid $pid, KAFKA_BOOTSTRAP_SERVERS=$addr, run dir $RUN_DIR)"
    return 0
  fi
  echo "not running"
  return 3
}

cmd_address() {
  local addr
  if running_pid >/dev/null && addr=$(current_address); then
    echo "$addr"
    return 0
  fi
  log "not running"
  return 1
}

cmd_tool() {
  local name=${1:-} addr
  [[ -n $name ]] || die "usage: $0 tool NAME [ARGS...] (e.g. tool TopicCommand --list)"
  shift
  fetch_jars
  check_java
  set_java_common
  local args=("$@")
  if [[ " ${args[*]} " != *" --bootstrap-server "* ]]; then
    addr=$(cmd_address) || die "no broker running in $RUN_DIR: start one, or pass --bootstrap-server"
    args=(--bootstrap-server "$addr" "${args[@]}")
  fi
  [[ $name == *.* ]] || name=org.apache.kafka.tools.$name
  exec "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 "${java_common[@]}" "$name" "${args[@]}" 9>&-
}

# ---------------------------------------------------------------------------------------------
# A cluster of NODES nodes: node i lives in $CLUSTER_DIR/node-i with a single broker's layout
# ---------------------------------------------------------------------------------------------
use_node() {
  RUN_DIR=$CLUSTER_DIR/node-$1
  PID_FILE=$RUN_DIR/kafka.pid
  BOOTSTRAP_FILE=$RUN_DIR/bootstrap
}

cluster_overrides() {
  local node=$1 voters=$2 rf=$(( NODES < 3 ? NODES : 3 ))
  local isr=$(( NODES > 1 ? 2 : 1 ))
  printf '%s\n' \
    "# --- cluster of $NODES nodes (kafka-local.sh; these lines override the ones above) ---" \
    "node.id=$node" \
    "controller.quorum.voters=$voters" \
    "default.replication.factor=$rf" \
    "min.insync.replicas=$isr" \
    "offsets.topic.replication.factor=$NODES" \
    "transaction.state.log.replication.factor=$NODES" \
    "transaction.state.log.min.isr=$isr" \
    "share.coordinator.state.topic.replication.factor=$NODES" \
    "share.coordinator.state.topic.min.isr=$isr" \
    "# a killed node is fenced, and its partitions' leadership moves, within a few seconds" \
    "broker.heartbeat.interval.ms=1000" \
    "broker.session.timeout.ms=6000"
}

cluster_address() {
  [[ -f $CLUSTER_DIR/bootstrap ]] || return 1
  local line
  line=$(<"$CLUSTER_DIR/bootstrap")
  printf '%s' "${line#KAFKA_BOOTSTRAP_SERVERS=}"
}

cluster_running() {
  local i
  for ((i = 1; i <= NODES; i++)); do
    use_node "$i"
    running_pid >/dev/null || return 1
  done
}

# Start node $1 again from its rendered config and data; wait until it answers.
start_node() {
  use_node "$1"
  set_java_common
  launch
  local pid addr rc=0
  pid=$(read_pid) || die "node $1: pid file unreadable"
  addr=$(current_address) || die "node $1: no address"
  wait_ready "$pid" "${addr##*:}" || rc=$?
  if (( rc != 0 )); then
    log "ERROR: node $1 did not start (status $rc)"
    tail_logs
    return 1
  fi
  log "node $1 ready (pid $pid, $addr)"
}

cmd_cluster_start() {
  mkdir -p "$CLUSTER_DIR"
  [[ -f $CLUSTER_DIR/.gitignore ]] || printf '*\n' >"$CLUSTER_DIR/.gitignore"
  local started=$SECONDS addr
  fetch_jars
  lock "$CLUSTER_DIR/.lock"
  if cluster_running && addr=$(cluster_address); then
    log "cluster already running"
    echo "KAFKA_BOOTSTRAP_SERVERS=$addr"
    return 0
  fi
  cmd_cluster_stop_locked
  check_java
  local i voters="" cluster_id servers="" pid ports
  local -a broker_ports=() controller_ports=()
  for ((i = 1; i <= NODES; i++)); do
    ports=$(pick_ports "$i") || exit 1
    read -r "broker_ports[i]" "controller_ports[i]" <<<"$ports"
    voters+="${voters:+,}$i@127.0.0.1:${controller_ports[i]}"
    servers+="${servers:+,}127.0.0.1:${broker_ports[i]}"
  done
  cluster_id=$(random_cluster_id)
  for ((i = 1; i <= NODES; i++)); do
    use_node "$i"
    rm -rf "$RUN_DIR"
    mkdir -p "$RUN_DIR/data" "$RUN_DIR/logs"
    render_config "${broker_ports[i]}" "${controller_ports[i]}"
    cluster_overrides "$i" "$voters" >>"$RUN_DIR/server.properties"
    echo "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:${broker_ports[i]}" >"$BOOTSTRAP_FILE"
    set_java_common
    format_storage "$cluster_id"
    launch  # all nodes boot together: the quorum needs a majority of them
  done
  for ((i = 1; i <= NODES; i++)); do
    use_node "$i"
    pid=$(read_pid) || die "node $i: pid file unreadable"
    if ! wait_ready "$pid" "${broker_ports[i]}"; then
      log "ERROR: node $i did not answer"
      tail_logs
      cmd_cluster_stop_locked
      exit 1
    fi
  done
  echo "KAFKA_BOOTSTRAP_SERVERS=$servers" >"$CLUSTER_DIR/bootstrap"
  log "cluster of $NODES nodes ready in $((SECONDS - started)) s; logs in $CLUSTER_DIR/node-*/logs"
  echo "KAFKA_BOOTSTRAP_SERVERS=$servers"
}

cmd_cluster_stop_locked() {
  local i pid
  # SIGTERM to every node at once: one by one, the last nodes would wait for a quorum that is
  # already gone before their controlled shutdown gives up
  for ((i = 1; i <= NODES; i++)); do
    use_node "$i"
    if pid=$(running_pid); then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  for ((i = 1; i <= NODES; i++)); do
    use_node "$i"
    if [[ -d $RUN_DIR ]]; then cmd_stop_locked; fi
  done
  rm -f "$CLUSTER_DIR/bootstrap"
}

cmd_cluster_stop() {
  [[ -d $CLUSTER_DIR ]] || { log "not running"; return 0; }
  lock "$CLUSTER_DIR/.lock"
  cmd_cluster_stop_locked
}

cmd_cluster_status() {
  local i pid up=0
  for ((i = 1; i <= NODES; i++)); do
    use_node "$i"
    if pid=$(running_pid); then
      echo "node $i running (pid $pid, $(current_address))"
      up=$((up + 1))
    else
      echo "node $i not running"
    fi
  done
  (( up == NODES )) && return 0
  return 3
}

node_arg() {
  [[ ${1:-} =~ ^[1-9]$ ]] && (( $1 <= NODES )) || die "give a node number 1..$NODES"
}

cmd_kill() {
  node_arg "${1:-}"
  use_node "$1"
  local pid
  pid=$(running_pid) || { log "node $1 is not running"; return 0; }
  kill -KILL "$pid" 2>/dev/null || true
  while is_our_broker "$pid"; do sleep 0.05; done
  log "node $1 killed (pid $pid)"
}

cmd_restart() {
  node_arg "${1:-}"
  use_node "$1"
  if running_pid >/dev/null; then log "node $1 is running"; return 0; fi
  check_java
  start_node "$1"
}

if (( NODES > 1 )); then
  case ${1:-} in
    start) cmd_cluster_start ;;
    stop) cmd_cluster_stop ;;
    status) cmd_cluster_status ;;
    address) if cluster_running && cluster_address; then echo; else log "not running"; exit 1; fi ;;
    kill) cmd_kill "${2:-}" ;;
    restart) cmd_restart "${2:-}" ;;
    fetch) fetch_jars; echo "$LIBS" ;;
    ports) for ((i = 1; i <= NODES; i++)); do pick_ports "$i"; done ;;
    tool) shift; use_node 1; cmd_tool "$@" ;;
    *) echo "usage: $0 start|stop|status|address|fetch|ports|kill N|restart N|tool NAME [ARGS...]" >&2
       exit 2 ;;
  esac
  exit
fi

case ${1:-} in
  start) cmd_start ;;
  tool) shift; cmd_tool "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  address) cmd_address ;;
  fetch) fetch_jars; echo "$LIBS" ;;
  ports) pick_ports ;;
  *)
    echo "usage: $0 start|stop|status|address|fetch|ports|tool NAME [ARGS...]" >&2
    exit 2
    ;;
esac
