#!/usr/bin/env bash
# haproxy (Debian's package) for tests/parity/test_gateway_replicas.py: the load balancer in
# round robin, without affinity, in front of the gateway replicas. Idempotent.
set -euo pipefail
if command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "haproxy is not installed: 'apt-get install haproxy' to run the gateway replica tests" >&2
  exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy
