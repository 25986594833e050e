#!/bin/sh
# Installs Docker and runs the registry container (after Tacker's private registry
# driver): load the image from the package when one was copied, else pull it.
# Usage: install_registry.sh PORT [IMAGE_TAR]
set -eu
port=${1:-5000}
image_tar=${2:-}
if ! command -v docker >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  sudo apt-get update -qq
  sudo apt-get install -y -qq docker.io
fi
if [ -n "$image_tar" ]; then
  sudo docker load -i "$image_tar"
else
  sudo docker pull registry:2
fi
sudo mkdir -p /private_registry
sudo docker rm -f private_registry >/dev/null 2>&1 || true
sudo docker run -d -p "$port":5000 -v /private_registry:/var/lib/registry \
  --restart=always --name private_registry registry:2
for i in $(seq 1 30); do
  if curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null 2>&1; then exit 0; fi
  sleep 2
done
echo "registry did not answer on port $port" >&2
exit 1
