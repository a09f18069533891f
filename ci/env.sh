# shellcheck shell=bash
# Environment for the container path of internal/provision in CI.
# Source it after ci/start-docker.sh and ci/build-postgres-image.sh:
#
#   . ci/env.sh
#
# TESTCONTAINERS_RYUK_DISABLED: testcontainers-go's reaper image comes from
#   Docker Hub, which is not reachable; harmless removes its own containers
#   (labels dev.harmless.owner-*), so the reaper is not needed.
# HARMLESS_IMAGE: the image ci/build-postgres-image.sh builds, instead of
#   postgres:17-alpine, which would need Docker Hub.
export TESTCONTAINERS_RYUK_DISABLED=true
export HARMLESS_IMAGE=${HARMLESS_IMAGE:-harmless/postgres:15-bookworm}
