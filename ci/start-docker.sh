#!/usr/bin/env bash
# Make a Docker engine available on this machine, for the container path of
# internal/provision (testcontainers-go).
#
# Idempotent: does nothing when `docker info` already works. Otherwise it
#   1. installs docker.io with apt when dockerd is missing,
#   2. starts dockerd by hand in the background (there is no systemd here),
#      logging to $DOCKERD_LOG,
#   3. waits, bounded, until `docker info` answers.
#
# Flags: plain `dockerd` works on the CI machines (overlay2 on ext4, iptables
# and the docker0 bridge available). DOCKERD_FLAGS overrides them for sandboxes
# that need e.g. "--iptables=false --bridge=none --storage-driver=vfs".
#
# Environment:
#   DOCKERD_LOG      dockerd's log file        (default /var/log/harmless-dockerd.log)
#   DOCKERD_FLAGS    extra flags for dockerd   (default none)
#   DOCKERD_WAIT     seconds to wait for it    (default 60)
set -euo pipefail

log=${DOCKERD_LOG:-/var/log/harmless-dockerd.log}
wait_s=${DOCKERD_WAIT:-60}
read -r -a flags <<<"${DOCKERD_FLAGS:-}"

say() { printf 'start-docker: %s\n' "$*" >&2; }

if docker info >/dev/null 2>&1; then
	say "engine already running ($(docker info --format '{{.ServerVersion}}' 2>/dev/null))"
	exit 0
fi

# 1. Install the engine (Debian's package; no other registry is reachable).
if ! command -v dockerd >/dev/null 2>&1; then
	say "installing docker.io"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi

# 2. Start dockerd unless one is already starting (e.g. a concurrent run of
# this script): then only wait for it.
if pgrep -x dockerd >/dev/null 2>&1; then
	say "dockerd is running but not answering yet; waiting"
else
	say "starting dockerd${flags[*]:+ ${flags[*]}} (log: $log)"
	mkdir -p "$(dirname "$log")"
	# setsid: dockerd must outlive this script and must not get the
	# terminal's signals.
	setsid dockerd "${flags[@]}" >>"$log" 2>&1 </dev/null &
fi

# 3. Wait until the API answers.
deadline=$((SECONDS + wait_s))
until docker info >/dev/null 2>&1; do
	if ((SECONDS >= deadline)); then
		say "dockerd did not answer within ${wait_s}s; last lines of $log:"
		tail -n 30 "$log" >&2 || true
		exit 1
	fi
	sleep 0.5
done
say "engine ready: $(docker info --format 'Docker {{.ServerVersion}}, storage {{.Driver}}, cgroup {{.CgroupVersion}}')"
