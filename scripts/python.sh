#!/usr/bin/env bash
# Makes ready the Python the slicerd_task library (clients/python) is
# tested with: Debian's python3 with Debian's python3-xxhash, its one
# dependency. Idempotent: does nothing when /usr/bin/python3 imports
# xxhash already. Prints the interpreter's path. Needs apt-get and root
# (or password-less sudo) to install; otherwise it says so and fails.
set -euo pipefail
py=/usr/bin/python3
if [ -x "$py" ] && "$py" -c 'import xxhash' 2>/dev/null; then
  echo "$py"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "python.sh: no apt-get here; install python3 and its xxhash module, and set SLICERD_PYTHON to the interpreter" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    echo "python.sh: installing python3-xxhash needs root; run: sudo apt-get install python3 python3-xxhash" >&2
    exit 1
  fi
fi
echo "installing python3 and python3-xxhash (Debian packages) for the Python task library's tests" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
"${sudo[@]}" apt-get install -y -qq --no-install-recommends python3 python3-xxhash >/dev/null
"$py" -c 'import xxhash'
echo "$py"
