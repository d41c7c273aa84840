"""The assignment cache file, in the Go Clerk's format (clerk/cachefile,
format 2), so either library reads the other's file:

    magic "SLCRASGN" | version u16 | job length u16 | assignment length u32 |
    CRC-32C u32 | job | slicer.v1.Assignment (protobuf)

all big-endian; the CRC-32C covers the whole file but its own field. The
incarnation is in the assignment. A file that is truncated, damaged, of
another job, or does not hold a valid assignment is refused
(CacheFileError): the Clerk then starts as without one."""

import os
import struct
import tempfile

from . import _messages
from .assignment import Assignment

__all__ = ["CacheFileError", "encode", "decode", "read", "write"]

MAGIC = b"SLCRASGN"
VERSION = 2
HEADER_SIZE = 20
MAX_FILE_SIZE = 1 << 30


class CacheFileError(ValueError):
    """The bytes are not a usable cache file for the job."""


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def _crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    t = _TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _checksum(b):
    return _crc32c(memoryview(b)[HEADER_SIZE:], _crc32c(b[:16]))


def encode(a):
    """The cache file bytes of assignment ``a``."""
    job = a.job.encode()
    body = a.to_proto(_messages.Assignment).SerializeToString(deterministic=True)
    buf = bytearray(MAGIC + struct.pack(">HHII", VERSION, len(job), len(body), 0) + job + body)
    struct.pack_into(">I", buf, 16, _checksum(buf))
    return bytes(buf)


def decode(data):
    """The validated assignment in cache file bytes ``data``, or
    CacheFileError."""
    if len(data) < HEADER_SIZE or data[:len(MAGIC)] != MAGIC:
        raise CacheFileError(f"not a slicerd assignment cache file, or truncated ({len(data)} bytes)")
    version, job_len, size, want = struct.unpack_from(">HHII", data, 8)
    if version == 0 or version > VERSION:
        raise CacheFileError(f"format version {version}; this library reads versions 1 to {VERSION}")
    if len(data) != HEADER_SIZE + job_len + size:
        raise CacheFileError(f"{len(data)} bytes, the header says {HEADER_SIZE + job_len + size}: truncated or damaged")
    if _checksum(data) != want:
        raise CacheFileError("checksum does not match: damaged")
    job = bytes(data[HEADER_SIZE:HEADER_SIZE + job_len]).decode("utf-8", "replace")
    try:
        p = _messages.Assignment.FromString(bytes(data[HEADER_SIZE + job_len:]))
        a = Assignment.from_proto(p)
    except Exception as e:  # InvalidAssignment, or protobuf's DecodeError
        raise CacheFileError(f"assignment of job {job!r} does not decode or validate: {e}") from None
    if a.job != job:
        raise CacheFileError(f"header names job {job!r}, the assignment is of job {a.job!r}")
    if version < 2 and a.incarnation:
        raise CacheFileError(f"a version {version} file cannot hold an incarnation, but holds {a.incarnation!r}")
    return a


def read(path, job):
    """The assignment of ``job`` in the cache file at ``path``; raises
    FileNotFoundError when there is none, CacheFileError when it is not
    usable."""
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_SIZE + 1)
    if len(data) > MAX_FILE_SIZE:
        raise CacheFileError(f"larger than {MAX_FILE_SIZE} bytes")
    a = decode(data)
    if a.job != job:
        raise CacheFileError(f"holds job {a.job!r}, not {job!r}")
    return a


def write(path, a):
    """Write ``a`` to ``path`` atomically: a new file in the same
    directory, synced, renamed over the old one; a crash leaves the old
    file or the new one, never a mix."""
    data = encode(a)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
