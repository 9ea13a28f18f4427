"""A quick test whether a shared object may name libtorch in its dynamic string table.

A consumer search looks at every shared object on sys.path (hundreds, with SciPy and
friends), and building a pyelftools ELFFile for each adds up (bench/README.rst). An object cannot
link libc10 or libtorch without naming it in .dynstr, so a bytes search there, located
through the program headers with struct, rules most objects out; pyelftools then decides
on the few that remain. Anything this parser does not understand counts as a candidate.
"""

from __future__ import annotations

import mmap
import struct
from typing import Union

Image = Union[bytes, mmap.mmap]

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_STRTAB, _DT_STRSZ = 0, 5, 10
_TORCH_NAMES = (b"libc10", b"libtorch")
# ELF class -> (e_phoff format and offset, e_phentsize offset, program header, dynamic entry)
_LAYOUT = {
    1: ("I", 28, 42, "IIIIIIII", "iI"),
    2: ("Q", 32, 54, "IIQQQQQQ", "qQ"),
}


def may_name_torch(data: Image) -> bool:
    """Whether the dynamic string table of the ELF image `data` may name libc10/libtorch."""
    span = dynstr_span(data)
    if span is None:
        return True
    return any(data.find(name, span[0], span[1]) >= 0 for name in _TORCH_NAMES)


def dynstr_span(data: Image) -> tuple[int, int] | None:
    """(start, end) file offsets of .dynstr from PT_DYNAMIC's DT_STRTAB/DT_STRSZ, or None."""
    try:
        return _span(data)
    except (struct.error, IndexError, ValueError):
        return None


def _span(data: Image) -> tuple[int, int] | None:
    if bytes(data[:4]) != b"\x7fELF" or data[4] not in _LAYOUT:
        return None
    order = "<" if data[5] == 1 else ">"
    offset_format, phoff_at, phent_at, program, dynamic = _LAYOUT[data[4]]
    (phoff,) = struct.unpack_from(order + offset_format, data, phoff_at)
    phentsize, phnum = struct.unpack_from(order + "HH", data, phent_at)
    headers = [_program_header(data, order + program, phoff + i * phentsize, data[4])
               for i in range(phnum)]
    dyn = next((h for h in headers if h[0] == _PT_DYNAMIC), None)
    if dyn is None:
        return None
    strtab, strsz = _string_table(data, order + dynamic, dyn[1], dyn[3])
    if strtab is None or strsz is None:
        return None
    for kind, offset, vaddr, filesz in headers:
        if kind == _PT_LOAD and vaddr <= strtab < vaddr + filesz:
            start = strtab - vaddr + offset
            return start, start + strsz
    return None


def _program_header(data: Image, layout: str, at: int,
                    elfclass: int) -> tuple[int, int, int, int]:
    """(p_type, p_offset, p_vaddr, p_filesz): the fields sit in another order per class."""
    fields = struct.unpack_from(layout, data, at)
    if elfclass == 2:
        return fields[0], fields[2], fields[3], fields[5]
    return fields[0], fields[1], fields[2], fields[4]


def _string_table(data: Image, layout: str, offset: int,
                  size: int) -> tuple[int | None, int | None]:
    step = struct.calcsize(layout)
    strtab = strsz = None
    for at in range(offset, offset + size - step + 1, step):
        tag, value = struct.unpack_from(layout, data, at)
        if tag == _DT_NULL:
            break
        if tag == _DT_STRTAB:
            strtab = value
        elif tag == _DT_STRSZ:
            strsz = value
    return strtab, strsz
