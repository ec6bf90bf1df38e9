#!/usr/bin/env bash
# Chromium from the machine's Debian package: the deep tier draws the daemon's M picture
# (GET /plot.svg, gcd.rules.mplot) in a real headless browser. Nothing else needs it;
# scripts/test.sh --deep passes --required.
#
# Nothing to do when chromium is on PATH. Otherwise apt-get, as root or sudo. Where that
# is impossible: with --required, exit 1 naming what to install; without it, print one
# line and exit 0 (skipped).
set -euo pipefail
required=false
[ "${1:-}" = "--required" ] && required=true

command -v chromium >/dev/null 2>&1 && exit 0

skip() {
    if $required; then
        echo "chromium missing and cannot be installed here ($1): install Chromium on PATH," \
             "e.g. 'apt-get install -y chromium' as root" >&2
        exit 1
    fi
    echo "chromium: skipped ($1); only the deep tier needs it (make test-deep)"
    exit 0
}

command -v apt-get >/dev/null 2>&1 || skip "no apt-get on this machine"
sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || skip "apt-get needs root, and there is no sudo"
    sudo -n true 2>/dev/null || skip "apt-get needs root, and sudo asks for a password"
    sudo="sudo"
fi
echo "installing chromium (Debian package) for the deep tier's browser check"
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
