"""The slicer.v1 message classes, built at import from the descriptor set
scripts/genproto.sh writes beside this file (slicer_v1.binpb): no
generated Python is committed, and only google.protobuf is needed."""

import os

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_SET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slicer_v1.binpb")


def _load():
    with open(_SET, "rb") as f:
        files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in files.file:  # buf writes them imports first
        pool.Add(fd)
    # GetMessageClass is the newer API (protobuf 4.24+); Debian's 3.21
    # (Python package 4.21) has only MessageFactory.GetPrototype.
    get = getattr(message_factory, "GetMessageClass", None)
    if get is None:
        factory = message_factory.MessageFactory(pool)
        get = factory.GetPrototype
    return {name: get(pool.FindMessageTypeByName("slicer.v1." + name)) for name in (
        "Task", "Slice", "Assignment", "AssignmentDelta",
        "WatchAssignmentRequest", "WatchAssignmentResponse")}


_classes = _load()
Task = _classes["Task"]
Slice = _classes["Slice"]
Assignment = _classes["Assignment"]
AssignmentDelta = _classes["AssignmentDelta"]
WatchAssignmentRequest = _classes["WatchAssignmentRequest"]
WatchAssignmentResponse = _classes["WatchAssignmentResponse"]
