"""fatbin.py on synthetic ELF files: only the GPU's entries stay, offsets and size do not move."""
import struct

import pytest

from testbed.realgpu import fatbin
from testbed.realgpu.fatbin import FATBIN_MAGIC, KIND_PTX, KIND_SASS, FatbinError, compact, compact_bytes


def entry(kind: int, arch: int, payload: bytes) -> bytes:
    hdr = bytearray(64)
    struct.pack_into("<HHI", hdr, 0, kind, 0x101, 64)
    struct.pack_into("<Q", hdr, 8, len(payload))
    struct.pack_into("<I", hdr, 28, arch)
    return bytes(hdr) + payload


def blob(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def elf(fatbin_section: bytes, extra: bytes = b"host code") -> bytes:
    """A minimal ELF64: header, some bytes, .nv_fatbin, .shstrtab, section headers."""
    names = b"\0.nv_fatbin\0.shstrtab\0"
    data = bytearray(64) + extra
    fb_off = len(data)
    data += fatbin_section
    str_off = len(data)
    data += names
    while len(data) % 8:
        data += b"\0"
    shoff = len(data)
    data[0:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", data, 0x28, shoff)
    struct.pack_into("<HHH", data, 0x3A, 64, 3, 2)
    shdrs = [(0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
             (1, 1, 0, 0, fb_off, len(fatbin_section), 0, 0, 8, 0),
             (12, 3, 0, 0, str_off, len(names), 0, 0, 1, 0)]
    for h in shdrs:
        data += struct.pack("<IIQQQQIIQQ", *h)
    return bytes(data)


def kept(data: bytes) -> list[tuple[int, int, bytes]]:
    """(kind, arch, payload) of every entry left in every blob."""
    out = []
    for name, off, size in fatbin.sections(data):
        if name != ".nv_fatbin":
            continue
        p = off
        while p + 16 <= off + size:
            magic, _v, hsz, fsz = struct.unpack_from("<IHHQ", data, p)
            if magic != FATBIN_MAGIC:
                p += 8
                continue
            for kind, arch, q, ln in fatbin._entries(data, p + hsz, p + hsz + fsz, p):
                out.append((kind, arch, data[q + 64:q + ln]))
            p += hsz + (fsz if fsz else 0)
            # skip the zeroed tail of a compacted blob
            while p + 16 <= off + size and struct.unpack_from("<I", data, p)[0] != FATBIN_MAGIC:
                p += 8
    return out


SECTION = (blob(entry(KIND_SASS, 80, b"A" * 40), entry(KIND_SASS, 90, b"B" * 48), entry(KIND_PTX, 80, b"C" * 16),
                entry(KIND_PTX, 90, b"D" * 24), entry(KIND_SASS, 100, b"E" * 64))
           + blob(entry(KIND_SASS, 80, b"F" * 32), entry(KIND_PTX, 75, b"G" * 8), entry(KIND_PTX, 80, b"H" * 8))
           + blob(entry(KIND_SASS, 100, b"I" * 32)))


def test_keeps_sm90_sass_and_ptx_and_best_lower_ptx(tmp_path):
    src, dst = tmp_path / "lib.so", tmp_path / "out.so"
    src.write_bytes(elf(SECTION))
    st = compact(str(src), str(dst), 90)
    out = dst.read_bytes()
    assert len(out) == src.stat().st_size
    assert kept(out) == [(KIND_SASS, 90, b"B" * 48), (KIND_PTX, 90, b"D" * 24), (KIND_PTX, 80, b"H" * 8)]
    assert (st.blobs, st.entries_before, st.entries_after, st.emptied_blobs) == (3, 9, 3, 1)
    assert out[:64 + 9] == src.read_bytes()[:64 + 9]          # host code untouched
    assert b"A" * 40 not in out and b"E" * 64 not in out and b"I" * 32 not in out


def test_compacting_twice_changes_nothing(tmp_path):
    data = bytearray(elf(SECTION))
    compact_bytes(data, 90)
    once = bytes(data)
    st = compact_bytes(data, 90)
    assert bytes(data) == once and st.entries_before == st.entries_after == 3


def test_not_an_elf_and_no_fatbin_are_errors():
    with pytest.raises(FatbinError, match="not a 64-bit little-endian ELF"):
        compact_bytes(bytearray(b"MZ" + bytes(100)))
    with pytest.raises(FatbinError, match="no .nv_fatbin section"):
        data = bytearray(elf(b""))
        data[data.index(b".nv_fatbin")+1] = ord("x")  # rename the section
        compact_bytes(data)


def test_truncated_entry_is_refused():
    bad = bytearray(blob(entry(KIND_SASS, 90, b"B" * 48)))
    struct.pack_into("<Q", bad, 16 + 8, 4096)   # entry claims more bytes than the blob has
    with pytest.raises(FatbinError, match="runs past the blob"):
        compact_bytes(bytearray(elf(bytes(bad))))
