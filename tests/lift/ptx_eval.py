"""A small evaluator of the PTX the ALU lift rules emit, written from the PTX ISA's definitions (not
from warpy's value rules), so that a lifted program and the interpreter's run of its SASS text can be
compared by what they compute. Registers are unsigned 32-bit (64-bit for %td*), predicates 0/1."""

from __future__ import annotations

import re

M32 = 0xFFFFFFFF
M64 = (1 << 64) - 1


def s32(x: int) -> int:
    x &= M32
    return x - (1 << 32) if x >> 31 else x


def lop3(lut: int, a: int, b: int, c: int) -> int:
    """PTX lop3.b32: bit i of the result is bit (a_i << 2 | b_i << 1 | c_i) of the look-up table
    (ta = 0xF0, tb = 0xCC, tc = 0xAA)."""
    r = 0
    for i in range(32):
        idx = (a >> i & 1) << 2 | (b >> i & 1) << 1 | (c >> i & 1)
        r |= (lut >> idx & 1) << i
    return r


def prmt(a: int, b: int, sel: int) -> int:
    """PTX prmt.b32 (default mode): bytes 0-3 from a, 4-7 from b; each selector nibble picks a byte,
    its bit 3 replicating that byte's sign bit."""
    src = (b & M32) << 32 | (a & M32)
    r = 0
    for k in range(4):
        nib = sel >> (4 * k) & 0xF
        byte = src >> (8 * (nib & 7)) & 0xFF
        if nib & 8:
            byte = 0xFF if byte & 0x80 else 0
        r |= byte << (8 * k)
    return r


def run_ptx(body: list[str], regs: dict[str, int]) -> dict[str, int]:
    v = dict(regs)
    v["%pt"], v["%pf"] = 1, 0

    def val(tok: str) -> int:
        tok = tok.strip()
        if tok.startswith("!"):
            return 1 - val(tok[1:])
        if tok.startswith("%"):
            return v.get(tok, 0)
        return int(tok, 0)

    code = [ln.strip().rstrip(";") for ln in body]
    labels = {ln[:-1]: n for n, ln in enumerate(code) if ln.endswith(":")}
    pc = 0
    while pc < len(code):
        line = code[pc]
        pc += 1
        if not line or line.startswith("//") or line.endswith(":") or line == "}":
            continue
        m = re.match(r"@(!?)(%\w+) (.*)", line)
        if m:
            if val(m.group(2)) == (1 if m.group(1) else 0):
                continue
            line = m.group(3)
        if line == "exit":
            break
        op, _, rest = line.partition(" ")
        if op == "bra":
            pc = labels[rest.strip()]
            continue
        if op.startswith("mov.b64") and rest.startswith("{"):
            lo, hi, src = re.match(r"\{(%\w+), (%\w+)\}, (\S+)", rest).groups()  # type: ignore[union-attr]
            x = val(src)
            v[lo], v[hi] = x & M32, (x >> 32) & M32
            continue
        if op.startswith("mov.b64"):
            d, lo, hi = re.match(r"(%\w+), \{(%\w+), (%\w+)\}", rest).groups()  # type: ignore[union-attr]
            v[d] = val(lo) | val(hi) << 32
            continue
        if op.startswith("setp."):
            parts = op.split(".")
            cmp, typ = parts[1], parts[-1]
            logic = parts[2] if len(parts) == 4 else None
            dests, a, b, *c = [t.strip() for t in rest.split(",")]
            x, y = val(a), val(b)
            if typ == "s32":
                x, y = s32(x), s32(y)
            t = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[cmp]
            z = val(c[0]) if c else None
            comb = {"and": lambda s: s and z, "or": lambda s: s or z, "xor": lambda s: s != bool(z), None: lambda s: s}[logic]
            ds = dests.split("|")
            v[ds[0]] = int(bool(comb(t)))
            if len(ds) > 1:
                v[ds[1]] = int(bool(comb(not t)))
            continue
        d, *srcs = [t.strip() for t in rest.split(",")]
        a = [val(s) for s in srcs]
        if op in ("mov.b32", "mov.u32", "mov.pred"):
            r = a[0]
        elif op == "add.u32":
            r = a[0] + a[1]
        elif op == "sub.u32":
            r = a[0] - a[1]
        elif op == "mad.lo.u32":
            r = a[0] * a[1] + a[2]
        elif op == "mul.hi.u32":
            r = ((a[0] & M32) * (a[1] & M32)) >> 32
        elif op == "mul.hi.s32":
            r = (s32(a[0]) * s32(a[1])) >> 32
        elif op in ("mul.wide.u32", "mul.wide.s32"):
            x, y = (a[0] & M32, a[1] & M32) if op.endswith("u32") else (s32(a[0]), s32(a[1]))
            v[d] = (x * y) & M64
            continue
        elif op == "add.u64":
            v[d] = (a[0] + a[1]) & M64
            continue
        elif op == "shl.b32":
            r = a[0] << a[1] if a[1] < 32 else 0
        elif op == "shr.u32":
            r = a[0] >> a[1] if a[1] < 32 else 0
        elif op == "shr.s32":
            r = s32(a[0]) >> min(a[1], 31)
        elif op == "shf.l.clamp.b32":  # the upper word of (b:a) << min(c, 32)
            r = (((a[1] & M32) << 32 | (a[0] & M32)) << min(a[2], 32)) >> 32
        elif op == "shf.r.clamp.b32":  # the lower word of (b:a) >> min(c, 32)
            r = ((a[1] & M32) << 32 | (a[0] & M32)) >> min(a[2], 32)
        elif op == "prmt.b32":
            r = prmt(a[0], a[1], a[2])
        elif op in ("min.s32", "max.s32"):
            r = (min if op.startswith("min") else max)(s32(a[0]), s32(a[1]))
        elif op in ("min.u32", "max.u32"):
            r = (min if op.startswith("min") else max)(a[0] & M32, a[1] & M32)
        elif op == "lop3.b32":
            r = lop3(a[3], a[0] & M32, a[1] & M32, a[2] & M32)
        elif op == "selp.b32":
            r = a[0] if a[2] else a[1]
        elif op == "not.b32":
            r = ~a[0]
        elif op == "neg.s32":
            r = -a[0]
        elif op == "not.pred":
            r = 1 - a[0]
        elif op == "and.b32":
            r = a[0] & a[1]
        else:
            raise AssertionError(f"the evaluator does not know {op}")
        v[d] = r & M32
    return v
