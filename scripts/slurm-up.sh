#!/usr/bin/env bash
# A one-node Slurm on this host, for tests/it/slurm.rs (the shipped sbatch script against the
# simulator): Debian's slurm-wlm and munge, munged, slurmctld and slurmd here, with a minimal
# slurm.conf for this host's name, CPUs and memory. Needs root (apt, /etc/slurm, the daemons).
#
#   scripts/slurm-up.sh          install, configure and start; idempotent (7 s with the
#                                packages to install from apt's cache, 0.1 s when installed)
#   scripts/slurm-up.sh down     stop the daemons this script started
#
# A host whose Slurm already answers (`scontrol ping`) is left as it is, and a slurm.conf that
# this script did not write is never overwritten. Logs: /var/log/slurm/.
set -euo pipefail

CONF=/etc/slurm/slurm.conf
MARK="# Written by harvest's scripts/slurm-up.sh"
LOGS=/var/log/slurm

log() { echo "slurm-up: $*" >&2; }
die() { log "$*"; exit 1; }

answers() { scontrol ping 2>/dev/null | grep -q "is UP"; }

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
    && command -v munged >/dev/null && command -v sbatch >/dev/null; then
    return
  fi
  command -v apt-get >/dev/null || die "no apt-get: install slurm-wlm and munge yourself"
  log "installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null; }
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    return
  fi
  if [ ! -s /etc/munge/munge.key ]; then
    log "making a munge key"
    mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
      || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
  runuser -u munge -- /usr/sbin/munged
  munge -n | unmunge >/dev/null || die "munged does not answer"
}

ours() { [ -e "$CONF" ] && head -1 "$CONF" | grep -qF "$MARK"; }

# The slurm.conf: the node as slurmd sees it (CPUs, sockets, cores, threads, memory), under this
# host's name, reached on the loopback whatever the name resolves to.
render_conf() {
  local host node
  host="$(hostname -s)"
  node="$(slurmd -C | head -1 | sed "s/^NodeName=[^ ]*/NodeName=$host NodeAddr=127.0.0.1/")"
  cat <<EOF
$MARK: a one-node Slurm for its tests.
ClusterName=harvest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# A job credential lives 20 s (Slurm's default, 120 s, is also how long a requeued job waits
# before it may start again: a test requeues its tasks).
AuthInfo=cred_expire=20
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
# No cgroups: a container may not give them.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# Finished jobs stay visible to scontrol for 10 minutes (a test reads their state and restarts).
MinJobAge=600
$node State=UNKNOWN
# harvest waits on the network, not the CPU: several tasks may share one.
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}

write_conf() {
  if [ -e "$CONF" ] && ! ours; then
    die "$CONF exists and is not this script's: start that Slurm, or move it away"
  fi
  mkdir -p /etc/slurm "$LOGS" /var/spool/slurmctld /var/spool/slurmd
  render_conf >"$CONF"
}

up() {
  [ "$(id -u)" = 0 ] || die "needs root (apt, /etc/slurm, the daemons)"
  if command -v scontrol >/dev/null && answers; then
    if ours && [ "$(render_conf)" != "$(cat "$CONF")" ]; then
      log "restarting this script's Slurm with its new slurm.conf"
      down
    else
      log "a Slurm already answers here: left as it is"
      sinfo >&2
      return
    fi
  fi
  install_packages
  start_munge
  write_conf
  pgrep -x slurmctld >/dev/null || slurmctld
  pgrep -x slurmd >/dev/null || slurmd
  local host tries=0
  host="$(hostname -s)"
  until answers && sinfo -h -n "$host" -o %T | grep -qE '^(idle|mixed|allocated)'; do
    tries=$((tries + 1))
    if [ $tries -eq 10 ]; then
      # A node the controller remembers as down (an earlier run of this script) comes back.
      scontrol update NodeName="$host" State=RESUME 2>/dev/null || true
    fi
    if [ $tries -gt 60 ]; then
      tail -n 20 "$LOGS/slurmctld.log" "$LOGS/slurmd.log" >&2 || true
      die "Slurm did not come up in 30 s (logs above)"
    fi
    sleep 0.5
  done
  sinfo >&2
}

down() {
  local pids=() d p
  for d in slurmd slurmctld; do
    if [ -f "/run/$d.pid" ] && p="$(cat "/run/$d.pid")" && kill "$p" 2>/dev/null; then
      pids+=("$p")
    fi
  done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
  done
  log "slurmd and slurmctld stopped (munged left running)"
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) die "usage: $0 [up|down]" ;;
esac
