#!/usr/bin/env bash
# Build a PostgreSQL container image without any container registry.
#
#   ci/build-postgres-image.sh [--force] [TAG]      (default TAG: harmless/postgres:15-bookworm)
#
# For air-gapped machines that have a Docker engine and a Debian mirror but no
# Docker Hub: debootstrap a minimal Debian bookworm, install postgresql-15 into
# it from the same mirror apt uses on this machine, trim it, and `docker
# import` the tree with an entrypoint that behaves like the official postgres
# image's (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB,
# POSTGRES_HOST_AUTH_METHOD, POSTGRES_INITDB_ARGS, /docker-entrypoint-initdb.d,
# and "database system is ready to accept connections" logged twice on first
# start, which the testcontainers postgres module waits for).
#
# One difference, on purpose: the official image leaves initdb's default of
# trust for the unix socket and for 127.0.0.1 and ::1 inside the container;
# this one asks POSTGRES_HOST_AUTH_METHOD (default scram-sha-256) everywhere,
# so that no connection, from wherever it comes, gets in without the
# password.
#
# Use it with: HARMLESS_IMAGE=harmless/postgres:15-bookworm
#
# Skips the build when TAG already exists, unless --force.
# Environment: DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR override the mirrors read
# from /etc/apt.
set -euo pipefail

force=false
tag=harmless/postgres:15-bookworm
for arg in "$@"; do
	case $arg in
	--force) force=true ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	-*)
		echo "unknown option $arg" >&2
		exit 2
		;;
	*) tag=$arg ;;
	esac
done

suite=bookworm
pg_major=15
say() { printf 'build-postgres-image: %s\n' "$*" >&2; }

old_id=$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
if ! $force && [[ -n $old_id ]]; then
	say "$tag already exists (use --force to rebuild)"
	exit 0
fi
start=$SECONDS

# --- tools ---------------------------------------------------------------
if ! command -v debootstrap >/dev/null 2>&1; then
	say "installing debootstrap"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

# --- which mirror --------------------------------------------------------
# The first URI in /etc/apt that serves the $suite suite (resp. $suite-security).
# Understands deb822 *.sources files and one-line *.list files.
apt_uri() { # $1: suite
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[[ -r $f ]] || continue
		if [[ $f == *.sources ]]; then
			# deb822: paragraphs with URIs: and Suites: fields.
			awk -v want="$1" '
				BEGIN { RS = ""; FS = "\n" }
				{
					uris = ""; hit = 0
					for (i = 1; i <= NF; i++) {
						if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); uris = $i }
						if ($i ~ /^Suites:/) { n = split($i, s, /[ \t]+/); for (j = 2; j <= n; j++) if (s[j] == want) hit = 1 }
					}
					if (hit && uris != "") { split(uris, u, /[ \t]+/); print u[1]; exit }
				}' "$f"
		else
			# one-line: deb [options] URI SUITE COMPONENTS...
			awk -v want="$1" '
				$1 == "deb" {
					i = 2
					if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
					if ($(i + 1) == want) { print $i; exit }
				}' "$f"
		fi
	done | head -n 1
}
mirror=${DEBIAN_MIRROR:-$(apt_uri "$suite")}
security=${DEBIAN_SECURITY_MIRROR:-$(apt_uri "$suite-security")}
mirror=${mirror:-http://deb.debian.org/debian}
say "mirror: $mirror${security:+, security: $security}"

# --- rootfs --------------------------------------------------------------
work=$(mktemp -d /var/tmp/harmless-rootfs.XXXXXX)
rootfs=$work/rootfs
cleanup() {
	umount "$rootfs/proc" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

say "debootstrap $suite (minbase) into $rootfs"
debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
	tail -n 30 "$work/debootstrap.log" >&2
	exit 1
}

# Same suites as the host, so the server is the current point release.
{
	echo "deb $mirror $suite main"
	echo "deb $mirror $suite-updates main"
	[[ -n $security ]] && echo "deb $security $suite-security main"
} >"$rootfs/etc/apt/sources.list"

# No services started inside the chroot, and no "main" cluster created by
# postgresql-common: the entrypoint creates the cluster on first start.
printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
chmod +x "$rootfs/usr/sbin/policy-rc.d"
mkdir -p "$rootfs/etc/postgresql-common/createcluster.d"
echo "create_main_cluster = false" >"$rootfs/etc/postgresql-common/createcluster.d/harmless.conf"

say "installing postgresql-$pg_major"
mount -t proc proc "$rootfs/proc"
chroot "$rootfs" /bin/sh -ec "
	export DEBIAN_FRONTEND=noninteractive LC_ALL=C
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends postgresql-$pg_major
" >"$work/apt.log" 2>&1 || {
	tail -n 30 "$work/apt.log" >&2
	exit 1
}
umount "$rootfs/proc"

