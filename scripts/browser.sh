#!/usr/bin/env bash
# Installs the browser the web UI's end-to-end test (e2e/webui_test.go)
# drives headless: Debian's chromium package, with a font for its
# screenshots. Idempotent: does nothing when chromium is already installed.
# Needs apt-get and root (or password-less sudo); otherwise it says so and
# fails, and the test then skips outside CI (set SLICERD_CHROMIUM to use a
# Chromium installed another way).
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "browser.sh: no apt-get here; install Chromium and set SLICERD_CHROMIUM to its path" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    echo "browser.sh: installing chromium needs root; run: sudo apt-get install chromium" >&2
    exit 1
  fi
fi
echo "installing chromium (Debian package) for the web UI's browser test" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null
