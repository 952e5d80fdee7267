#!/usr/bin/env bash
# ctest label `hosts`: a CURVE farm across network namespaces (docs/farm.md, "Across hosts").
#   farm_hosts.sh BIN_DIR SOURCE_DIR
# Three namespaces joined by veth pairs, with only the addresses this script assigns there
# (10.231.N.0/30 and 10.231.N.4/30): the coordinator (`tune --bind` on 10.231.N.1 with
# CURVE) in one, an emulated dc-worker in each of the other two. It checks, from the
# coordinator's output and the tuning DB:
#   1. a coordinator without keys on that non-loopback address is refused at start (exit 2),
#      and so are a coordinator and a worker whose secret key file others can read;
#   2. workers with allowed keys join and measure; a worker with an unknown key is refused
#      at the handshake and never joins;
#   3. link loss: mid-tune worker A's link goes down: its heartbeats stop, it is declared
#      dead, its leases are requeued and worker B finishes them; B is then frozen (SIGSTOP),
#      so that the rest of the queue waits for A; A's link comes up: A reconnects and
#      measures again; B is thawed and the tune ends with every job's result exactly once;
#   4. coordinator crash: SIGKILL mid-tune and a restart of the same command: the workers
#      reconnect, the tune resumes from the DB, and the DB holds each job's result once.
# Needs root and CAP_NET_ADMIN; elsewhere exits 77 (ctest SKIP_RETURN_CODE) with the reason.
# Cleans up its namespaces and processes on any exit; bounded by DEADLINE seconds.
set -euo pipefail
BIN="$1"
SRC="$2"
DEADLINE="${DC_HOSTS_DEADLINE:-150}"
T0=$(date +%s)

if [ "$(id -u)" != 0 ]; then echo "SKIPPED: the hosts test needs root (network namespaces)"; exit 77; fi
if ! command -v ip >/dev/null; then echo "SKIPPED: the hosts test needs iproute2's ip"; exit 77; fi
N=$(( $$ % 250 + 1 ))
P="dch$$"                                   # unique names: pid-suffixed
NS_C="${P}c" NS_A="${P}a" NS_B="${P}b"
NET="10.231.$N"
C_ADDR="$NET.1" A_ADDR="$NET.2" CB_ADDR="$NET.5" B_ADDR="$NET.6"
D="$(mktemp -d /tmp/dc-hosts.XXXXXX)"
PIDS=()
WATCHDOG=""

cleanup() {
  set +e
  kill -TERM "$WATCHDOG" 2>/dev/null
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  for ns in "$NS_C" "$NS_A" "$NS_B"; do ip netns del "$ns" 2>/dev/null; done
  wait 2>/dev/null
  if [ "${KEEP:-0}" = 1 ]; then echo "logs kept in $D"; else rm -rf "$D"; fi
}
trap cleanup EXIT
trap 'echo "FAILED: interrupted or past the ${DEADLINE} s bound (after $(( $(date +%s) - T0 )) s)"; KEEP=1; exit 1' INT TERM
# The bound: a watchdog that TERMs this script (whose trap cleans up); killed with its sleep.
( trap 'kill $s 2>/dev/null; exit 0' TERM; sleep "$DEADLINE" & s=$!; wait $s && kill -TERM $$ ) >/dev/null 2>&1 &
WATCHDOG=$!

if ! err="$(ip netns add "$NS_C" 2>&1)"; then
  echo "SKIPPED: the hosts test needs CAP_NET_ADMIN (ip netns add: $err)"; exit 77
fi
ip netns add "$NS_A"
ip netns add "$NS_B"
ip link add "${P}ca" netns "$NS_C" type veth peer name "${P}a" netns "$NS_A"
ip link add "${P}cb" netns "$NS_C" type veth peer name "${P}b" netns "$NS_B"
ip -n "$NS_C" addr add "$C_ADDR/30" dev "${P}ca"
ip -n "$NS_C" addr add "$CB_ADDR/30" dev "${P}cb"
ip -n "$NS_A" addr add "$A_ADDR/30" dev "${P}a"
ip -n "$NS_B" addr add "$B_ADDR/30" dev "${P}b"
for ns in "$NS_C" "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_C" link set "${P}ca" up
ip -n "$NS_C" link set "${P}cb" up
ip -n "$NS_A" link set "${P}a" up
ip -n "$NS_B" link set "${P}b" up
ip -n "$NS_B" route add "$C_ADDR/32" via "$CB_ADDR"   # B reaches the coordinator's address

