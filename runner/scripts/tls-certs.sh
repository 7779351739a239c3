#!/bin/sh
# Makes a cluster's certificates with openssl: a CA (once), then one certificate per node or
# client, signed by it. notes/operations.md ("TLS") explains each step; the tests run this
# very script, so what it says stays true.
#
#   tls-certs.sh DIR NAME [HOST...]
#
# DIR/ca.pem and DIR/ca.key are made when missing (keep ca.key off the nodes: it signs).
# DIR/NAME.pem and DIR/NAME.key are made for NAME, valid for each HOST (a DNS name or an IP
# address, as the cluster file's peer_address and client_address spell the host): a node's,
# for TLS servers and clients both. Without a HOST the certificate is a client's, for TLS
# clients only. Keys are EC P-256, owner-only (0600). Certificates last DAYS days (default
# 365); the CA lasts CA_DAYS (default 3650).
set -eu
if [ "$#" -lt 2 ]; then
  echo "usage: $0 DIR NAME [HOST...]" >&2
  exit 2
fi
dir=$1
name=$2
shift 2
days=${DAYS:-365}
ca_days=${CA_DAYS:-3650}
umask 077
mkdir -p "$dir"
if [ ! -f "$dir/ca.pem" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" -days "$ca_days" \
    -subj "/CN=cluster CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi
names=""
for host in "$@"; do
  case "$host" in
    *[!0-9.]*) case "$host" in *:*) kind=IP ;; *) kind=DNS ;; esac ;;
    *) kind=IP ;;
  esac
  names="${names:+$names,}$kind:$host"
done
extensions="$dir/$name.ext"
{
  echo "basicConstraints=critical,CA:FALSE"
  echo "keyUsage=critical,digitalSignature"
  if [ -n "$names" ]; then
    echo "extendedKeyUsage=serverAuth,clientAuth"
    echo "subjectAltName=$names"
  else
    echo "extendedKeyUsage=clientAuth"
  fi
} > "$extensions"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout "$dir/$name.key" -out "$dir/$name.csr" -subj "/CN=$name" 2>/dev/null
openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
  -CAcreateserial -out "$dir/$name.pem" -days "$days" -extfile "$extensions" 2>/dev/null
rm -f "$dir/$name.csr" "$extensions"
chmod 600 "$dir/$name.key"
echo "$dir/$name.pem (${names:-no host names}), key $dir/$name.key, CA $dir/ca.pem"
