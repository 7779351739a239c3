#!/bin/sh
# The compose cluster's one-shot init (service `init` in compose.yml): writes the cluster
# file, its secrets, the client file and the operator file into the `config` volume
# (/etc/runner), once. Run as the image's user (runner, uid 10001), so every file is the
# nodes' own, 0600, as the node requires of a secret file. A second run changes nothing.
set -eu
dir=/etc/runner
umask 077
if [ -e "$dir/cluster.toml" ]; then
  echo "init: $dir/cluster.toml exists; checking it"
  exec runner check --cluster "$dir/cluster.toml"
fi
secret() { od -An -tx1 -N32 /dev/urandom | tr -d ' \n'; }   # 64 hex digits
for name in peer client operator; do secret > "$dir/$name.secret"; done
{
  echo 'cluster_id = 1'
  echo "secret_file = \"$dir/peer.secret\""
  echo "client_secret_file = \"$dir/client.secret\""
  echo "operator_secret_file = \"$dir/operator.secret\""
  for id in 1 2 3; do
    echo
    echo '[[nodes]]'
    echo "id = $id"
    echo "peer_address = \"node$id:7001\""            # the compose service's name
    echo "client_address = \"node$id:8001\""
    echo 'peer_bind_address = "0.0.0.0:7001"'         # every interface of the container
    echo 'client_bind_address = "0.0.0.0:8001"'
    echo 'metrics_address = "0.0.0.0:9001"'           # Prometheus and the healthcheck
    echo "data_dir = \"/data/node$id\""               # in the node's own volume at /data
  done
} > "$dir/cluster.toml.new"
mv "$dir/cluster.toml.new" "$dir/cluster.toml"
runner check --cluster "$dir/cluster.toml"
runner client-file --cluster "$dir/cluster.toml" --out "$dir/client.toml"
runner client-file --operator --cluster "$dir/cluster.toml" --out "$dir/operator.toml"
echo "init: wrote $dir/cluster.toml, client.toml, operator.toml and three secrets"
