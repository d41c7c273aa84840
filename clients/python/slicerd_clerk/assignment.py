"""Assignments as the Clerk holds them: validated, immutable, and looked up
by binary search; and the delta rules of docs/api.md ("Deltas"), ported
from the Go api.ApplyDelta so that both compute the same results and
checksums."""

import bisect
import struct
from typing import NamedTuple, Tuple

import xxhash

__all__ = [
    "KEY_SPACE_END", "slice_key", "Task", "Slice", "Assignment",
    "InvalidAssignment", "DeltaError", "checksum", "apply_delta", "receive",
    "supersedes", "is_reset",
]

KEY_SPACE_END = 1 << 63
_MAX_U64 = (1 << 64) - 1
_MAX_JOB = 63
_MAX_TASK = 128
_MAX_INCARNATION = 64


def slice_key(key):
    """The slice key of ``key`` (bytes, or str taken as UTF-8): XXH64 with
    seed 0, shifted right by one bit (docs/client-contract.md, 1)."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    elif not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"slicerd_clerk: a key is bytes or str, not {type(key).__name__}")
    return xxhash.xxh64_intdigest(key) >> 1


class InvalidAssignment(ValueError):
    """An assignment (or a message carrying one) that must not be routed
    by: the Clerk keeps the one it holds."""


class DeltaError(ValueError):
    """A delta that does not apply to the held assignment, or whose result
    is not the one the server meant: the Clerk keeps what it holds and
    watches again for a complete assignment."""


class Task(NamedTuple):
    name: str
    address: str


class Slice(NamedTuple):
    start: int
    end: int  # exclusive
    tasks: Tuple[str, ...]


def _check_name(kind, name, limit, upper_and_colon):
    if not name:
        raise InvalidAssignment(f"{kind} name is empty")
    if len(name.encode("utf-8")) > limit:
        raise InvalidAssignment(f"{kind} name {name[:20]!r}... is longer than {limit} bytes")
    for i, c in enumerate(name):
        ok = ("a" <= c <= "z" or "0" <= c <= "9"
              or (i > 0 and c in "-_.")
              or (upper_and_colon and ("A" <= c <= "Z" or (i > 0 and c == ":"))))
        if not ok:
            raise InvalidAssignment(f"{kind} name {name!r} has {c!r} at position {i}")


def validate_job_name(job):
    """Raise InvalidAssignment unless ``job`` is a valid job name: 1-63 of
    a-z 0-9 - _ ., starting with a letter or digit."""
    _check_name("job", job, _MAX_JOB, False)


def _check_incarnation(inc):
    if len(inc) > _MAX_INCARNATION:
        raise InvalidAssignment(f"incarnation {inc[:20]!r}... is longer than {_MAX_INCARNATION} bytes")
    for i, c in enumerate(inc):
        if not ("a" <= c <= "z" or "A" <= c <= "Z" or "0" <= c <= "9" or c in "-_"):
            raise InvalidAssignment(f"incarnation {inc!r} has {c!r} at position {i}")


class Assignment:
    """One job's validated assignment: ``job``, ``generation``,
    ``incarnation`` ("" from a slicerd that predates incarnations),
    ``tasks`` (``Task`` tuples sorted by name) and ``slices`` (``Slice``
    tuples sorted by start, covering [0, 2^63)). Build one with
    ``from_proto``; an instance is never modified."""

    __slots__ = ("job", "generation", "incarnation", "tasks", "slices", "_ends", "_routes")

    def __init__(self, job, generation, incarnation, tasks, slices):
        self.job = job
        self.generation = generation
        self.incarnation = incarnation
        self.tasks = tuple(tasks)
        self.slices = tuple(slices)
        self._validate()
        self._ends = [s.end for s in self.slices]
        addr = dict(self.tasks)
        # Each slice's tasks with their addresses, shared by equal lists.
        self._routes = [tuple(Task(n, addr[n]) for n in s.tasks) for s in self.slices]

    @classmethod
    def from_proto(cls, p):
        """The assignment a ``slicer.v1.Assignment`` message carries, or
        InvalidAssignment."""
        return cls(p.job, p.generation, p.incarnation,
                   [Task(t.name, t.address) for t in p.tasks],
                   [Slice(s.start, s.end, tuple(s.tasks)) for s in p.slices])

    def to_proto(self, message_class):
        """This assignment as a ``slicer.v1.Assignment`` of message_class."""
        p = message_class(job=self.job, generation=self.generation, incarnation=self.incarnation)
        for t in self.tasks:
            p.tasks.add(name=t.name, address=t.address)
        for s in self.slices:
            p.slices.add(start=s.start, end=s.end, tasks=list(s.tasks))
        return p

    @property
    def version(self):
        """(incarnation, generation)."""
        return (self.incarnation, self.generation)

    def find(self, key):
        """Index of the slice holding slice key ``key``."""
        return bisect.bisect_right(self._ends, key)

    def route(self, key):
        """The tasks (``Task`` tuples, in the assignment's order) serving
        ``key`` (bytes or str)."""
        return self._routes[self.find(slice_key(key))]

    def route_slice_key(self, sk):
        """The tasks serving slice key ``sk``."""
        if not 0 <= sk < KEY_SPACE_END:
            raise ValueError(f"slicerd_clerk: slice key {sk} is outside [0, 2^63)")
        return self._routes[self.find(sk)]

    def __repr__(self):
        return (f"Assignment(job={self.job!r}, generation={self.generation}, incarnation={self.incarnation!r}, "
                f"tasks={len(self.tasks)}, slices={len(self.slices)})")

    def __eq__(self, other):
        return (isinstance(other, Assignment) and self.version == other.version and self.job == other.job
                and self.tasks == other.tasks and self.slices == other.slices)

    __hash__ = None

    def _validate(self):
        # As the Go assign.Assignment.Validate.
        job = self.job
        try:
            validate_job_name(job)
        except InvalidAssignment as e:
            raise InvalidAssignment(f"invalid assignment: {e}") from None
        if not 0 < self.generation <= _MAX_U64:
            raise InvalidAssignment(f"job {job!r}: generation {self.generation} is reserved for no assignment or out of range")
        if self.incarnation:
            _check_incarnation(self.incarnation)
        prev = None
        for i, t in enumerate(self.tasks):
            try:
                _check_name("task", t.name, _MAX_TASK, True)
            except InvalidAssignment as e:
                raise InvalidAssignment(f"job {job!r}: task {i}: {e}") from None
            if prev is not None and prev >= t.name:
                raise InvalidAssignment(f"job {job!r}: tasks not sorted or duplicated at {t.name!r}")
            prev = t.name
        if not self.slices:
            raise InvalidAssignment(f"job {job!r}: no slices")
        known = {t.name for t in self.tasks}
        nxt = 0
        for i, s in enumerate(self.slices):
            if s.start > nxt:
                raise InvalidAssignment(f"job {job!r}: gap [{nxt:#x}, {s.start:#x}) before slice {i}")
            if s.start < nxt:
                raise InvalidAssignment(f"job {job!r}: slice {i} starts at {s.start:#x}, overlapping the previous slice that ends at {nxt:#x}")
            if s.end <= s.start:
                raise InvalidAssignment(f"job {job!r}: slice {i} is empty or inverted [{s.start:#x}, {s.end:#x})")
            if s.end > KEY_SPACE_END:
                raise InvalidAssignment(f"job {job!r}: slice {i} ends at {s.end:#x}, past the key space end")
            if not s.tasks:
                raise InvalidAssignment(f"job {job!r}: slice {i} [{s.start:#x}, {s.end:#x}) has no task")
            for j, name in enumerate(s.tasks):
                if j > 0 and s.tasks[j - 1] >= name:
                    raise InvalidAssignment(f"job {job!r}: slice {i}: tasks not sorted or duplicated at {name!r}")
                if name not in known:
                    raise InvalidAssignment(f"job {job!r}: slice {i} names unknown task {name!r}")
            nxt = s.end
        if nxt != KEY_SPACE_END:
            raise InvalidAssignment(f"job {job!r}: gap [{nxt:#x}, {KEY_SPACE_END:#x}) at the end of the key space")


def supersedes(version, held):
    """Whether an assignment at ``version`` (incarnation, generation)
    replaces one held at ``held`` (None when nothing is held): another
    non-empty incarnation (a reset), or a higher generation."""
    if held is None:
        held = ("", 0)
    inc, gen = version
    if inc and inc != held[0]:
        return True
    return gen > held[1]


def is_reset(version, held):
    """Whether ``version`` is of another store incarnation than ``held``,
    both known."""
    return bool(version[0]) and bool(held[0]) and version[0] != held[0]


def checksum(a):
    """XXH64 of ``a``'s canonical form, as AssignmentDelta.checksum defines
    it (docs/api.md, "Deltas", step 4)."""
    d = xxhash.xxh64()
    z = b"\x00"
    d.update(a.job.encode() + z + a.incarnation.encode() + z + struct.pack(">Q", a.generation))
    for t in a.tasks:
        d.update(t.name.encode() + z + t.address.encode() + z)
    pack = struct.Struct(">QQ").pack
    for s in a.slices:
        d.update(pack(s.start, s.end) + b"".join(n.encode() + z for n in s.tasks) + b"\xff")
    return d.intdigest()


def apply_delta(base, d):
    """The assignment ``AssignmentDelta`` message ``d`` turns ``base``
    into, validated and checked against d's checksum, or DeltaError."""
    if base is None:
        raise DeltaError("no assignment is held to apply it to")
    if d.job != base.job:
        raise DeltaError(f"it is of job {d.job!r}, the held assignment of job {base.job!r}")
    if d.incarnation != base.incarnation or d.base_generation != base.generation:
        raise DeltaError(f"it applies to generation {d.base_generation} of incarnation {d.incarnation!r}, "
                         f"the held assignment is generation {base.generation} of {base.incarnation!r}")
    if d.generation <= base.generation:
        raise DeltaError(f"it leads to generation {d.generation}, not later than its base {base.generation}")

    paint = [Slice(p.start, p.end, tuple(p.tasks)) for p in d.slices]
    prev_end = 0
    for i, p in enumerate(paint):
        if p.start >= p.end or p.end > KEY_SPACE_END or (i > 0 and p.start < prev_end):
            raise DeltaError(f"slice {i} [{p.start:#x}, {p.end:#x}) is empty, beyond the key space, or not after the one before")
        prev_end = p.end

    out = []
    held = base.slices
    i = 0

    def keep(frm, to):
        # The held slices' parts within [frm, to).
        nonlocal i
        while i < len(held) and held[i].end <= frm:
            i += 1
        k = i
        while k < len(held) and held[k].start < to:
            h = held[k]
            out.append(Slice(max(h.start, frm), min(h.end, to), h.tasks))
            k += 1

    pos = 0
    for p in paint:
        if p.start > pos:
            keep(pos, p.start)
        out.append(p)
        pos = p.end
    if pos < KEY_SPACE_END:
        keep(pos, KEY_SPACE_END)

    held_names = {t.name for t in base.tasks}
    for name in d.removed_tasks:
        if name not in held_names:
            raise DeltaError(f"it removes task {name!r}, which the held assignment does not list")
    removed = set(d.removed_tasks)
    upserted = {}
    for t in d.tasks:
        if t.name in upserted:
            raise DeltaError(f"task {t.name!r} is listed twice")
        upserted[t.name] = Task(t.name, t.address)
    tasks = list(upserted.values())
    tasks += [t for t in base.tasks if t.name not in removed and t.name not in upserted]
    tasks.sort(key=lambda t: t.name)  # code point order is UTF-8 byte order, as Go sorts

    try:
        a = Assignment(base.job, d.generation, base.incarnation, tasks, out)
    except InvalidAssignment as e:
        raise DeltaError(f"the result is not a valid assignment: {e}") from None
    got = checksum(a)
    if got != d.checksum:
        raise DeltaError(f"the result's checksum is {got:016x}, the delta says {d.checksum:016x}")
    return a


def receive(held, m):
    """The assignment a ``WatchAssignmentResponse`` carries: its complete
    assignment, validated, or its delta applied to ``held``. A message
    with both or neither raises InvalidAssignment; a delta that does not
    apply raises DeltaError."""
    has_a, has_d = m.HasField("assignment"), m.HasField("delta")
    if has_a and has_d:
        raise InvalidAssignment("message has both an assignment and a delta")
    if has_d:
        return apply_delta(held, m.delta)
    if not has_a:
        raise InvalidAssignment("message has no assignment")
    return Assignment.from_proto(m.assignment)
