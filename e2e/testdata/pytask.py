"""A Python application's side of TestSidecarPythonTask: it follows its
task through the sidecar's local API with the slicerd_task library and
prints what it sees, one JSON object a line, for the Go test to check
against a Clerk."""

import json
import sys
import time

import slicerd_task

KEYS = [f"key-{i}" for i in range(2000)]


def emit(**kw):
    print(json.dumps(kw), flush=True)


def wait(task, cond, what, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gen, ranges = task.ranges()
        if cond(ranges):
            return gen
        time.sleep(0.01)
    raise SystemExit(f"timed out waiting for {what}")


def main():
    task = slicerd_task.Task(sys.argv[1]).start()
    gen = wait(task, lambda r: len(r) > 0, "ranges")
    emit(step="held", generation=gen, owned=[i for i, k in enumerate(KEYS) if task.owns(k)])
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < 0.5:
        for k in KEYS:
            task.owns(k)
        n += len(KEYS)
    emit(step="lookup", ns_per_owns=(time.monotonic() - t0) * 1e9 / n)
    task.set_draining(True)
    gen = wait(task, lambda r: len(r) == 0, "every range lost")
    emit(step="drained", generation=gen)
    task.set_draining(False)
    gen = wait(task, lambda r: len(r) > 0, "ranges again")
    emit(step="back", generation=gen, owned=[i for i, k in enumerate(KEYS) if task.owns(k)])
    owned, tokens, kept = [], set(), 0
    for i, k in enumerate(KEYS[:50]):
        with task.acquire(k) as h:
            if h.owned:
                owned.append(i)
                tokens.add(h.token)
        kept += h.continuous
    emit(step="handles", generation=task.ranges()[0], owned=owned, tokens=sorted(tokens), continuous=kept)
    task.report_load([("key-1", 1.0), (b"key-2", 2)])
    try:
        task.report_load([("key-1", float("nan"))])
        emit(step="bad-load", code="accepted")
    except slicerd_task.LocalAPIError as e:
        emit(step="bad-load", code=e.code)
    task.close()


if __name__ == "__main__":
    main()
