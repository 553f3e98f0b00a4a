"""What the integer/ALU, compare, predicate and conversion instructions compute: one definition,
used by the host checker (`warpy.check`, every lane of every warp) and by the isa's interpreter
(`warpy.isa.interp`, one warp, no memory), and compared with the lifter's PTX by tests/lift.

Values are `warpy.isa.values` lane values: Python ints where every lane holds the same value,
numpy uint64 vectors of 32 lanes otherwise, reduced to 32 bits. A rule is called as
`rule(env, warp, compiled, lanes)`:

- env: the machine; only `env.params` (kernel parameter name -> value) is read, by 64-bit `LDC`;
- warp: anything with a `regs` dict;
- compiled: the instruction (`instr`), one reader per operand (`get[k](warp)`), one writer per
  operand (`put[k](warp, value, lanes)`) and a dict for the rule's own caches (`extra`);
- lanes: None for every lane of the warp's current group, else a bool vector of the lanes taking part.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

import numpy as np

from warpy.isa.values import M32, first
from warpy.isa.operands import CBank, RVec, URVec, elem_name
from warpy.isa.families import alu as isa
from warpy.isa.registry import Registry

V = np.ndarray


class ValueRule(Protocol):
    def __call__(self, env: Any, w: Any, c: Any, lanes: Optional[np.ndarray], /) -> None: ...


#: the value rules, by opcode record
VALUES: Registry[ValueRule] = Registry("value rule")
value = VALUES.register


def _s32(x: Any) -> Any:
    if isinstance(x, V):
        return x.astype(np.int64) - ((x.astype(np.int64) >> 31) & 1) * (1 << 32)
    return x - (1 << 32) if x >> 31 else x


def _lut(lut: int, a: Any, b: Any, c: Any) -> Any:
    out: Any = 0
    if isinstance(a, V) or isinstance(b, V) or isinstance(c, V):
        a, b, c = (np.asarray(x, dtype=np.uint64) for x in (a, b, c))
        out = np.zeros(32, dtype=np.uint64)
    for i in range(8):
        if lut >> i & 1:
            out = out | ((a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c))
    return out & M32


def _u(x: Any) -> Any:
    return np.asarray(x, dtype=np.uint64) if isinstance(x, V) else x


@value(isa.IADD3, isa.UIADD3)
def _iadd3(m: Any, w: Any, c: Any, lanes: Any) -> None:
    g = c.get
    if len(g) == 6:
        v = (g[3](w) + g[4](w) + g[5](w)) & M32
    else:
        v = (g[1](w) + g[2](w) + g[3](w)) & M32
    c.put[0](w, v, lanes)


def _pair(w: Any, op: Any) -> Any:
    lo = w.regs.get(elem_name(op.name, 0), 0)
    hi = w.regs.get(elem_name(op.name, 1), 0)
    return _u(lo) | (_u(hi) << 32) if isinstance(lo, V) or isinstance(hi, V) else lo | (hi << 32)


def _put_pair(m: Any, w: Any, c: Any, op: Any, v: Any, lanes: Any) -> None:
    key = ("pair", id(op))
    ws = c.extra.get(key)
    if ws is None:
        from warpy.isa.values import writer
        from warpy.isa.operands import R, UR

        kind = R if isinstance(op, RVec) else UR
        ws = c.extra[key] = (writer(kind(elem_name(op.name, 0))), writer(kind(elem_name(op.name, 1))))
    if isinstance(v, V):
        v = v.astype(np.uint64)
        ws[0](w, v & np.uint64(M32), lanes)
        ws[1](w, (v >> np.uint64(32)) & np.uint64(M32), lanes)
    else:
        v &= (1 << 64) - 1
        ws[0](w, v & M32, lanes)
        ws[1](w, (v >> 32) & M32, lanes)


@value(isa.IMAD, isa.UIMAD)
def _imad(m: Any, w: Any, c: Any, lanes: Any) -> None:
    i = c.instr
    g = c.get
    a, b = g[1](w), g[2](w)
    signed = "U32" not in i.mods
    if "WIDE" in i.mods:
        cc = i.ops[3]
        # a register c is 64-bit (a pair: the vector, or its first register in a parsed coloured text)
        from warpy.isa.operands import R, UR

        c64 = _pair(w, cc) if isinstance(cc, (RVec, URVec)) or (isinstance(cc, (R, UR)) and cc.name not in ("RZ", "URZ")) else g[3](w)
        if signed:
            a, b = _s32(a), _s32(b)
            if isinstance(a, V) or isinstance(b, V):
                v = (np.asarray(a, dtype=np.int64) * np.asarray(b, dtype=np.int64)).astype(np.uint64) + _u(c64)
            else:
                v = (a * b + c64) & ((1 << 64) - 1)
        else:
            v = _u(a) * _u(b) + _u(c64) if (isinstance(a, V) or isinstance(b, V) or isinstance(c64, V)) else (a * b + c64)
        _put_pair(m, w, c, i.ops[0], v, lanes)
        return
    cv = g[3](w)
    if "HI" in i.mods:
        if signed:
            p = np.asarray(_s32(a), dtype=np.int64) * np.asarray(_s32(b), dtype=np.int64) if (isinstance(a, V) or isinstance(b, V)) else _s32(a) * _s32(b)
            hi = (p >> 32) & M32
        else:
            hi = (_u(a) * _u(b)) >> 32 if (isinstance(a, V) or isinstance(b, V)) else (a * b) >> 32
        v = (_u(hi) + cv) & M32 if isinstance(hi, V) else (hi + cv) & M32
    else:
        v = (a * b + cv) & M32
    c.put[0](w, v, lanes)


@value(isa.LEA, isa.ULEA)
def _lea(m: Any, w: Any, c: Any, lanes: Any) -> None:
    g = c.get
    a, b, sh = g[1](w), g[2](w), c.instr.ops[3].value
    if "HI" in c.instr.mods:
        v = ((a >> (32 - sh)) + b) & M32
    else:
        v = ((a << sh) + b) & M32
    c.put[0](w, v, lanes)


@value(isa.LOP3, isa.ULOP3)
def _lop3(m: Any, w: Any, c: Any, lanes: Any) -> None:
    g = c.get
    if len(g) == 7:
        r = _lut(c.instr.ops[5].value, g[2](w), g[3](w), g[4](w))
        c.put[0](w, (r != 0) if isinstance(r, V) else r != 0, lanes)
        c.put[1](w, r, lanes)
    else:
        c.put[0](w, _lut(c.instr.ops[4].value, g[1](w), g[2](w), g[3](w)), lanes)


@value(isa.SHF, isa.USHF)
def _shf(m: Any, w: Any, c: Any, lanes: Any) -> None:
    g = c.get
    mods = c.instr.mods
    a, s, b = g[1](w), g[2](w), g[3](w)
    vec = any(isinstance(x, V) for x in (a, s, b))
    if vec:
        a, s, b = (np.broadcast_to(np.asarray(x, dtype=np.uint64), (32,)).astype(object) for x in (a, s, b))
        out = np.array([_shf1(mods, int(x), int(y), int(z)) for x, y, z in zip(a, s, b)], dtype=np.uint64)
        c.put[0](w, out, lanes)
        return
    c.put[0](w, _shf1(mods, a, s, b), lanes)


def _shf1(mods: tuple[str, ...], a: int, s: int, b: int) -> int:
    s = min(s & 0xFFFFFFFF, 32)
    wide = (b << 32) | a
    if "L" in mods:
        return ((wide << s) >> 32) & M32 if "HI" in mods else (a << s) & M32
    if "HI" in mods:
        if "S32" in mods:
            return int(_s32(b) >> s) & M32
        return (b >> s) & M32
    return (wide >> s) & M32


@value(isa.MOV, isa.UMOV, isa.R2UR)
def _mov(m: Any, w: Any, c: Any, lanes: Any) -> None:
    if len(c.get) == 3:  # R2UR p, d, a
        c.put[0](w, True, lanes)
        c.put[1](w, c.get[2](w), lanes)
        return
    c.put[0](w, c.get[1](w), lanes)


@value(isa.SEL, isa.USEL)
def _sel(m: Any, w: Any, c: Any, lanes: Any) -> None:
    g = c.get
    a, b, p = g[1](w), g[2](w), g[3](w)
    if isinstance(p, V):
        v = np.where(p, np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64))
    else:
        v = a if p else b
    c.put[0](w, v, lanes)


def _prmt1(a: int, sel: int, b: int) -> int:
    src = (b << 32) | a
    out = 0
    for k in range(4):
        nib = (sel >> (4 * k)) & 0xF
        byte = (src >> (8 * (nib & 7))) & 0xFF
        if nib & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * k)
    return out


@value(isa.PRMT, isa.UPRMT)
def _prmt(m: Any, w: Any, c: Any, lanes: Any) -> None:
    g = c.get
    a, sel, b = g[1](w), c.instr.ops[2].value, g[3](w)
    if isinstance(a, V) or isinstance(b, V):
        aa = np.broadcast_to(np.asarray(a, dtype=np.uint64), (32,))
        bb = np.broadcast_to(np.asarray(b, dtype=np.uint64), (32,))
        v: Any = np.array([_prmt1(int(x), sel, int(y)) for x, y in zip(aa, bb)], dtype=np.uint64)
    else:
        v = _prmt1(a, sel, b)
    c.put[0](w, v, lanes)


_CMP = {
    "EQ": lambda x, y: x == y, "NE": lambda x, y: x != y, "LT": lambda x, y: x < y,
    "LE": lambda x, y: x <= y, "GT": lambda x, y: x > y, "GE": lambda x, y: x >= y,
}


@value(isa.ISETP, isa.UISETP)
def _setp(m: Any, w: Any, c: Any, lanes: Any) -> None:
    g = c.get
    mods = c.instr.mods
    x, y = g[2](w), g[3](w)
    if "U32" not in mods:
        x, y = _s32(x), _s32(y)
    elif isinstance(x, V) or isinstance(y, V):
        x, y = np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64)
    t = _CMP[mods[0]](x, y)
    z = g[4](w)
    logic = mods[-1]
    vec = isinstance(t, V) or isinstance(z, V)
    if vec:
        t, z = np.asarray(t, dtype=bool), np.asarray(z, dtype=bool)
        p = (t & z) if logic == "AND" else (t | z) if logic == "OR" else (t ^ z)
        q = (~t & z) if logic == "AND" else (~t | z) if logic == "OR" else (~t ^ z)
    else:
        t, z = bool(t), bool(z)
        p = (t and z) if logic == "AND" else (t or z) if logic == "OR" else (t != z)
        q = ((not t) and z) if logic == "AND" else ((not t) or z) if logic == "OR" else ((not t) != z)
    c.put[0](w, p, lanes)
    c.put[1](w, q, lanes)


@value(isa.PLOP3, isa.UPLOP3)
def _plop3(m: Any, w: Any, c: Any, lanes: Any) -> None:
    g = c.get
    a, b, cc = g[2](w), g[3](w), g[4](w)
    lut = c.instr.ops[5].value
    if any(isinstance(x, V) for x in (a, b, cc)):
        a, b, cc = (np.broadcast_to(np.asarray(x, dtype=bool), (32,)).astype(np.int64) for x in (a, b, cc))
        idx = (a << 2) | (b << 1) | cc
        v = ((lut >> idx) & 1).astype(bool)
    else:
        v = bool((lut >> ((int(a) << 2) | (int(b) << 1) | int(cc))) & 1)
    c.put[0](w, v, lanes)


@value(isa.S2R, isa.S2UR)
def _s2r(m: Any, w: Any, c: Any, lanes: Any) -> None:
    c.put[0](w, c.get[1](w), lanes)


@value(isa.LDC, isa.ULDC, isa.LDCU)
def _ldc(m: Any, w: Any, c: Any, lanes: Any) -> None:
    op = c.instr.ops[1]
    assert isinstance(op, CBank)
    if "64" in c.instr.mods:
        v = m.params.get(op.offset, 0) if isinstance(op.offset, str) else 0
        _put_pair(m, w, c, c.instr.ops[0], v, lanes)
        return
    c.put[0](w, c.get[1](w), lanes)


@value(isa.VOTEU)
def _vote(m: Any, w: Any, c: Any, lanes: Any) -> None:
    p = c.get[-1](w)
    act = np.ones(32, dtype=bool) if lanes is None else lanes
    pv = np.broadcast_to(np.asarray(p, dtype=bool), (32,)) & act
    anyv = bool(pv.any())
    allv = bool((pv | ~act).all())
    res = anyv if "ANY" in c.instr.mods else allv
    ballot = int(np.packbits(pv, bitorder="little").view("<u4")[0])
    from warpy.isa.operands import UP

    if len(c.get) == 2:
        d = c.instr.ops[0]
        c.put[0](w, res if isinstance(d, UP) else ballot, lanes)
    else:
        c.put[0](w, ballot, lanes)
        c.put[1](w, res, lanes)


def _bf16(bits: Any, kind: str) -> Any:
    f = np.asarray(bits, dtype=np.uint64).astype(np.uint32).view(np.float32)
    if kind == "F16":
        return f.astype(np.float16).view(np.uint16).astype(np.uint64)
    u = f.view(np.uint32).astype(np.uint64)
    r = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return r & np.uint64(0xFFFF)


@value(isa.F2FP)
def _f2fp(m: Any, w: Any, c: Any, lanes: Any) -> None:
    a, b = c.get[1](w), c.get[2](w)
    kind = "F16" if "F16" in c.instr.mods[:1] else "BF16"
    hi, lo = _bf16(np.atleast_1d(a), kind), _bf16(np.atleast_1d(b), kind)
    v = (hi << np.uint64(16)) | lo
    if v.size == 1 and not isinstance(a, V) and not isinstance(b, V):
        c.put[0](w, int(v[0]), lanes)
    else:
        c.put[0](w, np.broadcast_to(v, (32,)).copy(), lanes)


@value(isa.FADD)
def _fadd(m: Any, w: Any, c: Any, lanes: Any) -> None:
    a, b = c.get[1](w), c.get[2](w)
    fa = np.atleast_1d(np.asarray(a, dtype=np.uint64)).astype(np.uint32).view(np.float32)
    fb = np.atleast_1d(np.asarray(b, dtype=np.uint64)).astype(np.uint32).view(np.float32)
    v = (fa + fb).astype(np.float32).view(np.uint32).astype(np.uint64)
    if v.size == 1 and not isinstance(a, V) and not isinstance(b, V):
        c.put[0](w, int(v[0]), lanes)
    else:
        c.put[0](w, np.broadcast_to(v, (32,)).copy(), lanes)