fail() { echo "FAILED: $*"; echo "--- coordinator"; tail -40 "$D/coord.log" 2>/dev/null; KEEP=1; exit 1; }
passed=0
ok() { echo "ok [$(( $(date +%s) - T0 )) s]: $*"; passed=$((passed + 1)); }
# wait_for SECONDS WHAT COMMAND...: polls COMMAND every 0.2 s.
wait_for() {
  local until=$(( $(date +%s) + $1 )) what="$2"; shift 2
  until "$@"; do [ "$(date +%s)" -lt "$until" ] || fail "$what (waited)"; sleep 0.2; done
}
in_log() { grep -q -- "$1" "$D/coord.log"; }
count_in_log() { grep -c -- "$1" "$D/coord.log" || true; }
now_ms() { date +%s%3N; }
# Results of worker $1 in the DB finished after unix ms $2.
results_of() {
  sqlite3 -cmd '.timeout 5000' "$D/tune.db" "SELECT count(*) FROM measurements m JOIN workers w ON w.id = m.worker_id
    WHERE w.name LIKE '$1/%' AND m.finished_ms > $2" 2>/dev/null || echo 0
}
has_results() { [ "$(results_of "$1" "$2")" -ge "$3" ]; }

for k in coordinator wa wb intruder; do "$BIN/dc-coordinator" keygen "$D/$k.key" >/dev/null; done
cat "$D/wa.key.pub" "$D/wb.key.pub" >"$D/allow"
ENDPOINT="tcp://$C_ADDR:5555"
MODEL="$SRC/examples/tiny_ops/model.onnx"
# --no-cross-check: the checks below count one result per job and per variant (exactly once);
# the finalists' second measurement on the other worker would add rows by design.
TUNE=(tune "$MODEL" --gpus h100 --emulate --bind "$ENDPOINT" --db "$D/tune.db" --out "$D/plan"
      --config "$SRC/examples/tune-quick.yaml" --top-k 2 --no-reference --no-check --no-cross-check
      --wait-workers 30 -q)

# 1. No keys on a non-loopback address: refused at start, before any worker could connect.
rc=0
ip netns exec "$NS_C" "$BIN/dc-coordinator" "${TUNE[@]}" >"$D/nokeys.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "a coordinator without keys on $ENDPOINT exited $rc, not 2: $(cat "$D/nokeys.log")"
grep -q '^error: .*CURVE' "$D/nokeys.log" || fail "no 'error:' line about CURVE: $(cat "$D/nokeys.log")"
ok "without keys on $ENDPOINT: exit 2, $(grep -m1 '^error:' "$D/nokeys.log" | cut -c1-100)..."

# 1b. A secret key file that group or others can read: refused at start, as ssh refuses one.
cp "$D/coordinator.key" "$D/loose.key"
chmod 644 "$D/loose.key"
rc=0
ip netns exec "$NS_C" "$BIN/dc-coordinator" "${TUNE[@]}" --curve-key "$D/loose.key" \
  --allow-workers "$D/allow" >"$D/loose-coord.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q '^error: .*loose.key: the secret key file is readable by group or others (mode 0644)' \
  "$D/loose-coord.log" || fail "coordinator with a 0644 secret key: exit $rc: $(cat "$D/loose-coord.log")"
chmod 640 "$D/loose.key"
rc=0
ip netns exec "$NS_A" "$BIN/dc-worker" --connect "$ENDPOINT" --emulate h100 --server-key "$D/coordinator.key.pub" \
  --key "$D/loose.key" >"$D/loose-worker.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q 'loose.key: the secret key file is readable by group or others (mode 0640)' \
  "$D/loose-worker.log" || fail "worker with a 0640 secret key: exit $rc: $(cat "$D/loose-worker.log")"
