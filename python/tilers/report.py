"""What the compiler made of a kernel, as text: kernel.report(), kernel.layouts() and kernel.ir()."""

from __future__ import annotations

import re
import struct

# "kernels.py:268: T.copy A -> A_shared: cp.async 16 bytes" — a report line about a user line
_LOCATED = re.compile(r"^(?P<where>[^\s:]+:\d+): (?P<what>.*)$")


def ir_dumps(stages: list[tuple[str, str]]) -> dict[str, str]:
    """The text IR after each pass (``_tilers.inspect``), by name: "input", "verify", ...; a
    pass that runs again is named "simplify#2" the second time."""
    dumps: dict[str, str] = {}
    for name, text in stages:
        key, count = name, 1
        while key in dumps:
            count += 1
            key = f"{name}#{count}"
        dumps[key] = text
    return dumps


def select_ir(dumps: dict[str, str], which: str) -> str:
    """The dump ``which`` names: "after:<pass>" or "<pass>"; a ValueError lists the names."""
    name = which.removeprefix("after:")
    if name not in dumps:
        raise ValueError(
            f"no pass named {name!r}; kernel.ir('after:<pass>') takes one of: " + ", ".join(dumps)
        )
    return dumps[name]


def format_report(info: dict, layouts: dict | None, resources: dict | None) -> str:
    """A readable multi-line report from KernelInfo's "report" lines.

    Sections: the launch; per user line, what each tile op became (instructions, vector
    widths, cp.async or why not, pipeline stages, swizzles); shared memory, buffer by
    buffer; fragment layouts; and registers when the cubin is at hand.
    """
    launches = [info, *info.get("then", [])]
    if len(launches) == 1:
        block = info.get("block", [0, 1, 1])
        title = (
            f"kernel {info['name']} for {info['arch']}: {block[0]} threads per block, "
            f"{info.get('shared_bytes', 0)} bytes of shared memory"
        )
        return "\n".join(_launch_lines(info, title, layouts, resources, scratch=True))
    # a prim_func of several T.Kernel blocks: one section per kernel, in launch order (the
    # cubin's registers are not told apart per kernel, so they are left out)
    lines = [
        f"{info['name']} for {info['arch']}: {len(launches)} kernels, launched in this order "
        "by every call"
    ]
    for k, launch in enumerate(launches):
        own = None
        if layouts is not None:
            own = {**layouts, "buffers": [b for b in layouts["buffers"] if b.get("kernel", 0) == k]}
        block = launch.get("block", [0, 1, 1])
        title = (
            f"kernel {k} ({launch.get('entry')}): {block[0]} threads per block, "
            f"{launch.get('shared_bytes', 0)} bytes of shared memory"
        )
        lines.append("")
        lines.extend(_launch_lines(launch, title, own, None, scratch=False))
    if info.get("scratch"):
        lines.append("")
        lines.append("global scratch (T.alloc_global), allocated once by every call for its kernels:")
        lines.extend(f"  {text}" for text in scratch_lines(info))
    return "\n".join(lines)


def _launch_lines(
    info: dict, title: str, layouts: dict | None, resources: dict | None, scratch: bool
) -> list[str]:
    """The report of one kernel: `title`, then its sections."""
    shared_bytes = info.get("shared_bytes", 0)
    lines = [title]
    located, layout_lines, other = [], [], []
    for text in info.get("report", []):
        match = _LOCATED.match(text)
        if text.startswith("layout of "):
            layout_lines.append(text.removeprefix("layout of "))
        elif match:
            located.append((match["where"], match["what"]))
        elif not text.startswith("shared memory:"):
            other.append(text)

    if located or other:
        lines.append("")
        lines.append("tile operations:")
        width = max((len(where) for where, _ in located), default=0)
        # a pipelined copy is lowered once per stage of the prologue and once in the loop
        counts: dict[tuple[str, str], int] = {}
        for entry in located:
            counts[entry] = counts.get(entry, 0) + 1
        for (where, what), count in counts.items():
            times = f" (x{count})" if count > 1 else ""
            lines.append(f"  {where.ljust(width)}  {what}{times}")
        lines.extend(f"  {text}" for text in other)

    if layouts is not None:
        shared = [b for b in layouts["buffers"] if b["scope"] == "shared"]
        if shared:
            lines.append("")
            lines.append(f"shared memory ({shared_bytes} bytes):")
            for b in shared:
                swizzle = f", {b['swizzle']['text']}" if b["swizzle"] else ""
                where = f"  ({b['source']})" if b.get("source") else ""
                # buffers placed over each other: their lifetimes do not overlap
                others = [o["name"] for o in shared if o is not b and isinstance(o["offset"], int)
                          and isinstance(b["offset"], int)
                          and o["offset"] < b["offset"] + b["bytes"] and b["offset"] < o["offset"] + o["bytes"]]
                shares = f", shares bytes with {', '.join(others)}" if others else ""
                lines.append(
                    f"  {b['name']}: {b['dtype']}{b['shape']}, {b['bytes']} bytes at offset "
                    f"{b['offset']}{swizzle}{shares}{where}"
                )
    if scratch and info.get("scratch"):
        lines.append("")
        lines.append("global scratch (T.alloc_global), allocated by every call:")
        lines.extend(f"  {text}" for text in scratch_lines(info))
    if layout_lines:
        lines.append("")
        lines.append("fragment layouts:")
        lines.extend(f"  {text}" for text in layout_lines)

    if resources is not None:
        lines.append("")
        frame = resources["stack_frame_bytes"]
        spills = (
            "no local memory (no spills)"
            if frame == 0
            else f"{frame} bytes of stack per thread (register spills or local arrays)"
        )
        lines.append(f"registers: {resources['registers']} per thread; {spills}")
    return lines


