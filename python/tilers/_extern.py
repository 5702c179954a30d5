"""The escape hatch to CUDA: prototypes read from `T.import_source` text, so that a
`T.call_extern` is checked against the function it calls at the user's line, and the C
types of inline PTX operands."""

from __future__ import annotations

import re
from dataclasses import dataclass

# C spellings of the element types a tilers dtype can be passed as (a pointer's pointee or
# a value); a type not listed (a template parameter, half2, uint4, a struct) is not checked
C_DTYPES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "__half": "float16",
    "__nv_bfloat16": "bfloat16",
    "nv_bfloat16": "bfloat16",
    "bool": "bool",
    "char": "int8",
    "signed char": "int8",
    "int8_t": "int8",
    "unsigned char": "uint8",
    "uint8_t": "uint8",
    "short": "int16",
    "int16_t": "int16",
    "unsigned short": "uint16",
    "uint16_t": "uint16",
    "int": "int32",
    "signed": "int32",
    "signed int": "int32",
    "int32_t": "int32",
    "unsigned": "uint32",
    "unsigned int": "uint32",
    "uint32_t": "uint32",
    "long long": "int64",
    "long long int": "int64",
    "int64_t": "int64",
    "unsigned long long": "uint64",
    "unsigned long long int": "uint64",
    "uint64_t": "uint64",
}

# qualifiers and specifiers that say nothing of the type
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct", "register"}
_SPECIFIERS = {"static", "inline", "__inline__", "__forceinline__", "__noinline__", "__device__", "__host__",
               "extern", '"C"', "constexpr"}


@dataclass(frozen=True)
class CParam:
    """One parameter of a prototype: its C type as written, and what it is."""

    text: str  # the type as written, without the name: "const half *"
    pointer: bool
    const: bool  # the pointee is const (the function only reads through it)
    dtype: str | None  # the element (pointee or value) dtype, None when not a plain C type


@dataclass(frozen=True)
class Prototype:
    name: str
    returns: CParam
    params: tuple[CParam, ...]
    variadic: bool
    required: int  # parameters without a default value


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _param(text: str, named: bool) -> CParam:
    """A parameter declaration (`const half* __restrict__ dst`) as a CParam."""
    text = " ".join(text.replace("*", " * ").replace("&", " & ").split())
    words = text.split(" ")
    if named and len(words) > 1 and re.fullmatch(r"[A-Za-z_]\w*", words[-1]) and words[-1] not in C_DTYPES \
            and " ".join(words[-2:]) not in C_DTYPES:
        words = words[:-1]
    pointer = "*" in words or "&" in words
    stars = words.index("*") if "*" in words else len(words)
    const = "const" in words[:stars]
    base = " ".join(w for w in words[:stars] if w not in _QUALIFIERS and w not in ("&",))
    return CParam(" ".join(words).replace(" *", "*"), pointer, const, C_DTYPES.get(base))


def _split_params(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [p.strip() for p in out]


def prototypes(sources: list[str]) -> dict[str, list[Prototype]]:
    """The functions the sources define or declare, by name (overloads in order)."""
    found: dict[str, list[Prototype]] = {}
    for text in sources:
        text = _strip_comments(text)
        # a declaration: specifiers and a return type, the name, a parameter list, then a
        # body or a `;`
        for m in re.finditer(r"([A-Za-z_][\w\s\*&:<>,\"]*?)\b([A-Za-z_]\w*)\s*\(([^()]*)\)\s*(?:const\s*)?[{;]", text):
            head, name, params = m.group(1), m.group(2), m.group(3)
            if name in ("if", "for", "while", "switch", "return", "sizeof", "asm", "__asm__"):
                continue
            head = re.sub(r"template\s*<[^>]*>", " ", head)
            head = " ".join(w for w in head.split() if w not in _SPECIFIERS)
            if not head or head.endswith(("=", "return", "(", ",")) or head.split()[-1] in ("else", "do", "return"):
                continue
            parts = _split_params(params)
            variadic = bool(parts) and parts[-1] == "..."
            if variadic:
                parts = parts[:-1]
            if parts == ["void"]:
                parts = []
            plist = tuple(_param(p.split("=")[0], named=True) for p in parts)
            required = sum(1 for p in parts if "=" not in p)
            proto = Prototype(name, _param(head, named=False), plist, variadic, required)
            found.setdefault(name, []).append(proto)
    return found


# inline PTX operand constraints by dtype (the PTX register of each C type)
ASM_CONSTRAINTS = {
    "int16": ("h", "short"),
    "uint16": ("h", "unsigned short"),
    "int32": ("r", "int"),
    "uint32": ("r", "unsigned int"),
    "int64": ("l", "long long"),
    "uint64": ("l", "unsigned long long"),
    "float32": ("f", "float"),
    "float64": ("d", "double"),
}


def asm_operands(template: str) -> int:
    """How many operands (`%0`, `%1`, ...) a PTX template names: one past the highest."""
    names = [int(n) for n in re.findall(r"(?<!%)%(\d+)", template)]
    return max(names) + 1 if names else 0


def asm_function(name: str, template: str, outputs: list[str], inputs: list[str], memory: bool) -> str:
    """A device function holding the inline PTX: outputs by pointer, inputs by value."""
    params = [f"{ASM_CONSTRAINTS[d][1]}* o{k}" for k, d in enumerate(outputs)]
    params += [f"{ASM_CONSTRAINTS[d][1]} i{k}" for k, d in enumerate(inputs)]
    outs = ", ".join(f'"={ASM_CONSTRAINTS[d][0]}"(*o{k})' for k, d in enumerate(outputs))
    ins = ", ".join(f'"{ASM_CONSTRAINTS[d][0]}"(i{k})' for k, d in enumerate(inputs))
    escaped = template.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    clobber = ' : "memory"' if memory else ""
    return (
        f"static __device__ __forceinline__ void {name}({', '.join(params)}) "
        f'{{ asm volatile("{escaped}" : {outs} : {ins}{clobber}); }}\n'
    )
