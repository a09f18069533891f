#!/usr/bin/env bash
# Does `harmless soak` measure the implementation or the harness? Runs, on one
# server with the same number of clients, the reference adapter's delivery
# transaction through pgbench and `harmless soak --adapter reference` without
# a nemesis, and prints the ratio of their throughputs (docs/soak-benchmark.md).
#
#   bash ci/bench-soak.sh [--clients "2 8"] [--duration 30s] [--rounds 1] [--dsn DSN]
#
# The figures are a benchmark, not a test: a ratio below the goal is printed,
# never an exit status. The exit status is non-zero only when something
# failed to run. The soak needs at least 2 instances: for a client count of 1
# only pgbench runs. With --rounds R, pgbench and the soak alternate R times
# per client count and the verdict is on the median ratio: on a machine
# shared with other work, load that comes and goes then weighs on both.
set -euo pipefail

goal=0.8
clients="2 8"
duration=30s
rounds=1
dsn=${HARMLESS_DSN:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}

usage() { echo "usage: bash ci/bench-soak.sh [--clients \"2 8\"] [--duration 30s] [--rounds 1] [--dsn DSN]" >&2; }
die() { echo "bench-soak: $*" >&2; exit 2; }

while (($#)); do
	case $1 in
	--clients) (($# >= 2)) || { usage; exit 2; }; clients=$2; shift 2 ;;
	--duration) (($# >= 2)) || { usage; exit 2; }; duration=$2; shift 2 ;;
	--rounds) (($# >= 2)) || { usage; exit 2; }; rounds=$2; shift 2 ;;
	--dsn) (($# >= 2)) || { usage; exit 2; }; dsn=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage; die "unknown argument: $1" ;;
	esac
done

# pgbench -T takes whole seconds; the soak takes a Go duration. Accept what
# both can express: N, Ns, Nm or NmMs.
if [[ $duration =~ ^([0-9]+)m(([0-9]+)s)?$ ]]; then
	secs=$((10#${BASH_REMATCH[1]} * 60 + 10#${BASH_REMATCH[3]:-0}))
elif [[ $duration =~ ^([0-9]+)s?$ ]]; then
	secs=$((10#${BASH_REMATCH[1]}))
else
	die "--duration must be whole seconds or minutes (30s, 2m, 1m30s), not $duration"
fi
((secs > 0)) || die "--duration must be positive"
[[ -n ${clients// /} ]] || die "--clients is empty"
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds takes a positive whole number, not $rounds"
for n in $clients; do
	[[ $n =~ ^[1-9][0-9]*$ ]] || die "--clients takes positive whole numbers, not $n"
done

declare -A tps soaked

# pgbench and psql: in PATH, else PostgreSQL's Debian location.
find_pg() {
	local p
	if p=$(command -v "$1"); then echo "$p"; return; fi
	for p in /usr/lib/postgresql/*/bin/"$1"; do
		[[ -x $p ]] && { echo "$p"; return; }
	done
	return 1
}
pgbench=$(find_pg pgbench) || die "pgbench not found in PATH nor /usr/lib/postgresql/*/bin (Debian/Ubuntu: apt-get install postgresql-client)"
psql=$(find_pg psql) || die "psql not found in PATH nor /usr/lib/postgresql/*/bin (Debian/Ubuntu: apt-get install postgresql-client)"
command -v go >/dev/null || die "go not found in PATH"
if command -v jq >/dev/null; then
	throughput_of() { jq -er '.throughput' "$1"; }
elif command -v python3 >/dev/null; then
	throughput_of() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["throughput"])' "$1"; }
else
	die "neither jq nor python3 found: one is needed to read the soak's JSON report"
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench=$root/ci/bench
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-soak.XXXXXX")
# Only this schema is ever created or dropped; its name is the benchmark's
# own and random, so it cannot be a user's or another run's.
schema=harmless_bench_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
created=

# The running pgbench or soak, if any: ended on an interrupt, so that the
# trap runs now and not when it finishes on its own. A soak ends its load on
# SIGTERM, drops its own schema and exits.
child=

# run CMD... runs CMD in the background and waits for it, so that a signal
# to this script is handled at once.
run() {
	"$@" &
	child=$!
	local status=0
	wait "$child" || status=$?
	child=
	return "$status"
}

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	if [[ -n $child ]]; then
		kill -TERM "$child" 2>/dev/null || true
		wait "$child" 2>/dev/null || true
	fi
	if [[ -n $created ]]; then
		"$psql" "$dsn" -X -q -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" \
			-c "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" >/dev/null 2>&1 ||
			echo "bench-soak: could not drop schema $schema: drop it by hand" >&2
	fi
	rm -rf "$tmp"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$psql" "$dsn" -X -q -v ON_ERROR_STOP=1 -c "SELECT 1" >/dev/null || die "cannot connect to $dsn"

echo "bench-soak: building harmless" >&2
(cd "$root" && go build -o "$tmp/harmless" ./cmd/harmless) || die "go build failed"

# The schema's tables and the pgbench script, with the same substitutions
# faults.Install makes in faults/plan.sql.
subst() { sed -e "s/{{schema}}/\"$schema\"/g" -e "s/{{ledger}}/\"$schema\".\"harmless_effects\"/g" "$@"; }
subst "$bench/soak-schema.sql" "$root/faults/plan.sql" >"$tmp/setup.sql"
subst "$bench/soak-transaction.sql" >"$tmp/transaction.sql"

# A payload like the soak generator's (about 64 bytes of JSON) and its digest:
# the reference computes the digest in Go for each delivery, so pgbench gets
# it as a parameter rather than computing it in the server.
payload='{"event":123456,"amount_cents":654321,"currency":"EUR","note":"soak"}'
digest=$(printf '%s' "$payload" | sha256sum | cut -d' ' -f1)

# A fresh schema for each run: the soak, too, starts on empty tables.
fresh_schema() {
	if [[ -n $created ]]; then
		"$psql" "$dsn" -X -q -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" \
			-c "DROP SCHEMA \"$schema\" CASCADE" >/dev/null
	fi
	created=1
	"$psql" "$dsn" -X -q -v ON_ERROR_STOP=1 --single-transaction -f "$tmp/setup.sql" >/dev/null
}

# run_pgbench N KEY sets tps[KEY]. Not in a subshell: fresh_schema records
# in $created that the schema exists, for cleanup.
run_pgbench() {
	local n=$1 key=$2 out=$tmp/pgbench-$2.txt
	fresh_schema || die "could not create schema $schema"
	if ! run "$pgbench" -n -M prepared -c "$n" -j "$((n < 2 ? n : 2))" -T "$secs" -f "$tmp/transaction.sql" \
		-D ns=soak -D "digest=\\x$digest" -D "hexdigest=$digest" -D "at=2030-01-01 00:00:00+00" \
		-D attempt=1 -D n=0 "$dsn" >"$out" 2>&1; then
		cat "$out" >&2
		die "pgbench failed with $n clients"
	fi
	awk '/^number of failed transactions:/ && $5 != 0 { bad = 1 } END { exit bad }' "$out" ||
		{ cat "$out" >&2; die "pgbench had failed transactions with $n clients"; }
	# Every transaction must have claimed a new event, as a soak without
	# duplicates does: one marker and one effect each.
	local processed counts
	processed=$(awk '/^number of transactions actually processed:/ { print $6 }' "$out")
	counts=$("$psql" "$dsn" -X -A -t -v ON_ERROR_STOP=1 -c "SELECT (SELECT count(*) FROM \"$schema\".processed_events) || ' ' || (SELECT count(*) FROM \"$schema\".harmless_effects)") ||
		die "could not count the rows pgbench wrote"
	[[ $counts == "$processed $processed" ]] ||
		die "pgbench processed ${processed:-?} transactions but wrote markers and effects $counts: not one new event each"
	tps[$key]=$(awk '/^tps = / { print $3; found = 1 } END { exit !found }' "$out") ||
		{ cat "$out" >&2; die "no tps in pgbench's output"; }
}

# run_soak N KEY sets soaked[KEY].
run_soak() {
	local n=$1 key=$2 status=0
	run "$tmp/harmless" soak --adapter reference --nemesis none --instances "$n" --duration "$duration" \
		--duplicates 0 --conflicts 0 --dsn "$dsn" --json "$tmp/soak-$key.json" \
		>"$tmp/soak-$key.out" 2>"$tmp/soak-$key.err" || status=$?
	if ((status != 0)); then
		cat "$tmp/soak-$key.out" "$tmp/soak-$key.err" >&2
		die "harmless soak with $n instances exited with $status"
	fi
	soaked[$key]=$(throughput_of "$tmp/soak-$key.json") || die "no throughput in the soak's JSON report"
}

# The load average frames the figures: on a shared machine, other work takes
# CPU from the server and the clients alike.
loadavg() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo unknown; }
load_before=$(loadavg)

for n in $clients; do
	for ((r = 1; r <= rounds; r++)); do
		echo "bench-soak: pgbench, $n clients, ${secs}s (round $r of $rounds)" >&2
		run_pgbench "$n" "$n.$r"
		if ((n >= 2)); then
			echo "bench-soak: harmless soak, $n instances, $duration (round $r of $rounds)" >&2
			run_soak "$n" "$n.$r"
		fi
	done
done

# median reads numbers, one a line, and prints their median.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo
printf '%-8s %6s %14s %18s %7s\n' clients round "pgbench tps" "soak deliveries/s" ratio
lines=()
for n in $clients; do
	ratios=()
	for ((r = 1; r <= rounds; r++)); do
		key=$n.$r
		if [[ -z ${soaked[$key]:-} ]]; then
			printf '%-8s %6s %14.1f %18s %7s\n' "$n" "$r" "${tps[$key]}" n/a n/a
			continue
		fi
		ratio=$(awk -v s="${soaked[$key]}" -v p="${tps[$key]}" 'BEGIN { printf "%.2f", (p > 0 ? s / p : 0) }')
		ratios+=("$ratio")
		printf '%-8s %6s %14.1f %18.1f %7s\n' "$n" "$r" "${tps[$key]}" "${soaked[$key]}" "$ratio"
	done
	if ((${#ratios[@]} == 0)); then
		lines+=("$n clients: no soak (it needs at least 2 instances)")
		continue
	fi
	ratio=$(printf '%s\n' "${ratios[@]}" | median)
	if awk -v r="$ratio" -v g="$goal" 'BEGIN { exit !(r >= g) }'; then
		verdict="meets the $goal goal"
	else
		verdict="below the $goal goal"
	fi
	what=soak/pgbench
	((rounds > 1)) && what="median soak/pgbench of $rounds rounds"
	lines+=("$n clients: $what = $ratio, $verdict")
done
echo
printf '%s\n' "${lines[@]}"
echo "machine: $(nproc 2>/dev/null || echo '?') CPUs, load average $load_before before, $(loadavg) after"
