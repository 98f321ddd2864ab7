"""Writes a capture (capture.py) as a planning trace in sublinear's trace format, version 1.2
(docs/trace-format.md; the C++ reader, tracer/trace_file.cpp, is the reference and the check).

Note [Planning trace]
Rationale: `sublinear plan` and every planner read traces; a capture written as one is
  planned by exactly the code that plans a recorded run, with no second analysis to keep
  in step.
Approach: each storage gets a synthetic device address (its own range, never reused); each
  operation is a launch whose parameter block is the 8-byte addresses of the storages it
  touches, written ones first, so the tracer's pointer scan finds them as it finds real
  pointers. Its kernel is (operation name, written count, read count), so a parameter slot
  that writes always writes (Note [Write generalization] in tracer/analysis.cpp). Every
  launch is `writes_observed` with explicit WRITES records and `timed` with the roofline
  estimate (gpus.py). Storages live before the step are `preexisting` allocations ahead of
  a marker; the step lies between two markers. The header's flag bit 0 marks the trace as
  planning-only: the runtime refuses to replay it. Python writes the binary directly (zlib
  provides the CRC-32): no converter to build or ship.
Limitations: one stream; no copies or sets (a meta capture has none); the META device
  name is "meta:<gpu>" and the granularity 2 MiB, CUDA's VMM granularity on the GPUs named.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Dict, List, Optional, Tuple

from .capture import Capture

__all__ = ["write_planning_trace", "encode_planning_trace", "GRANULARITY", "ADDRESS_BASE"]

MAGIC = b"SLTRACE\x1a"
VERSION = (1, 2)
HEADER_FLAG_PLANNING = 1
GRANULARITY = 2 << 20
ADDRESS_BASE = 1 << 40
ADDRESS_ALIGN = 1 << 12

SEC_META, SEC_KERNELS, SEC_STREAMS, SEC_EVENTS, SEC_ARENA, SEC_WRITES, SEC_FRESH = range(1, 8)
ALLOC, FREE, LAUNCH, MARKER = 1, 2, 3, 8
F_PREEXISTING, F_WRITES_OBSERVED, F_TIMED = 1 << 1, 1 << 4, 1 << 5

# seq, time_ns, kind, flags, copy, reserved, stream, address, source, bytes, param_offset,
# correlation, duration_ns, kernel, shared_mem, grid xyz, block xyz: 104 bytes.
_EVENT = struct.Struct("<QQBBBBIQQQQQQII3I3I")
assert _EVENT.size == 104


def _align8(n: int) -> int:
    return (n + 7) & ~7


def encode_planning_trace(capture: Capture, gpu: str, seconds: List[float]) -> bytes:
    """The trace file's bytes for `capture`, with `seconds[i]` the estimated duration of op i."""
    # Addresses.
    address: Dict[int, int] = {}
    next_address = ADDRESS_BASE
    for ident in sorted(capture.storages):
        s = capture.storages[ident]
        address[ident] = next_address
        s.address = next_address
        next_address += (s.nbytes + ADDRESS_ALIGN - 1) // ADDRESS_ALIGN * ADDRESS_ALIGN
    kernels: Dict[Tuple[str, int, int], int] = {}
    kernel_list: List[Tuple[str, int]] = []
    events = bytearray()
    arena = bytearray()
    writes: List[Tuple[int, int]] = []
    seq = 0
    now = 0

    def event(kind: int, flags: int = 0, addr: int = 0, nbytes: int = 0, param_offset: int = 0,
              duration: int = 0, kernel: int = 0) -> None:
        nonlocal seq
        events.extend(_EVENT.pack(seq, now, kind, flags, 0, 0, 0, addr, 0, nbytes, param_offset, 0, duration,
                                  kernel, 0, 1, 1, 1, 1, 1, 1))
        seq += 1

    for ident in sorted(capture.storages):
        s = capture.storages[ident]
        if s.preexisting:
            event(ALLOC, F_PREEXISTING, address[ident], s.nbytes)
    event(MARKER, addr=0)
    for what, ident in capture.events:
        if what == "alloc":
            event(ALLOC, 0, address[ident], capture.storages[ident].nbytes)
        elif what == "free":
            event(FREE, 0, address[ident], capture.storages[ident].nbytes)
        else:
            op = capture.ops[ident]
            key = (op.name, len(op.writes), len(op.reads))
            k = kernels.get(key)
            if k is None:
                k = kernels[key] = len(kernel_list)
                kernel_list.append((op.name, len(op.writes) + len(op.reads)))
            words = [address[i] for i in op.writes] + [address[i] for i in op.reads]
            offset = len(arena)
            arena.extend(struct.pack(f"<{len(words)}Q", *words))
            duration = max(1, int(round(seconds[ident] * 1e9)))
            for a in sorted(address[i] for i in op.writes):
                writes.append((seq, a))
            event(LAUNCH, F_WRITES_OBSERVED | F_TIMED, 0, 8 * len(words), offset, duration, k)
            now += duration
    event(MARKER, addr=1)

    device = f"meta:{gpu}".encode()
    meta = struct.pack("<QII", GRANULARITY, len(device), 0) + device
    kernel_bytes = bytearray()
    for handle, (name, count) in enumerate(kernel_list, start=1):
        raw = name.encode()
        kernel_bytes.extend(struct.pack("<QIIII", handle, 8 * count, len(raw), count, 0))
        kernel_bytes.extend(raw)
        kernel_bytes.extend(b"".join(struct.pack("<II", 8 * i, 8) for i in range(count)))
    streams = struct.pack("<Q", 0)
    write_bytes = b"".join(struct.pack("<QQ", s, a) for s, a in writes)
    sections = [
        (SEC_META, bytes(meta), 1),
        (SEC_KERNELS, bytes(kernel_bytes), len(kernel_list)),
        (SEC_STREAMS, streams, 1),
        (SEC_EVENTS, bytes(events), len(events) // _EVENT.size),
        (SEC_ARENA, bytes(arena), len(arena)),
        (SEC_WRITES, write_bytes, len(writes)),
        (SEC_FRESH, b"", 0),
    ]
    header_size, entry_size = 64, 32
    offset = header_size + entry_size * len(sections)
    directory = bytearray()
    body = bytearray()
    for ident, data, count in sections:
        offset = _align8(offset)
        pad = offset - (header_size + entry_size * len(sections) + len(body))
        body.extend(b"\0" * pad)
        directory.extend(struct.pack("<IIQQQ", ident, zlib.crc32(data), offset, len(data), count))
        body.extend(data)
        offset += len(data)
    file_bytes = header_size + len(directory) + len(body)
    header = bytearray(64)
    header[0:8] = MAGIC
    struct.pack_into("<HHIQII", header, 8, VERSION[0], VERSION[1], header_size, file_bytes, len(sections),
                     HEADER_FLAG_PLANNING)
    struct.pack_into("<QI", header, 32, header_size, zlib.crc32(bytes(directory)))
    struct.pack_into("<I", header, 60, zlib.crc32(bytes(header[:60])))
    return bytes(header) + bytes(directory) + bytes(body)


def write_planning_trace(capture: Capture, path: str, gpu: str, seconds: Optional[List[float]] = None) -> None:
    """Writes the planning trace of `capture` to `path` (atomically: a temporary file, then a rename)."""
    data = encode_planning_trace(capture, gpu, seconds if seconds is not None else capture.estimate_seconds(gpu))
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_events(path: str) -> List[Tuple[int, int, int, int]]:
    """The events of a trace file as (kind, flags, address, bytes), in order: enough to compare
    allocation orders in tests and scripts. Checks the magic and the major version only; the
    C++ reader (`sublinear plan --trace`) is the one that validates."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != MAGIC or struct.unpack_from("<H", data, 8)[0] != VERSION[0]:
        raise ValueError(f"{path}: not a sublinear trace file of major version {VERSION[0]}")
    out: List[Tuple[int, int, int, int]] = []
    (sections,) = struct.unpack_from("<I", data, 24)
    for i in range(sections):
        ident, _crc, offset, _size, count = struct.unpack_from("<IIQQQ", data, 64 + 32 * i)
        if ident == SEC_EVENTS:
            for j in range(count):
                e = _EVENT.unpack_from(data, offset + _EVENT.size * j)
                out.append((e[2], e[3], e[7], e[9]))
    return out
