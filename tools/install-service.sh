#!/usr/bin/env bash
# Install Magpie TTS as a systemd service:
#   /opt/magpie-tts (venv), /etc/systemd/system/magpie-tts.service, /etc/magpie-tts/config.toml
# Usage: tools/install-service.sh [--root DIR] [--jetson]   (DIR: install into an image)
set -euo pipefail
cd "$(dirname "$0")/.."
root=""
jetson=0
while [ $# -gt 0 ]; do
    case "$1" in
        --root) root="$2"; shift 2 ;;
        --jetson) jetson=1; shift ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
prefix="$root/opt/magpie-tts"
if [ -z "$root" ]; then
    python3 -m venv "$prefix"
    "$prefix/bin/pip" install -q --disable-pip-version-check .
    if [ "$jetson" = 1 ]; then
        tools/install-gpu.sh "$prefix/bin/python"  # onnxruntime-gpu owns the module
    fi
fi
install -D -m 0644 systemd/magpie-tts.service "$root/etc/systemd/system/magpie-tts.service"
if [ ! -e "$root/etc/magpie-tts/config.toml" ]; then
    install -D -m 0644 systemd/config.toml "$root/etc/magpie-tts/config.toml"
fi
if [ ! -e "$root/etc/magpie-tts/mqtt-password" ]; then
    install -m 0600 /dev/null "$root/etc/magpie-tts/mqtt-password"  # LoadCredential= needs it
fi
if [ "$jetson" = 1 ]; then
    install -D -m 0644 systemd/jetson-cuda.conf \
        "$root/etc/systemd/system/magpie-tts.service.d/jetson-cuda.conf"
fi
if [ -n "$root" ]; then
    systemctl --root="$root" enable magpie-tts.service
elif [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl enable --now magpie-tts.service
    echo "started: journalctl -u magpie-tts -f"
else
    systemctl --root=/ enable magpie-tts.service
    echo "installed; systemd is not running here, start it on the target with systemctl"
fi
