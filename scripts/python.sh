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
"$(dirname "$0")/apt.sh" "the Python task library's tests" python3 python3-xxhash
"$py" -c 'import xxhash'
echo "$py"
