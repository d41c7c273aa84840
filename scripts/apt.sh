#!/usr/bin/env bash
# Installs Debian packages for a test dependency, as root or with
# password-less sudo; otherwise it says what to run and fails.
#   scripts/apt.sh WHAT PACKAGE...    WHAT says what they are for
set -euo pipefail
what=$1; shift
if ! command -v apt-get >/dev/null 2>&1; then
  echo "apt.sh: no apt-get here; install $* yourself ($what)" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    echo "apt.sh: installing $* needs root; run: sudo apt-get install $*" >&2
    exit 1
  fi
fi
echo "installing $* (Debian packages) for $what" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
