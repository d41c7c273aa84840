#!/usr/bin/env bash
# Makes ready the Python the client libraries in clients/python are tested
# with: Debian's python3 with Debian's python3-xxhash (the task library's
# one dependency) and python3-grpcio and python3-protobuf (the Clerk's).
# Idempotent: does nothing when /usr/bin/python3 imports all three
# already. Prints the interpreter's path. Needs apt-get and root (or
# password-less sudo) to install; otherwise it says so and fails.
set -euo pipefail
py=/usr/bin/python3
check='import xxhash, grpc, google.protobuf'
if [ -x "$py" ] && "$py" -c "$check" 2>/dev/null; then
  echo "$py"
  exit 0
fi
"$(dirname "$0")/apt.sh" "the Python client libraries' tests" python3 python3-xxhash python3-grpcio python3-protobuf
"$py" -c "$check"
echo "$py"
