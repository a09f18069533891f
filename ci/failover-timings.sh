#!/usr/bin/env bash
# Measures an HA formation's life on this machine (pg_auto_failover: see
# docs/database.md, "An HA formation"), N times: the start until a primary
# and a secondary, a controlled failover until the first write on the new
# primary, the formation settling again, a hard kill of the primary until
# the first write, the killed node's rejoin, and the teardown. Prints each
# run, then the median and the maximum of each figure.
#
#   bash ci/failover-timings.sh [--runs 5]
#
# Needs pg_autoctl and the pgautofailover extension (Debian's
# pg-auto-failover-cli and postgresql-15-auto-failover), and root or the
# postgres user.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

runs=5
while [ $# -gt 0 ]; do
	case "$1" in
	--runs) runs=$2; shift 2 ;;
	--runs=*) runs=${1#--runs=}; shift ;;
	*) echo "usage: $0 [--runs N]" >&2; exit 2 ;;
	esac
done
case "$runs" in ''|*[!0-9]*|0) echo "--runs must be a positive number, not '$runs'" >&2; exit 2 ;; esac

# The figures depend on what else the machine does: say how busy it was.
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
trap 'echo "load average after: $(cut -d" " -f1-3 /proc/loadavg)"' EXIT
# HARMLESS_REQUIRE_HA: fail, not skip, where no formation can be made.
HARMLESS_REQUIRE_HA=1 go test -count=1 -timeout "$((runs * 5 + 5))m" -run '^TestFormationTimings$' -v \
	./internal/provision -timings-runs "$runs" |
	grep -E '^(--- |ok|FAIL)|timings_test.go:[0-9]+: (run [0-9]+|[a-z-]+ +median)' | sed -E 's/^ +timings_test.go:[0-9]+: /  /'
