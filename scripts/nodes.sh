#!/bin/bash
# nodes.sh — boot N real-systemd Debian "web nodes" with systemd-nspawn on a
# host whose PID 1 is not systemd. Every node bind-mounts one shared folder
# at /srv/shared, the stand-in for CephFS.
#
#   nodes.sh rootfs                 build the cached rootfs if missing
#   nodes.sh up N [FIRST]           boot node$FIRST..node$(FIRST+N-1) (FIRST defaults to 1)
#   nodes.sh down [NODE...]         halt nodes (all by default), unmount, remove cgroups
#   nodes.sh kill NODE              kill a node at once (SIGKILL to every process in it), as a crash would
#   nodes.sh exec NODE CMD...       run CMD inside NODE
#   nodes.sh pid NODE               host PID of NODE's systemd
#   nodes.sh bus NODE               a DBUS_SYSTEM_BUS_ADDRESS usable from the host
#   nodes.sh root NODE              host path of NODE's root filesystem
#   nodes.sh list                   names of running nodes
#
# Env: HOSTCRON_CACHE (rootfs cache, default /var/cache/hostcron),
#      NODES_DIR (per-run state, default /run/hostcron-nodes),
#      SHARED (bound to /srv/shared, default $NODES_DIR/shared),
#      EXTRA_NSPAWN_ARGS (e.g. --bind-ro=/path:/opt/hostcron), BOOT_TIMEOUT (s, 60).
set -euo pipefail

CACHE=${HOSTCRON_CACHE:-/var/cache/hostcron}
ROOTFS=$CACHE/rootfs-bookworm-v3
NODES_DIR=${NODES_DIR:-/run/hostcron-nodes}
SHARED=${SHARED:-$NODES_DIR/shared}
BOOT_TIMEOUT=${BOOT_TIMEOUT:-60}
# Packages every node needs: systemd and D-Bus, tzdata for OnCalendar zones,
# util-linux for flock/nsenter, ca-certificates for the agent's TLS,
# faketime and iptables for the fault tier (clock skew, dropped traffic),
# php8.2-cli (pulls php8.2-opcache) for the PHP workload under the hardened
# unit (tests/e2e/workload_test.go). Changing this list: bump the cache key.
PACKAGES=systemd,systemd-sysv,dbus,util-linux,tzdata,ca-certificates,procps,faketime,iptables,php8.2-cli
if [ -f /sys/fs/cgroup/unified/cgroup.procs ]; then   # hybrid host
  CG1=/sys/fs/cgroup/systemd; CG2=/sys/fs/cgroup/unified
  V1_CONTROLLERS="memory pids"
  for c in cpu,cpuacct cpu cpuacct; do [ -d "/sys/fs/cgroup/$c" ] && [ ! -L "/sys/fs/cgroup/$c" ] && V1_CONTROLLERS="$V1_CONTROLLERS $c"; done
else                                                  # pure cgroup v2 host
  CG1=; CG2=/sys/fs/cgroup; V1_CONTROLLERS=
fi

# Several clusters may run at once (one per NODES_DIR): their machine names
# and cgroups carry a tag derived from NODES_DIR so they never collide.
TAG=$(printf '%s' "$NODES_DIR" | cksum | cut -c1-8 | tr -d ' ')
CGP=hostcron-nodes/$TAG

log() { echo "[nodes $(date +%T)] $*" >&2; }

ensure_tools() {
  command -v systemd-nspawn >/dev/null && command -v debootstrap >/dev/null && return 0
  log "installing systemd-container debootstrap"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q systemd-container debootstrap >/dev/null
}