ok "secret key files readable by others refused: $(grep -m1 '^error:' "$D/loose-coord.log" | cut -c1-110)..."

# 2. The coordinator with CURVE; workers with allowed keys in A and B, an intruder in B.
# Each worker has its own empty compile cache, so jobs take real NVRTC time.
ip netns exec "$NS_C" "$BIN/dc-coordinator" --log-level info "${TUNE[@]}" \
  --curve-key "$D/coordinator.key" --allow-workers "$D/allow" >"$D/coord.log" 2>&1 &
COORD=$!; PIDS+=($COORD)
worker() {  # worker NS NAME KEY
  ip netns exec "$1" "$BIN/dc-worker" --connect "$ENDPOINT" --emulate h100 --cache "$D/cache-$2" \
    --server-key "$D/coordinator.key.pub" --key "$D/$3.key" --worker-id "$2" --builders 1 \
    --log-level info >"$D/$2.log" 2>&1 &
  PIDS+=($!)
}
worker "$NS_A" hostsA wa;    WA=${PIDS[-1]}
worker "$NS_B" hostsB wb;    WB=${PIDS[-1]}
worker "$NS_B" intruder intruder; WI=${PIDS[-1]}
wait_for 30 "worker hostsA never joined" in_log "worker hostsA .*joined"
wait_for 10 "worker hostsB never joined" in_log "worker hostsB .*joined"
wait_for 10 "the intruder's key was not refused" in_log "refused a connection from $B_ADDR"
wait_for 30 "no result from hostsA" has_results hostsA 0 1
wait_for 30 "no result from hostsB" has_results hostsB 0 1
kill -9 "$WI"
in_log "worker intruder" && fail "the worker with an unknown key joined"
[ "$(results_of intruder 0)" = 0 ] || fail "the worker with an unknown key has results"
ok "allowed keys: hostsA and hostsB joined over $C_ADDR and measured; unknown key: refused ($(grep -m1 -o 'refused a connection from .*' "$D/coord.log" | cut -c1-90))"

# 3. Link loss mid-tune.
ip -n "$NS_A" link set "${P}a" down
T_DOWN=$(now_ms)
wait_for 15 "hostsA was not declared dead after its link went down" in_log "worker hostsA silent for"
dead_line="$(grep -m1 'worker hostsA silent for' "$D/coord.log")"
k="$(sed -n 's/.*declared dead (\([0-9]*\) job.*/\1/p' <<<"$dead_line")"
[ "${k:-0}" -ge 1 ] || fail "hostsA held no jobs when declared dead: $dead_line"
T_DEAD=$(now_ms)
ok "link down: hostsA's heartbeats stopped after $(( T_DEAD - T_DOWN )) ms: ${dead_line#*farm: }"
wait_for 30 "hostsB did not finish the $k requeued job(s)" has_results hostsB "$T_DEAD" "$k"
kill -STOP "$WB"      # from here the queue waits for hostsA
T_FROZEN=$(now_ms)
[ "$(results_of hostsA "$T_DEAD")" = 0 ] || fail "hostsA has results while its link was down"
ok "hostsB finished $(results_of hostsB "$T_DEAD") job(s) (>= the $k requeued) while hostsA was away; hostsA none"
joins=$(count_in_log "worker hostsA .*joined")
ip -n "$NS_A" link set "${P}a" up
T_UP=$(now_ms)
wait_for 45 "hostsA did not reconnect after its link came up" \
  bash -c "[ \$(grep -c 'worker hostsA .*joined' '$D/coord.log') -gt $joins ]"
T_BACK=$(now_ms)
wait_for 30 "hostsA did not measure again after reconnecting" has_results hostsA "$T_UP" 1
ok "link up: hostsA reconnected after $(( T_BACK - T_UP )) ms and measured $(results_of hostsA "$T_UP") job(s) again"
kill -CONT "$WB"

