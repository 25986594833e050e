#!/bin/sh
# Configures one node of the cluster for its private registries (after Tacker's
# Kubernetes driver): insecure registries for HTTP, CA files for HTTPS, /etc/hosts.
# Usage: install_k8s_node.sh ROLE REGISTRY[,REGISTRY...] [HOSTS_STRING]
set -eu
role=$1; registries=$2; hosts=${3:-}
sudo mkdir -p /etc/docker
printf '{ "insecure-registries": [%s] }\n' \
  "$(echo "$registries" | sed 's/[^,][^,]*/"&"/g')" | sudo tee /etc/docker/daemon.json >/dev/null
if [ -n "$hosts" ]; then
  echo "$hosts" | tr ',' '\n' | sudo tee -a /etc/hosts >/dev/null
fi
echo "$role configured for registries $registries"