build_rootfs() {
  [ -x "$ROOTFS/lib/systemd/systemd" ] && return 0
  mkdir -p "$CACHE"
  exec 8>"$CACHE/.rootfs.lock"; flock 8          # one debootstrap at a time
  [ -x "$ROOTFS/lib/systemd/systemd" ] && return 0
  ensure_tools
  local mirror r=$ROOTFS.tmp
  # the mirror comes from the host's apt configuration, not a hard-coded host
  mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' | awk '$2=="bookworm"{print $1; exit}')
  if [ -z "$mirror" ]; then apt-get update -q >/dev/null
    mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' | awk '$2=="bookworm"{print $1; exit}'); fi
  [ -n "$mirror" ] || { log "no bookworm mirror in apt's configuration"; exit 1; }
  log "debootstrap from $mirror (once; cached in $ROOTFS)"
  rm -rf "$r"
  debootstrap --variant=minbase --include=$PACKAGES bookworm "$r" "$mirror" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
  rm -f "$r/etc/hostname"; : >"$r/etc/machine-id"; rm -rf "$r/var/log/journal"/* "$r/var/cache/apt/archives"/*.deb
  # units that are useless or noisy in a container node
  for u in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
           fstrim.timer e2scrub_reap.service getty@tty1.service console-getty.service \
           systemd-pstore.service; do
    ln -sf /dev/null "$r/etc/systemd/system/$u"
  done
  mkdir -p "$r/srv/shared" "$r/etc/systemd/journald.conf.d"
  # persistent journal so a node agent's cursor survives its restart
  printf '[Journal]\nStorage=persistent\nRateLimitBurst=0\n' >"$r/etc/systemd/journald.conf.d/hostcron.conf"
  mv "$r" "$ROOTFS"
}

leader_of() { # host PID of systemd inside node $1
  local npid; npid=$(cat "$NODES_DIR/$1/nspawn.pid" 2>/dev/null) || return 0
  pgrep -P "$npid" -x systemd || true
}

start_node() {
  local n=$1 d=$NODES_DIR/$1
  mkdir -p "$d/upper" "$d/work" "$d/root"
  mountpoint -q "$d/root" || mount -t overlay overlay \
    -o "lowerdir=$ROOTFS,upperdir=$d/upper,workdir=$d/work" "$d/root"
  echo "$n" >"$d/root/etc/hostname"
  [ -s "$d/root/etc/machine-id" ] || tr -d '-' </proc/sys/kernel/random/uuid >"$d/root/etc/machine-id"
  # one cgroup per node; nspawn --keep-unit puts payload/ and supervisor/ under it.
  # On a hybrid host the resource controllers live in v1 hierarchies: give each
  # node its own memory, pids and cpu cgroup too, which the node's systemd may
  # write (API VFS writable, below), so MemoryMax= and CPUQuota= take effect.
  local cgs="$CG2/$CGP/$n"; [ -n "$CG1" ] && cgs="$cgs $CG1/$CGP/$n"
  local c; for c in $V1_CONTROLLERS; do cgs="$cgs /sys/fs/cgroup/$c/$CGP/$n"; done
  # shellcheck disable=SC2086
  mkdir -p $cgs
  setsid bash -c '
    for c in '"$cgs"'; do echo $$ >"$c/cgroup.procs"; done
    exec env '"${V1_CONTROLLERS:+SYSTEMD_NSPAWN_API_VFS_WRITABLE=1}"' systemd-nspawn --quiet --boot --register=no --keep-unit --console=passive \
      -D "'"$d/root"'" -M "'"h$TAG-$n"'" --hostname="'"$n"'" \
      --bind="'"$SHARED"'":/srv/shared '"${EXTRA_NSPAWN_ARGS:-}"'
  ' </dev/null >"$d/nspawn.log" 2>&1 &
  echo $! >"$d/nspawn.pid"
}

wait_node() {
  local n=$1 p="" t=0 st=""
  while [ $t -lt $((BOOT_TIMEOUT * 4)) ]; do
    p=$(leader_of "$n")
    if [ -n "$p" ]; then
      st=$(nsenter -t "$p" -a systemctl is-system-running 2>/dev/null || true)
      case $st in running|degraded) log "$n: $st after $((t / 4))s"; return 0;; esac
    fi
    kill -0 "$(cat "$NODES_DIR/$n/nspawn.pid")" 2>/dev/null || { log "$n: nspawn died"; cat "$NODES_DIR/$n/nspawn.log" >&2; return 1; }
    sleep 0.25; t=$((t+1))
  done
  log "$n: not running after ${BOOT_TIMEOUT}s (state '$st')"; return 1
}

stop_node() {
  local n=$1 d=$NODES_DIR/$1 npid
  # Only the node's own nspawn (or the shell about to exec it), whose
  # command line names its root: a run killed without its teardown leaves
  # the file behind, and after a restart its PID may be anyone's.
  if [ -f "$d/nspawn.pid" ] && npid=$(cat "$d/nspawn.pid") && tr '\0' ' ' 2>/dev/null <"/proc/$npid/cmdline" | grep -qF -- "$d/root"; then
    kill -TERM "$npid"                       # nspawn asks the node's systemd to halt
    for _ in $(seq 1 40); do kill -0 "$npid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$npid" 2>/dev/null && { kill -TERM "$npid"; sleep 1; }   # second TERM: immediate
    kill -0 "$npid" 2>/dev/null && kill -KILL "$npid"
  fi
  rm -f "$d/nspawn.pid"
  # Whatever is left in the node's cgroup goes too: a node whose nspawn
  # was killed (a run reaped after SIGKILL) keeps its systemd running.
  kill_cgroup "$n"
  local cg
  if mountpoint -q "$d/root"; then umount "$d/root" 2>/dev/null || umount -l "$d/root"; fi
  local c v1=(); for c in $V1_CONTROLLERS; do v1+=("/sys/fs/cgroup/$c/$CGP/$n"); done
  for cg in "$CG2/$CGP/$n" ${CG1:+"$CG1/$CGP/$n"} "${v1[@]}"; do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

# kill_cgroup: SIGKILL every process in the node's cgroups, and wait (up
# to 5 s) for them to be gone, so the cgroups can be removed.
kill_cgroup() {
  local n=$1 cg pid left
  for _ in $(seq 1 50); do
    left=
    for cg in "$CG2/$CGP/$n" ${CG1:+"$CG1/$CGP/$n"}; do
      [ -d "$cg" ] || continue
      for pid in $(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; left=1; done
    done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
}

# kill_node: SIGKILL every process of the node, so nothing in it (no
# ExecStopPost, no shutdown) runs; then the usual cleanup.
kill_node() {
  kill_cgroup "$1"
  stop_node "$1"
}

cmd=${1:-}; shift || true
case $cmd in
  rootfs) build_rootfs ;;
  up)
    N=${1:-3}; FIRST=${2:-1}
    build_rootfs
    mkdir -p "$SHARED" "$NODES_DIR"
    # nspawn keeps per-machine state in /run/systemd/nspawn and refuses to
    # remove it when /run is not a tmpfs (true on these hosts)
    mkdir -p /run/systemd/nspawn
    mountpoint -q /run/systemd/nspawn || mount -t tmpfs tmpfs /run/systemd/nspawn
    last=$((FIRST + N - 1))
    for i in $(seq "$FIRST" "$last"); do start_node "node$i"; done
    for i in $(seq "$FIRST" "$last"); do wait_node "node$i"; done ;;
  down)
    if [ $# -gt 0 ]; then for n in "$@"; do stop_node "$n"; done; exit 0; fi
    for d in "$NODES_DIR"/node*/; do [ -d "$d" ] && stop_node "$(basename "$d")"; done
    for root in "$CG2" ${CG1:+"$CG1"} $(for c in $V1_CONTROLLERS; do echo "/sys/fs/cgroup/$c"; done); do
      rmdir "$root/$CGP" "$root/hostcron-nodes" 2>/dev/null || true   # the parent only once empty
    done
    # the tmpfs is shared by all clusters: unmount it when no node is left
    # (not when reaping a dead run's nodes, KEEP_NSPAWN_TMPFS=1: a cluster
    # starting beside may not have populated it yet)
    if [ "${KEEP_NSPAWN_TMPFS:-0}" != 1 ] && mountpoint -q /run/systemd/nspawn && [ -z "$(ls -A /run/systemd/nspawn/propagate 2>/dev/null)" ]; then
      umount /run/systemd/nspawn 2>/dev/null || true
    fi
    [ "${KEEP_NODES:-0}" = 1 ] || rm -rf "$NODES_DIR" ;;
  kill) kill_node "$1" ;;
  exec) n=$1; shift; p=$(leader_of "$n"); [ -n "$p" ] || { log "$n is not running"; exit 1; }
        exec nsenter -t "$p" -a "$@" ;;
  pid)  leader_of "$1" ;;
  bus)  echo "unix:path=/proc/$(leader_of "$1")/root/run/dbus/system_bus_socket" ;;
  root) echo "$NODES_DIR/$1/root" ;;
  list) for d in "$NODES_DIR"/node*/; do [ -f "$d/nspawn.pid" ] && basename "$d"; done; true ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
