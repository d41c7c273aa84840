#!/usr/bin/env bash
# Runs slicerd's checks and tests: formatting, vet, the generated-code check,
# and every Go test under the race detector (end-to-end tests included; they
# build and start the real binaries; they run twice, the second time on the
# secure settings with the attack suite). Needs Go; the code generators are
# installed into .bin/ by scripts/tools.sh on first use, and Debian's chromium
# (for the web UI's browser test) by scripts/browser.sh, and Debian's python3 with
# python3-xxhash (for the Python task library, clients/python) by
# scripts/python.sh, and the Node task library's npm dependency by
# scripts/node.sh.
#   scripts/test.sh            everything
#   SKIP_GENCHECK=1 scripts/test.sh   skip the generated-code check (no generator build)
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.bin/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

if [ "${SKIP_GENCHECK:-}" != 1 ]; then
  echo "== generated code"
  scripts/genproto.sh --check
fi

# The web UI's browser test drives Debian's chromium; install it if it is
# missing. In CI a missing browser is a failure (the test fails too);
# elsewhere the test skips with a message.
echo "== browser"
if ! scripts/browser.sh; then
  if [ -n "${CI:-}" ]; then
    echo "cannot install chromium for the web UI's browser test"; exit 1
  fi
  echo "chromium is not installed: the web UI's browser test will be skipped"
fi

# The client libraries' end-to-end tests start the real binaries: slicerd
# and the example task, kvserver, built once here.
echo "== binaries for the client libraries' tests"
clientbin=$(mktemp -d)
trap 'rm -rf "$clientbin"' EXIT
go build -o "$clientbin/slicerd" .
go build -o "$clientbin/kvserver" ./examples/kvcache/cmd/kvserver
export SLICERD_BIN="$clientbin/slicerd" SLICERD_KVSERVER_BIN="$clientbin/kvserver"

# The Python task library (clients/python) runs on Debian's python3 with
# python3-xxhash; its unit tests run here, and the end-to-end tests use it
# through SLICERD_PYTHON. As with the browser, a failure to install it
# fails CI and skips those tests elsewhere.
echo "== python task library"
if py=$(scripts/python.sh); then
  export SLICERD_PYTHON="$py"
  (cd clients/python && "$py" -m unittest discover -q -p 'test_*.py')
elif [ -n "${CI:-}" ]; then
  echo "cannot install python3-xxhash for the Python task library's tests"; exit 1
else
  echo "python3 with xxhash is not installed: the Python task library's tests will be skipped"
fi

# The Node.js task library (clients/node) needs node and its one npm
# dependency; its unit tests run here, its end-to-end test in e2e/.
echo "== node task library"
if scripts/node.sh; then
  (cd clients/node && node --test)
elif [ -n "${CI:-}" ]; then
  echo "cannot install the Node task library's dependencies"; exit 1
else
  echo "node or npm is not installed: the Node task library's tests will be skipped"
fi

# The TypeScript Clerk (clients/typescript) needs node and its npm
# dependencies (pinned in its package-lock.json); npm test builds it and
# runs its unit, conformance and end-to-end tests (the latter on
# SLICERD_BIN and SLICERD_KVSERVER_BIN).
echo "== typescript clerk"
if scripts/typescript.sh; then
  (cd clients/typescript && npm test)
elif [ -n "${CI:-}" ]; then
  echo "cannot install the TypeScript Clerk's dependencies"; exit 1
else
  echo "node or npm is not installed: the TypeScript Clerk's tests will be skipped"
fi

# The strong protocol's model test explores millions of states; the race
# detector slows it tenfold, so it runs at full depth here, without it, and
# at a shallow depth in the race pass below.
echo "== model check (lease/guard)"
model_status=0
go test -count=1 -run 'TestModel' -timeout 10m ./lease/guard/ 2>&1 | sed 's/^ok /ok (model) /' | tee /tmp/slicerd-model.$$.log || model_status=${PIPESTATUS[0]}

# The decisions' golden test (assign) pins every decision of hundreds of
# jobs too small for goroutines of their own; the race detector would
# only slow it, so it runs here, without it, and skips in the race pass.
echo "== golden decisions (assign)"
golden_status=0
go test -count=1 -run 'TestDecisionsGolden' ./assign/ 2>&1 | sed 's/^ok /ok (golden) /' | tee /tmp/slicerd-golden.$$.log || golden_status=${PIPESTATUS[0]}

# Both stores' contract at a job of 10^6 slices, which the race pass
# below runs at 10^5: the race detector slows it tenfold.
echo "== stores at 10^6 slices"
large_status=0
go test -count=1 -run 'Contract.*/LargeJob' ./storage/ ./storage/etcdstore/ 2>&1 | sed 's/^ok /ok (large) /' | tee /tmp/slicerd-large.$$.log || large_status=${PIPESTATUS[0]}

# A failing pass does not stop the next one: every failure is reported,
# and the summary line is always printed.
# The failpoints build (internal/failpoint) and the tests that use its
# points, which a release build compiles out.
echo "== go test -race -tags failpoints"
failpoint_status=0
go test -race -count=1 -tags failpoints ./internal/failpoint/ ./lease/guard/ 2>&1 | sed 's/^ok /ok (failpoints) /' | tee /tmp/slicerd-failpoints.$$.log || failpoint_status=${PIPESTATUS[0]}

echo "== go test -race"
status=0
go test -race -count=1 -timeout 20m ./... 2>&1 | tee /tmp/slicerd-test.$$.log || status=${PIPESTATUS[0]}

# The end-to-end tests again, with every cluster on the documented secure
# settings (TLS, certificate identities, admin token); the attack suite
# runs only in this pass.
echo "== go test -race ./e2e/ (secure)"
secure_status=0
SLICERD_E2E_SECURE=1 go test -race -count=1 -timeout 20m ./e2e/ 2>&1 | sed 's/^ok /ok (secure) /' | tee -a /tmp/slicerd-test.$$.log || secure_status=${PIPESTATUS[0]}
[ "$status" = 0 ] && status=$secure_status
[ "$status" = 0 ] && status=$model_status
[ "$status" = 0 ] && status=$failpoint_status
[ "$status" = 0 ] && status=$large_status
[ "$status" = 0 ] && status=$golden_status
cat /tmp/slicerd-model.$$.log /tmp/slicerd-failpoints.$$.log /tmp/slicerd-large.$$.log /tmp/slicerd-golden.$$.log >> /tmp/slicerd-test.$$.log
passed=$(grep -c '^ok ' /tmp/slicerd-test.$$.log || true)
failed=$(grep -c -E '^(FAIL|--- FAIL)' /tmp/slicerd-test.$$.log || true)
rm -f /tmp/slicerd-test.$$.log /tmp/slicerd-model.$$.log /tmp/slicerd-failpoints.$$.log /tmp/slicerd-large.$$.log /tmp/slicerd-golden.$$.log
echo "packages: $passed passed, $failed failed"
exit "$status"
