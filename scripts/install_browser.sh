#!/usr/bin/env bash
# Installs the headless browser the site tests drive: Debian `chromium` (Playwright launches it with
# executable_path=/usr/bin/chromium, so Playwright's own browser download is never needed).
# Idempotent: does nothing when /usr/bin/chromium exists. Needs root or sudo for apt-get.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    echo "browser: /usr/bin/chromium present ($(/usr/bin/chromium --version 2>/dev/null || echo 'version unknown'))"
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "browser: /usr/bin/chromium is missing and this user cannot apt-get install it;" >&2
        echo "         install the Debian/Ubuntu package 'chromium' and re-run" >&2
        exit 1
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "browser: no apt-get here; install Chromium so that /usr/bin/chromium exists, then re-run" >&2
    exit 1
fi
echo "browser: installing Debian chromium (apt-get)"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core
/usr/bin/chromium --version
