#!/usr/bin/env bash
# Prometheus and promtool from the machine's Debian packages: the alert rules' unit tests
# (promtool test rules) and a real Prometheus scraping a daemon and a publisher in the
# tests; and fish, whose completion script (`gcd completion fish`) a test sources. The demo
# needs none of them; `make test` does (scripts/test.sh passes --required).
#
# Nothing to do when promtool and fish are on PATH. Otherwise apt-get, as root or sudo.
# Where that is impossible (macOS, Fedora, Arch, Debian without root): with --required,
# exit 1 naming what to install; without it, print one line and exit 0 (skipped).
set -euo pipefail
required=false
[ "${1:-}" = "--required" ] && required=true

packages=()
command -v promtool >/dev/null 2>&1 || packages+=(prometheus)
command -v fish >/dev/null 2>&1 || packages+=(fish)
[ ${#packages[@]} -eq 0 ] && exit 0

skip() {
    if $required; then
        echo "${packages[*]} missing and cannot be installed here ($1): install Prometheus 2.x" \
             "(its promtool and prometheus binaries) and fish on PATH, e.g." \
             "'apt-get install -y ${packages[*]}' as root" >&2
        exit 1
    fi
    echo "${packages[*]}: skipped ($1); only the tests need them (make test)"
    exit 0
}

command -v apt-get >/dev/null 2>&1 || skip "no apt-get on this machine"
sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || skip "apt-get needs root, and there is no sudo"
    sudo -n true 2>/dev/null || skip "apt-get needs root, and sudo asks for a password"
    sudo="sudo"
fi
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}"
# The package may start a system Prometheus (its init script, or systemd): the tests
# start their own on free ports, so stop that one service, and only it.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    $sudo systemctl disable --now prometheus
elif [ -f /run/prometheus/prometheus.pid ] \
        && kill -0 "$(cat /run/prometheus/prometheus.pid)" 2>/dev/null; then
    $sudo service prometheus stop
fi
