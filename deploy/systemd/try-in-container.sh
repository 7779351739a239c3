#!/usr/bin/env bash
# Runs runner-node@.service for real under systemd, in a container (systemd as its PID 1),
# for a host whose own PID 1 is not systemd: starts node 1 of a one-node cluster, checks
# that `systemctl start` returned once the node sent READY=1 (/readyz then answers), the
# hardening in force (no capabilities, NoNewPrivs, seccomp), the state directory 0700, a
# restart after SIGKILL, a clean stop on SIGTERM.
#   deploy/systemd/try-in-container.sh RUNNER_BINARY [BASE_IMAGE]
# BASE_IMAGE: a Debian bookworm image (default debian:bookworm; runner-local/bookworm from
# deploy/docker/local-bases.sh without Docker Hub). Needs docker; the container gets
# seccomp=unconfined and the host's cgroup tree, which systemd as PID 1 needs.
set -euo pipefail
binary=${1:?usage: $0 RUNNER_BINARY [BASE_IMAGE]}
base=${2:-debian:bookworm}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
name=runner-systemd-try-$$
trap 'docker rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
cp "$binary" "$work/runner"
cp "$here/runner-node@.service" "$work/"
cat >"$work/cluster.toml" <<'TOML'
cluster_id = 7
secret_file = "/etc/runner/peer.secret"
[[nodes]]
id = 1
peer_address = "127.0.0.1:7001"
client_address = "127.0.0.1:8001"
metrics_address = "127.0.0.1:9001"
data_dir = "/var/lib/runner/node1"
TOML
cat >"$work/Dockerfile" <<DOCKERFILE
FROM $base
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends systemd systemd-sysv curl >/dev/null
# The README's install steps.
RUN useradd --system --home-dir /var/lib/runner --no-create-home --shell /usr/sbin/nologin runner
COPY runner /usr/local/bin/runner
COPY runner-node@.service /etc/systemd/system/
RUN install -d -m 0750 -o root -g runner /etc/runner
COPY --chown=runner:runner cluster.toml /etc/runner/cluster.toml
RUN od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > /etc/runner/peer.secret \
 && chown runner:runner /etc/runner/peer.secret && chmod 600 /etc/runner/peer.secret /etc/runner/cluster.toml
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
DOCKERFILE
docker build -q -t runner-systemd-try "$work" >/dev/null
docker run -d --name "$name" --security-opt seccomp=unconfined --cgroupns=host \
  -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /run --tmpfs /run/lock runner-systemd-try >/dev/null
for _ in $(seq 30); do
  state=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
  case $state in running|degraded) break ;; esac
  sleep 1
done
docker exec -i "$name" bash -s <<'SCRIPT'
set -euo pipefail
unit=runner-node@1
fail() { echo "FAILED: $*"; journalctl -u $unit --no-pager | tail -20; exit 1; }
systemctl start $unit                       # Type=notify: returns once READY=1 was sent
[ "$(systemctl show -p ActiveState --value $unit)" = active ] || fail "not active after start"
# READY=1 means recovered and listening, not ready for traffic: until a leader is known
# /readyz may say 503 with its reason.
echo "started; GET /readyz right after systemctl start: $(curl -s -w ' (%{http_code})' http://127.0.0.1:9001/readyz | tr '\n' ' ')"
sleep 2
echo "GET /readyz 2 s later: $(curl -s -w ' (%{http_code})' http://127.0.0.1:9001/readyz | tr '\n' ' ')"
journalctl -u $unit --no-pager -o cat | grep -m1 recovered
pid=$(systemctl show -p MainPID --value $unit)
grep -E '^(Uid|CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/$pid/status
[ "$(awk '/^CapEff/ {print $2}' /proc/$pid/status)" = 0000000000000000 ] || fail "capabilities"
grep 'open files' /proc/$pid/limits
stat -c '%A %U %n' /var/lib/runner /var/lib/runner/node1
[ "$(stat -c %a /var/lib/runner)" = 700 ] || fail "/var/lib/runner not 0700"
kill -9 "$pid"; sleep 4
[ "$(systemctl show -p NRestarts --value $unit)" -ge 1 ] || fail "no restart after SIGKILL"
[ "$(systemctl show -p ActiveState --value $unit)" = active ] || fail "not active after the restart"
echo "restarted after SIGKILL (NRestarts=$(systemctl show -p NRestarts --value $unit))"
systemctl stop $unit
[ "$(systemctl show -p Result --value $unit)" = success ] || fail "stop: $(systemctl show -p Result --value $unit)"
echo "stopped on SIGTERM: Result=success"
systemd-analyze security $unit.service | tail -1
SCRIPT
echo "systemd try: passed"
