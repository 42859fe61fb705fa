#!/usr/bin/env bash
# Three etcd members, three registry replicas on them, a dispatcher that
# follows all three and one example executor, on 127.0.0.1; ctrl-c stops
# everything. Needs `etcd` (Debian: apt-get install etcd-server) and a
# built toolmesh (cargo build -p toolmesh-cli).
set -euo pipefail
cd "$(dirname "$0")/.."
toolmesh=${TOOLMESH:-./target/debug/toolmesh}
data=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$data"' EXIT
cluster=e1=http://127.0.0.1:12380,e2=http://127.0.0.1:22380,e3=http://127.0.0.1:32380
for i in 1 2 3; do
    etcd --name "e$i" --data-dir "$data/e$i" \
        --listen-client-urls "http://127.0.0.1:${i}2379" --advertise-client-urls "http://127.0.0.1:${i}2379" \
        --listen-peer-urls "http://127.0.0.1:${i}2380" --initial-advertise-peer-urls "http://127.0.0.1:${i}2380" \
        --initial-cluster "$cluster" --log-level warn 2>"$data/e$i.log" &
done
export TOOLMESH_STORE=etcd://127.0.0.1:12379,127.0.0.1:22379,127.0.0.1:32379
# No --policy here: the replicas share one development token that the
# dispatcher follows them with (no anonymous caller is a dispatcher).
token="dev-dispatcher-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
for i in 1 2 3; do
    "$toolmesh" registry --listen "127.0.0.1:707$i" --dev-dispatcher-token "$token" 2>"$data/registry-$i.log" &
done
sleep 2
registries=127.0.0.1:7071,127.0.0.1:7072,127.0.0.1:7073
"$toolmesh" dispatcher --listen 127.0.0.1:7080 --registry "$registries" --registry-token "$token" 2>"$data/dispatcher.log" &
"$toolmesh" example knowledge --registry "$registries" 2>"$data/knowledge.log" &
echo "dispatcher on 127.0.0.1:7080; try: $toolmesh tools --server 127.0.0.1:7080"
echo "logs in $data; ctrl-c stops everything"
wait