def scratch_lines(info: dict) -> list[str]:
    """One line per T.alloc_global buffer of a KernelInfo: ``glse: float32[4, M], 16*M bytes``."""
    names = [size["name"] for size in info.get("sizes", [])]
    return [
        f"{s['name']}: {s['dtype']}[{', '.join(_extent_text(e, names) for e in s['shape'])}], "
        f"{_extent_text(s['bytes'], names)} bytes"
        for s in info.get("scratch", [])
    ]


_OPS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//"}


def _extent_text(extent, sizes: list[str]) -> str:
    """A KernelInfo extent as text: 64, M, 4*M."""
    if isinstance(extent, int):
        return str(extent)
    if "const" in extent:
        return str(extent["const"])
    if "size" in extent:
        return sizes[extent["size"]]
    if extent.get("op") in _OPS:
        a, b = _extent_text(extent["a"], sizes), _extent_text(extent["b"], sizes)
        return f"{a}{_OPS[extent['op']]}{b}" if extent["op"] == "mul" else f"({a} {_OPS[extent['op']]} {b})"
    return f"{extent.get('op')}({_extent_text(extent['a'], sizes)}, {_extent_text(extent['b'], sizes)})"


def format_layouts(layouts: dict) -> str:
    """One paragraph per on-chip buffer: who holds which element, or where it lies."""
    lines = []
    for b in layouts["buffers"]:
        where = f" ({b['source']})" if b.get("source") else ""
        head = f"{b['scope']} {b['name']}: {b['dtype']}{b['shape']}{where}"
        if b["scope"] == "fragment":
            layout = b["layout"]
            lines.append(head)
            lines.append(f"  {layout['text']}")
            for d, digits in enumerate(layout["dims"]):
                lines.append(f"  index {d} = " + (" + ".join(_digit_terms(digits)) or "0"))
        else:
            lines.append(head)
            text = f"  {b['bytes']} bytes at offset {b['offset']}"
            if b["swizzle"]:
                text += f"; {b['layout_text']}"
            lines.append(text)
    return "\n".join(lines)


def _digit_terms(digits: list) -> list[str]:
    """The terms of a dimension's index, fastest digit first: ``tid/4 % 8``, ``8*(reg/2 % 2)``
    (``tid`` is the thread, ``reg`` the register slot of the element)."""
    terms = []
    for g in digits:
        source, stride = ("tid", g["thread"]) if "thread" in g else ("reg", g["slot"])
        value = f"{source} % {g['size']}" if stride == 1 else f"{source}/{stride} % {g['size']}"
        terms.append(value if g["step"] == 1 else f"{g['step']}*({value})")
    return terms


# ----------------------------------------------------------------------------------------
# registers from the cubin: the ELF's .nv.info section, no GPU needed

_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 4


def cubin_resources(cubin: bytes) -> dict | None:
    """{"registers", "stack_frame_bytes"} of the (single) kernel of a cubin, or None when
    the cubin does not carry them where expected."""
    try:
        sections = _elf_sections(cubin)
        info = sections.get(".nv.info")
        if info is None:
            return None
        values = {}
        offset, end = info
        while offset + 4 <= end:
            fmt, attr = cubin[offset], cubin[offset + 1]
            if fmt != _EIFMT_SVAL:
                break
            (size,) = struct.unpack_from("<H", cubin, offset + 2)
            if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and size == 8:
                _, value = struct.unpack_from("<II", cubin, offset + 4)
                values.setdefault(attr, value)
            offset += 4 + size
        if _EIATTR_REGCOUNT not in values:
            return None
        return {
            "registers": values[_EIATTR_REGCOUNT],
            "stack_frame_bytes": values.get(_EIATTR_FRAME_SIZE, 0),
        }
    except (struct.error, IndexError, ValueError):
        return None


def _elf_sections(data: bytes) -> dict[str, tuple[int, int]]:
    """Section name -> (start, end) offsets of a little-endian ELF64 file."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not an ELF64 file")
    (section_offset,) = struct.unpack_from("<Q", data, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    headers = [
        struct.unpack_from("<IIQQQQIIQQ", data, section_offset + k * entry_size)
        for k in range(count)
    ]
    names_start = headers[names_index][4]
    sections = {}
    for header in headers:
        start = names_start + header[0]
        name = data[start : data.index(b"\0", start)].decode()
        sections[name] = (header[4], header[4] + header[5])
    return sections
