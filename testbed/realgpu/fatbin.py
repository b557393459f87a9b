#!/usr/bin/env python3
"""Keep only the CUDA fatbin entries one GPU architecture can use, in place of the others.

    python3 fatbin.py SRC.so DST.so [SM]        # SM defaults to 90 (Hopper)

For each fatbin blob in the ELF's .nv_fatbin section: keep the SASS entries for `sm` and the PTX
entries for `compute_sm`; where a blob has no SASS for `sm`, keep its highest PTX <= sm (the driver
JIT-compiles it, as it would for the original file). Kept entries (header + payload, untouched)
move to the front of the blob, the blob header's size is updated and the freed tail is zeroed.
Every offset in the ELF stays where it was (the file keeps its size); only fatbin content changes,
as if nvcc had been asked for that architecture alone. Zeros compress to nothing, which is what
makes vLLM's kernel library fit the device tool's 64 MiB per call (54.4 -> 18.3 MB of fatbin).
A blob with no usable entry at all (kernels built only for newer GPUs, e.g. sm_100) is emptied
too: those kernels cannot run on this GPU either way, as with nvcc for sm_90 alone. Stdlib only.
"""
from __future__ import annotations

import struct
import sys
from dataclasses import dataclass

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_SASS = 1, 2


class FatbinError(ValueError):
    pass


@dataclass
class Stats:
    blobs: int = 0
    entries_before: int = 0
    entries_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    emptied_blobs: int = 0

    def line(self, name: str) -> str:
        return (f"{name}: {self.blobs} blobs, {self.entries_before} -> {self.entries_after} entries, "
                f"fatbin {self.bytes_before / 1e6:.1f} MB -> {self.bytes_after / 1e6:.1f} MB"
                + (f", {self.emptied_blobs} blob(s) with no sm entry emptied" if self.emptied_blobs else ""))


def sections(data: bytes):
    """(name, offset, size) of each section of a 64-bit little-endian ELF."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise FatbinError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    stroff = hdrs[shstrndx][4]
    for h in hdrs:
        name = data[stroff + h[0]: data.index(b"\0", stroff + h[0])].decode()
        yield name, h[4], h[5]


def _entries(data, start: int, end: int, where: int) -> list[tuple[int, int, int, int]]:
    """(kind, arch, offset, length) of each entry of the blob whose body is data[start:end]."""
    out, q = [], start
    while q < end:
        kind, _ver, ehs = struct.unpack_from("<HHI", data, q)
        esize, = struct.unpack_from("<Q", data, q + 8)
        arch, = struct.unpack_from("<I", data, q + 28)
        if ehs < 32 or q + ehs + esize > end:
            raise FatbinError(f"fatbin blob at offset {where:#x}: entry at {q:#x} runs past the blob")
        out.append((kind, arch, q, ehs + esize))
        q += ehs + esize
    return out


def keep_entries(ents: list[tuple[int, int, int, int]], sm: int) -> list[tuple[int, int, int, int]]:
    """Which entries an sm_`sm` GPU can use (in file order)."""
    sass = [e for e in ents if e[0] == KIND_SASS and e[1] == sm]
    ptx = [e for e in ents if e[0] == KIND_PTX and e[1] <= sm]
    keep = sass + [e for e in ptx if e[1] == sm]
    if not sass and ptx:
        best = max(e[1] for e in ptx)
        keep += [e for e in ptx if e[1] == best and e not in keep]
    return sorted(keep, key=lambda e: e[2])


def compact_bytes(data: bytearray, sm: int = 90) -> Stats:
    st = Stats()
    found = False
    for name, off, size in list(sections(data)):
        if name != ".nv_fatbin":
            continue
        found = True
        p, end = off, off + size
        while p + 16 <= end:
            magic, _ver, hsz, fsz = struct.unpack_from("<IHHQ", data, p)
            if magic != FATBIN_MAGIC:
                p += 8      # blobs are 8-byte aligned; padding between them
                continue
            st.blobs += 1
            start, qend = p + hsz, p + hsz + fsz
            if qend > end:
                raise FatbinError(f"fatbin blob at offset {p:#x} runs past .nv_fatbin")
            ents = _entries(data, start, qend, p)
            keep = keep_entries(ents, sm)
            st.entries_before += len(ents)
            st.bytes_before += fsz
            if not keep:
                st.emptied_blobs += 1
            body = b"".join(bytes(data[e[2]:e[2] + e[3]]) for e in keep)
            st.entries_after += len(keep)
            st.bytes_after += len(body)
            data[start:start + len(body)] = body
            data[start + len(body):qend] = bytes(qend - start - len(body))
            struct.pack_into("<Q", data, p + 8, len(body))
            p = qend
    if not found:
        raise FatbinError("no .nv_fatbin section")
    return st


def compact(src: str, dst: str, sm: int = 90) -> Stats:
    data = bytearray(open(src, "rb").read())
    size = len(data)
    st = compact_bytes(data, sm)
    assert len(data) == size
    with open(dst, "wb") as f:
        f.write(data)
    return st


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.split("\n\n")[1])
    try:
        print(compact(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 90).line(sys.argv[1]))
    except (OSError, FatbinError) as e:
        sys.exit(f"fatbin.py: {sys.argv[1]}: {e}")