# The tune ends with every job's result exactly once.
rc=0
wait_for 60 "the tune did not finish" bash -c "! kill -0 $COORD 2>/dev/null"
wait "$COORD" || rc=$?
[ "$rc" = 0 ] || fail "the tune exited $rc"
line="$(grep -m1 '^this run' "$D/coord.log")"
jobs="$(sed -n 's/^this run *\([0-9]*\) jobs sent.*/\1/p' <<<"$line")"
rows="$(sqlite3 "$D/tune.db" 'SELECT count(*) FROM measurements')"
[[ "$line" =~ ,\ ${jobs}\ results:\ ${jobs}\ ok$ ]] || fail "not every job has one ok result: $line"
[ "$rows" = "$jobs" ] || fail "$jobs jobs but $rows rows in the DB"
[ "$(sqlite3 "$D/tune.db" 'PRAGMA integrity_check')" = ok ] || fail "integrity_check"
ok "tune done: $line; $rows DB rows; $(sed -n 's/.*farm: counters: //p' "$D/coord.log" | cut -d, -f3,5,7)"
# 4. Coordinator crash: SIGKILL mid-tune (another model, same DB), restart the same command.
# The workers reconnect to the new coordinator, the tune resumes from the DB (measures only
# what was not committed), and nothing is lost or doubled.
rows_before="$rows"
TUNE[1]="$SRC/examples/tiny_cnn/model.onnx"
ip netns exec "$NS_C" "$BIN/dc-coordinator" --log-level info "${TUNE[@]}" \
  --curve-key "$D/coordinator.key" --allow-workers "$D/allow" >"$D/coord.log" 2>&1 &
COORD=$!; PIDS+=($COORD)
wait_for 30 "the second tune sent no jobs" in_log "jobs sent"
n_jobs="$(sed -n 's/.*tune: dispatch .*: \([0-9]*\) jobs sent.*/\1/p' "$D/coord.log")"
db_rows() { sqlite3 -cmd '.timeout 5000' "$D/tune.db" 'SELECT count(*) FROM measurements'; }
has_rows() { [ "$(db_rows)" -ge "$1" ]; }
wait_for 30 "the second tune committed no results" has_rows $((rows_before + 3))
kill -9 "$COORD"; wait "$COORD" 2>/dev/null || true
mv "$D/coord.log" "$D/coord-killed.log"
committed=$(( $(db_rows) - rows_before ))
[ "$committed" -lt "$n_jobs" ] || fail "the tune had ended before the kill ($committed of $n_jobs)"
ok "coordinator SIGKILLed mid-tune: $committed of $n_jobs results committed"
ip netns exec "$NS_C" "$BIN/dc-coordinator" --log-level info "${TUNE[@]}" \
  --curve-key "$D/coordinator.key" --allow-workers "$D/allow" >"$D/coord.log" 2>&1 &
COORD=$!; PIDS+=($COORD)
wait_for 60 "the restarted tune did not finish" bash -c "! kill -0 $COORD 2>/dev/null"
rc=0; wait "$COORD" || rc=$?
[ "$rc" = 0 ] || fail "the restarted tune exited $rc"
in_log "worker hostsA .*joined" && in_log "worker hostsB .*joined" || fail "the workers did not reconnect to the restarted coordinator"
line="$(grep -m1 '^this run' "$D/coord.log")"
rest="$(sed -n 's/^this run *\([0-9]*\) jobs sent.*/\1/p' <<<"$line")"
[[ "$line" =~ ,\ ${rest}\ results:\ ${rest}\ ok$ ]] || fail "restarted tune: not every job has one ok result: $line"
[ $((committed + rest)) = "$n_jobs" ] || fail "resumed: $committed committed + $rest measured now != $n_jobs jobs"
[ "$(db_rows)" = $((rows_before + n_jobs)) ] || fail "$(db_rows) DB rows, expected $((rows_before + n_jobs))"
dups="$(sqlite3 "$D/tune.db" 'SELECT count(*) FROM (SELECT 1 FROM measurements GROUP BY variant_id, gpu_type HAVING count(*) > 1)')"
[ "$dups" = 0 ] || fail "$dups variants measured twice"
[ "$(sqlite3 "$D/tune.db" 'PRAGMA integrity_check')" = ok ] || fail "integrity_check after the crash"
ok "restarted: both workers reconnected; measured the other $rest of $n_jobs; $(db_rows) DB rows, none doubled"

echo "$passed passed, 0 failed ($(( $(date +%s) - T0 )) s)"
