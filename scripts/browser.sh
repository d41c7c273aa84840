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
"$(dirname "$0")/apt.sh" "the web UI's browser test" chromium fonts-dejavu-core
command -v chromium >/dev/null
