# syntax=docker/dockerfile:1
# The runner (the Bank's node, client and operator commands) in a small image.
#   docker build --build-arg GIT_COMMIT=$(git rev-parse HEAD) -t runner .
#   docker run --rm runner --version
# A node: the cluster file at /etc/runner/cluster.toml (ENGINE_CLUSTER_FILE), its data_dir
# under the volume /data; deploy/compose/compose.yml runs three. Without Docker Hub, make the
# two bases with deploy/docker/local-bases.sh and pass them as BUILDER_IMAGE/RUNTIME_IMAGE.
# notes/decisions/packaging.md says why each choice.

ARG BUILDER_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${BUILDER_IMAGE} AS build
WORKDIR /src
# The workspace's crates only (not deploy/, notes/): a change to the packaging does not
# rebuild the binary. README.md is the Bank crate's documentation (include_str!).
COPY Cargo.toml Cargo.lock README.md ./
COPY net net
COPY engine engine
COPY bank bank
COPY runner runner
COPY benches benches
# One job per core by default; CARGO_BUILD_JOBS=1 keeps a shared build host responsive.
ARG CARGO_BUILD_JOBS=
# The commit `--version` names: the build context has no .git, so it is passed in.
ARG GIT_COMMIT=unknown
ENV GIT_COMMIT=${GIT_COMMIT}
RUN if [ -n "$CARGO_BUILD_JOBS" ]; then export CARGO_BUILD_JOBS; else unset CARGO_BUILD_JOBS; fi \
 && cargo build --release -p runner --locked --bin runner \
 && install -D -m 0755 target/release/runner /out/runner \
 && /out/runner --version

FROM ${RUNTIME_IMAGE}
# The service user: a fixed uid/gid (10001) so volumes and Kubernetes' runAsUser/fsGroup
# agree; /data (the nodes' data directories) and /etc/runner (the cluster file, secrets)
# belong to it, 0700, as the node keeps its own files.
RUN groupadd --gid 10001 runner \
 && useradd --uid 10001 --gid runner --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin runner \
 && install -d -m 0700 -o runner -g runner /data /etc/runner
COPY --from=build /out/runner /usr/local/bin/runner
COPY deploy/docker/probe /usr/local/bin/probe
ENV ENGINE_CLUSTER_FILE=/etc/runner/cluster.toml
USER runner:runner
WORKDIR /data
VOLUME ["/data"]
# peer, client, metrics (/metrics, /livez, /readyz): the ports deploy/ gives every node.
EXPOSE 7001 8001 9001
# 200 from /readyz on the metrics port (PROBE_PORT, default 9001): a member, not halted, not
# storage-full, a leader known, caught up.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 CMD ["probe", "/readyz"]
ENTRYPOINT ["runner"]
CMD ["--help"]
