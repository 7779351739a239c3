#!/usr/bin/env bash
# Makes the Dockerfile's two base images locally, for a host where Docker Hub cannot be
# reached but Debian's mirror can (this project's workplace): a Debian bookworm root made by
# debootstrap (minbase) stands in for debian:bookworm-slim, and the same root with gcc and
# this host's rustup toolchain stands in for rust:1-bookworm. Then:
#   docker build --build-arg RUNTIME_IMAGE=runner-local/bookworm \
#                --build-arg BUILDER_IMAGE=runner-local/rust-bookworm -t runner .
# Needs root, debootstrap (apt-get install debootstrap), a running dockerd, rustup.
set -euo pipefail
work=${WORK:-/tmp/runner-local-bases}
toolchain=${TOOLCHAIN:-$(rustc --print sysroot)}
mkdir -p "$work"
if [ ! -x "$work/rootfs/bin/sh" ]; then
  debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian
fi
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
tar -C "$work/rootfs" -c . | docker import \
  --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - runner-local/bookworm
echo "made runner-local/bookworm"

# The builder: gcc and libc headers (ring builds C), git (the build script names the commit),
# and the toolchain under /usr/local/rust, as rust:1-bookworm keeps it under /usr/local.
container=$(docker create runner-local/bookworm sleep infinity)
trap 'docker rm -f "$container" >/dev/null' EXIT
docker start "$container" >/dev/null
docker exec "$container" sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev ca-certificates git >/dev/null && rm -rf /var/lib/apt/lists/*'
# A host that reaches crates.io through a TLS-inspecting proxy trusts that proxy's CA in
# /usr/local/share/ca-certificates: the builder trusts what the host trusts (the builder
# only; the runtime image gets none of it).
for ca in /usr/local/share/ca-certificates/*.crt; do
  [ -e "$ca" ] && docker cp "$ca" "$container:/usr/local/share/ca-certificates/"
done
docker exec "$container" update-ca-certificates >/dev/null
docker exec "$container" mkdir -p /usr/local/rust
tar -C "$toolchain" --exclude=./share/doc --exclude=./lib/rustlib/src -c . \
  | docker exec -i "$container" tar -C /usr/local/rust -x
docker exec "$container" /usr/local/rust/bin/cargo --version
docker commit --change 'ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV CARGO_HOME=/usr/local/cargo' --change 'CMD ["/bin/bash"]' \
  "$container" runner-local/rust-bookworm >/dev/null
echo "made runner-local/rust-bookworm"

# Prometheus for the compose file (PROMETHEUS_IMAGE=runner-local/prometheus): Debian's
# package, laid out as prom/prometheus is (entrypoint the server, data in /prometheus).
docker build -q -t runner-local/prometheus - <<'DOCKERFILE'
FROM runner-local/bookworm
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
 && rm -rf /var/lib/apt/lists/* && install -d -o prometheus -g prometheus /prometheus
USER prometheus
WORKDIR /prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
DOCKERFILE
echo "made runner-local/prometheus"
# Grafana has no Debian package: the compose file's grafana service needs Docker Hub (or a
# registry mirror) for grafana/grafana.
