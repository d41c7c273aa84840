# Follows the task through the sidecar with slicerd_task and keeps, from
# on_change's (gained, lost) alone, which of 2,000 keys the application
# believes it holds. On each line read it prints that and what owns() says.
import json, sys, threading
import slicerd_task

KEYS = ["key-%d" % i for i in range(2000)]
HS = [slicerd_task.slice_key(k) for k in KEYS]
held = [False] * len(KEYS)
lock = threading.Lock()


def on_change(gen, gained, lost):
    with lock:
        for i, h in enumerate(HS):
            if any(s <= h < e for s, e in lost):
                held[i] = False
            if any(s <= h < e for s, e in gained):
                held[i] = True


task = slicerd_task.Task(sys.argv[1], on_change=on_change).start()
for _ in sys.stdin:
    with lock:
        by_change = [i for i, b in enumerate(held) if b]
    gen, _ = task.ranges()
    print(json.dumps({"generation": gen, "on_change": by_change, "owns": [i for i, k in enumerate(KEYS) if task.owns(k)]}), flush=True)