# --- trim ----------------------------------------------------------------
# Documentation, translations, locale sources (the cluster is made with
# --no-locale), package lists and caches; and the LLVM JIT with the libraries
# only it uses (libLLVM, libz3): JIT is optional (PostgreSQL runs without it
# when llvmjit.so is absent) and was by far the largest piece.
say "trimming"
rm -f "$rootfs/usr/sbin/policy-rc.d"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/cache/debconf/*-old \
	"$rootfs"/var/log/* "$rootfs"/tmp/* \
	"$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
	"$rootfs"/usr/share/lintian "$rootfs"/usr/share/locale/* "$rootfs"/usr/share/i18n \
	"$rootfs/usr/lib/postgresql/$pg_major/lib/llvmjit"* "$rootfs/usr/lib/postgresql/$pg_major/lib/bitcode" \
	"$rootfs"/usr/lib/*-linux-gnu/libLLVM-*.so* "$rootfs"/usr/lib/*-linux-gnu/libz3.so* \
	"$rootfs/var/lib/postgresql/$pg_major" "$rootfs/etc/postgresql/$pg_major"

# --- entrypoint ----------------------------------------------------------
install -m 0755 /dev/stdin "$rootfs/usr/local/bin/docker-entrypoint.sh" <<'ENTRYPOINT'
#!/bin/bash
# Entrypoint of harmless/postgres, modelled on the official image's
# docker-entrypoint.sh: honours POSTGRES_USER (default postgres),
# POSTGRES_PASSWORD, POSTGRES_DB (default $POSTGRES_USER),
# POSTGRES_HOST_AUTH_METHOD, POSTGRES_INITDB_ARGS and runs
# /docker-entrypoint-initdb.d/*.sh|*.sql on first start.
set -Eeuo pipefail

# "docker run IMAGE -c fsync=off" means "postgres -c fsync=off".
if [[ ${1:-} == -* ]]; then set -- postgres "$@"; fi
if [[ ${1:-} != postgres ]]; then exec "$@"; fi

export PGDATA=${PGDATA:-/var/lib/postgresql/data}
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}

# As root: fix ownership, then run this script again as postgres.
if [[ $(id -u) == 0 ]]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown -R postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 700 "$PGDATA"
	chmod 2777 /var/run/postgresql
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
fi

if [[ ! -s $PGDATA/PG_VERSION ]]; then
	auth=${POSTGRES_HOST_AUTH_METHOD:-}
	if [[ -z ${POSTGRES_PASSWORD:-} && $auth != trust ]]; then
		cat >&2 <<-'EOM'
		Error: Database is uninitialized and superuser password is not specified.
		       Set POSTGRES_PASSWORD to a non-empty value for the superuser, or
		       POSTGRES_HOST_AUTH_METHOD=trust to allow all connections without a password.
		EOM
		exit 1
	fi
	auth=${auth:-scram-sha-256}

	# The password goes to initdb through a file only postgres can read,
	# removed right after.
	pwfile=$(mktemp)
	printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pwfile"
	# Every line of pg_hba.conf asks $auth, the socket's and loopback's too
	# (initdb's default there is trust). POSTGRES_INITDB_ARGS come last, so
	# that they can still say otherwise.
	# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of words
	initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-host="$auth" --auth-local="$auth" \
		-E UTF8 --no-locale ${POSTGRES_INITDB_ARGS:-}
	rm -f "$pwfile"
	{
		echo
		echo "host all all all $auth"
	} >>"$PGDATA/pg_hba.conf"
	echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"

	# Temporary server on the unix socket only, for the init scripts; the
	# socket asks for the password too.
	export PGPASSWORD=${PGPASSWORD:-${POSTGRES_PASSWORD:-}}
	pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
	psql=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
	if [[ $POSTGRES_DB != postgres ]]; then
		"${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
	fi
	shopt -s nullglob
	for f in /docker-entrypoint-initdb.d/*; do
		case $f in
		*.sh) echo "running $f"; . "$f" ;;
		*.sql) echo "running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
		*) echo "ignoring $f" ;;
		esac
	done
	pg_ctl -D "$PGDATA" -m fast -w stop
	unset PGPASSWORD
	echo
	echo 'PostgreSQL init process complete; ready for start up.'
	echo
fi

exec "$@"
ENTRYPOINT
mkdir -p "$rootfs/docker-entrypoint-initdb.d"

# --- import --------------------------------------------------------------
# `docker import` sets the configuration, all but STOPSIGNAL (an engine before
# 23 refuses it there): a one-line build on top adds that. SIGINT, as in the
# official image, is PostgreSQL's fast shutdown; the default SIGTERM is a
# smart shutdown, which waits for every client to disconnect.
say "importing as $tag"
# Under a temporary name first, so that a failure never leaves a half-made $tag.
tmp_tag=harmless-import-tmp:$$
tar --numeric-owner -C "$rootfs" -c . | docker import \
	--change "ENV PATH=/usr/lib/postgresql/$pg_major/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
	--change "ENV PGDATA=/var/lib/postgresql/data" \
	--change "ENV LANG=C.UTF-8" \
	--change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
	--change 'CMD ["postgres"]' \
	--change 'EXPOSE 5432' \
	--change "LABEL dev.harmless.image=postgres dev.harmless.postgres-major=$pg_major" \
	- "$tmp_tag" >/dev/null
# The legacy builder needs no buildx plugin and, FROM a local image, no
# registry. Its output (a deprecation notice) is shown only on failure.
printf 'FROM %s\nSTOPSIGNAL SIGINT\n' "$tmp_tag" |
	DOCKER_BUILDKIT=0 docker build -q -t "$tag" - >"$work/build.log" 2>&1 || {
	cat "$work/build.log" >&2
	docker rmi "$tmp_tag" >/dev/null 2>&1 || true
	exit 1
}
docker rmi "$tmp_tag" >/dev/null # only the name: the image is $tag's parent

# A rebuild leaves the previous image nameless: remove it unless in use.
if [[ -n $old_id ]]; then docker rmi "$old_id" >/dev/null 2>&1 || true; fi

size=$(docker image inspect --format '{{.Size}}' "$tag")
say "built $tag ($((size / 1024 / 1024)) MiB) in $((SECONDS - start))s"
