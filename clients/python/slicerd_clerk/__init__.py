"""A slicerd Clerk for Python: follows one job's assignment from slicerd
and routes keys to the tasks that serve them, as docs/client-contract.md
requires and as the Go Clerk (package clerk) does.

    clerk = slicerd_clerk.Clerk("kv", distributors=["10.0.0.1:7070"]).start()
    clerk.wait_ready(10)
    task = clerk.lookup(b"user:42")        # Task(name, address)
    clerk.close()

It needs Debian's python3-grpcio, python3-protobuf and python3-xxhash.
The slicer.v1 messages are built at import from the descriptor set
scripts/genproto.sh writes beside this file.
"""

from .assignment import (KEY_SPACE_END, Assignment, DeltaError, InvalidAssignment, Slice, Task, apply_delta, checksum,
                         receive, slice_key)
from .cachefile import CacheFileError
from .clerk import DEFAULT_SUBSET_SIZE, TLS, Clerk, ClerkError, NoAssignment, NoReplica, Route
from .subset import frontend_index, preferred, rocksteadier

__all__ = [
    "Clerk", "Route", "TLS", "Task", "Slice", "Assignment", "slice_key", "KEY_SPACE_END",
    "ClerkError", "NoAssignment", "NoReplica", "InvalidAssignment", "DeltaError", "CacheFileError",
    "apply_delta", "checksum", "receive", "rocksteadier", "frontend_index", "preferred", "DEFAULT_SUBSET_SIZE",
]
