"""The megakernel's instruction: 64 words of 32 bits (256 bytes), every field declared once here.

The host packs instructions with this table and the device interpreter decodes them with the same
table, so this module is a leaf: it imports nothing of the graph, the tiling or the scheduler
(only the standard library and `warpy.errors`), and the kernels may import it without importing
upward. `docs/megakernel.md` prints the table generated from `FIELDS`.

Layout, chosen for the interpreter:
- word 0 is the opcode alone, so one load and one indexed branch dispatch an instruction;
- the header (words 1-8) holds what every body reads: counts, epilogue flags, eps, tile extents and
  the K range;
- five operand slots of five words: a tensor-map index into the launch's table, the operand's
  broadcast mask over the tile's dimensions, the map's rank, and the box origin in map coordinates
  (innermost first, as TMA takes them);
- eight waits of two words (counter index; target per call and the stage it guards), then eight
  arrives of one word (counter index);
- one word an operand the host derives from its map's box so that no op body re-derives it: the
  bytes one copy moves (what the loader arms its barrier with) and where the box's elements land in
  shared memory (the packed box: element strides along the tile's rows and columns, 0 along an axis
  the operand broadcasts over). A waiter waits until the counter reaches target x call
  number (compared as a signed 32-bit difference, so the counters may wrap), which is why no call
  resets the counters.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from warpy.errors import WarpyError

WORDS = 64
WORD_BITS = 32
BYTES = WORDS * WORD_BITS // 8

#: opcodes (word 0): one interpreter body each
NOOP, GEMM, UNARY, BINARY, SILU_MUL, RMSNORM, ATTENTION, ATTENTION_COMBINE, ROPE = range(9)
OPCODES: dict[str, int] = {"noop": NOOP, "gemm": GEMM, "unary": UNARY, "binary": BINARY, "silu_mul": SILU_MUL,
                           "rmsnorm": RMSNORM, "attention": ATTENTION, "attention_combine": ATTENTION_COMBINE,
                           "rope": ROPE}
#: activation codes (GEMM epilogue and UNARY); none is a copy
ACT_NONE, ACT_RELU, ACT_SILU, ACT_GELU_TANH = range(4)
ACTIVATIONS: dict[str, int] = {"none": ACT_NONE, "relu": ACT_RELU, "silu": ACT_SILU, "gelu": ACT_GELU_TANH}
#: BINARY's operation
BIN_ADD, BIN_MUL = range(2)
BINOPS: dict[str, int] = {"add": BIN_ADD, "mul": BIN_MUL}

#: how many of each repeated slot an instruction has
OPERANDS = 5
COORDS = 4
WAITS = 8
ARRIVES = 8

#: operand axis codes (op[i].axes): 0-3 are output dimensions from the innermost
AXIS_K = 4
#: a roped pair tile's halves (two, D / 2 apart: `warpy.mega.tiling.rope_pairs`)
AXIS_PAIR = 5
AXIS_FIXED = 7

#: operand slot roles per opcode (slot 0 is always the output)
OPERAND_ROLES: dict[int, tuple[str, ...]] = {
    NOOP: (),
    GEMM: ("out", "a", "b", "bias", "residual"),  # with `norm`: slot 4 is the norm weight
    UNARY: ("out", "x"),
    BINARY: ("out", "a", "b"),
    SILU_MUL: ("out", "gate", "up"),
    RMSNORM: ("out", "x", "weight"),
    ATTENTION: ("out", "q", "k", "v"),
    ATTENTION_COMBINE: ("out", "partial"),
    ROPE: ("out", "x", "cos", "sin"),
}


@dataclass(frozen=True)
class Field:
    """Bits [lo, lo + bits) of word `word`."""

    name: str
    word: int
    lo: int
    bits: int
    doc: str

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1

    @property
    def hi(self) -> int:
        """The highest bit the field holds."""
        return self.lo + self.bits - 1


def _header() -> list[Field]:
    return [
        Field("opcode", 0, 0, 8, "the body to run: noop 0, gemm 1, unary 2, binary 3, silu_mul 4, rmsnorm 5, "
              "attention 6, attention_combine 7, rope 8"),
        Field("index", 1, 0, 32, "the instruction's place in the global order (status words and hang dumps name it)"),
        Field("node", 2, 0, 16, "the lowered graph node the instruction is a tile of"),
        Field("n_operands", 2, 16, 4, "operand slots in use (slot 0 is the output)"),
        Field("n_waits", 2, 20, 4, "wait slots in use"),
        Field("n_arrives", 2, 24, 4, "arrive slots in use"),
        Field("activation", 3, 0, 4, "none 0 (a copy for unary), relu 1, silu 2, gelu-tanh 3"),
        Field("binop", 3, 4, 2, "binary: add 0, mul 1"),
        Field("bias", 3, 6, 1, "gemm: add operand 3 (broadcast by its mask) before the activation"),
        Field("residual", 3, 7, 1, "gemm: add operand 4 (broadcast by its mask) after the activation"),
        Field("b_kmajor", 3, 8, 1, "gemm: B is (N, K), K contiguous (x·Wᵀ); 0: B is (K, N) (x·W)"),
        Field("early", 3, 9, OPERANDS, "bit i: operand i reads what no instruction of the launch writes (a graph "
              "input, a weight): its copies need no counter wait and may be issued before the load-stage waits"),
        Field("causal", 3, 14, 1, "attention: query t sees cache rows below k_end - T + 1 + t (else below k_end)"),
        Field("group", 3, 15, 8, "attention, attention_combine: query heads a KV head (G; a tile's rows are T x G)"),
        Field("glu", 3, 23, 1, "gemm: operand 3 is a second weight of B's shape (up; SwiGLU's first half fused): "
              "out = silu(a·Bᵀ)·(a·B3ᵀ), rounded once; no bias, residual or activation"),
        Field("norm", 3, 24, 1, "gemm: the rmsnorm of A's rows fused (decode tiles): operand 4 is the norm weight w "
              "(a row of K), eps its epsilon; A's elements become bf16(a·w) in shared memory and each output row is "
              "scaled by rstd = 1/sqrt(mean(a²) + eps) before the epilogue; no residual"),
        Field("rope", 3, 25, 1, "gemm: operand 3 is the rope tables (2, T, D: cos, then sin) and the product, "
              "a whole head of D a tile, is roped before it is rounded: out[c] = x[c]·cos[c] ∓ x[c ± D/2]·sin[c] "
              "(the first half subtracts); no bias, residual or activation"),
        Field("rope_pair", 3, 26, 5, "a roped gemm whose tile holds pairs of w = tile_n / 2 columns of a head "
              "(tile_n < D): D / 16; its second warpgroup's block is stored D / 2 columns after the first (else 0: "
              "tile_n / 2 after)"),
        Field("eps", 4, 0, 32, "rmsnorm, a gemm with `norm`: eps as fp32 bits, taken from the graph"),
        Field("tile_m", 5, 0, 16, "rows of the tile (gemm: M extent; elementwise, rmsnorm: rows; attention: T x G "
              "query rows; attention_combine: G)"),
        Field("tile_n", 5, 16, 16, "columns of the tile (gemm: N extent; elementwise: columns; attention, "
              "attention_combine: head_dim D)"),
        Field("k_begin", 6, 0, 32, "gemm: first K of the tile's reduction; attention: the chunk's first cache row"),
        Field("k_end", 7, 0, 32, "gemm: one past the last K; rmsnorm: the row width; attention: the cache length "
              "(rows attended); attention_combine: the chunks S"),
        Field("k_step", 8, 0, 16, "gemm: K of one operand box (the loader's step); rmsnorm: columns of one box; "
              "attention: cache rows of one K or V box; attention_combine: chunks of one partials box"),
        Field("k_boxes", 8, 16, 4, "gemm: K boxes a stage holds (a page: the A boxes, then the B boxes)"),
        Field("k_stages", 8, 20, 12, "gemm: stages of the tile's K range; rmsnorm: boxes along a row; attention: "
              "K (and V) boxes of the chunk; attention_combine: partials boxes"),
    ]


OPERAND_BASE = 9
OPERAND_WORDS = 1 + COORDS
WAIT_BASE = OPERAND_BASE + OPERANDS * OPERAND_WORDS
WAIT_WORDS = 2
ARRIVE_BASE = WAIT_BASE + WAITS * WAIT_WORDS


def _operands() -> list[Field]:
    out = []
    for i in range(OPERANDS):
        w = OPERAND_BASE + i * OPERAND_WORDS
        out += [
            Field(f"op{i}.tmap", w, 0, 12, "index of the operand's tensor map in the launch's table"),
            Field(f"op{i}.rank", w, 12, 3, "the tensor map's rank (1..4)"),
            Field(f"op{i}.axes", w, 15, 3 * COORDS, "per map dimension c, bits 3c..3c+2: the tile axis it runs "
                  "along (0-3: output dimension counted from the innermost; 4: gemm K; 5: a roped pair tile's two "
                  "halves; 7: fixed, a selected index); tile axes no map dimension runs along broadcast"),
        ]
        out += [Field(f"op{i}.coord{c}", w + 1 + c, 0, 32, "box origin along map dimension c (elements)")
                for c in range(COORDS)]
    return out


def _waits() -> list[Field]:
    out = []
    for i in range(WAITS):
        w = WAIT_BASE + i * WAIT_WORDS
        out += [
            Field(f"wait{i}.counter", w, 0, 32, "index of the counter to wait on"),
            Field(f"wait{i}.target", w + 1, 0, 24, "arrivals per call: wait until counter - target x call >= 0"),
            Field(f"wait{i}.before_store", w + 1, 31, 1, "1: wait before the first store (buffer reuse); "
                  "0: before the first load"),
        ]
    return out


def _arrives() -> list[Field]:
    return [Field(f"arrive{i}", ARRIVE_BASE + i, 0, 32, "index of a counter to add 1 to after the stores completed")
            for i in range(ARRIVES)]


BOX_BASE = ARRIVE_BASE + ARRIVES


def _boxes() -> list[Field]:
    out = []
    for i in range(OPERANDS):
        out += [
            Field(f"op{i}.box_16", BOX_BASE + i, 0, 14, "bytes of one box of the operand's map / 16 (a copy's "
                  "transaction bytes; boxes are whole 16-byte units)"),
            Field(f"op{i}.row_stride", BOX_BASE + i, 14, 9, "elements between tile rows (axis 1) in the box as it "
                  "lands in shared memory (packed, innermost first); 0: broadcast along rows"),
            Field(f"op{i}.col_stride", BOX_BASE + i, 23, 9, "elements between tile columns (axis 0) in the landed box; "
                  "0: broadcast along columns"),
        ]
    return out


SCALE_WORD = BOX_BASE + OPERANDS


def _tail() -> list[Field]:
    return [Field("scale", SCALE_WORD, 0, 32, "attention: the softmax scale x log2(e) as fp32 bits (scores in "
                  "base 2, for MUFU.EX2)")]


FIELDS: tuple[Field, ...] = tuple(_header() + _operands() + _waits() + _arrives() + _boxes() + _tail())
BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
#: words no field uses (zero)
RESERVED_WORDS: tuple[int, ...] = tuple(w for w in range(WORDS) if all(f.word != w for f in FIELDS))


def _check_layout() -> None:
    """The declaration itself: fields inside their word, no two fields sharing a bit."""
    used: dict[tuple[int, int], str] = {}
    for f in FIELDS:
        if not (0 <= f.word < WORDS and f.bits >= 1 and 0 <= f.lo and f.lo + f.bits <= WORD_BITS):
            raise AssertionError(f"field {f.name} does not fit in a word")
        for b in range(f.lo, f.lo + f.bits):
            if (f.word, b) in used:
                raise AssertionError(f"fields {used[(f.word, b)]} and {f.name} share bit {b} of word {f.word}")
            used[(f.word, b)] = f.name


_check_layout()


def fp32_bits(x: float) -> int:
    """The fp32 bit pattern of `x` (rounded to nearest)."""
    return int(struct.unpack("<I", struct.pack("<f", x))[0])


def fp32_value(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0])


def pack(values: Mapping[str, int], what: str = "instruction") -> list[int]:
    """The 64 words holding `values` (field name -> unsigned value; fields not named are 0). A name
    that is no field, or a value its field cannot hold, is a one-line error naming `what`."""
    words = [0] * WORDS
    for name, v in values.items():
        f = BY_NAME.get(name)
        if f is None:
            raise WarpyError(f"{what}: no instruction field is called {name!r}")
        if not isinstance(v, int):
            raise WarpyError(f"{what}: field {name} takes an integer, not {v!r}")
        if not 0 <= v <= f.mask:
            raise WarpyError(f"{what}: field {name} = {v} does not fit its {f.bits} bits (0..{f.mask})")
        words[f.word] |= int(v) << f.lo
    return words


def unpack(words: Sequence[int]) -> dict[str, int]:
    """Every field of an instruction's 64 words."""
    if len(words) != WORDS:
        raise WarpyError(f"an instruction is {WORDS} words, not {len(words)}")
    return {f.name: (int(words[f.word]) >> f.lo) & f.mask for f in FIELDS}


def field_table(fields: Iterable[Field] = FIELDS) -> str:
    """The declaration as a Markdown table, repeated slots shown once (slot 0) with their count."""
    rows = ["| field | word | bits | meaning |", "|---|---|---|---|"]
    for f in fields:
        base, _, sub = f.name.partition(".")
        repeated = base.rstrip("0123456789")
        if repeated in ("op", "wait", "arrive") and base != repeated + "0":
            continue
        if repeated == "op" and sub.startswith("coord") and sub != "coord0":
            continue
        name, word = f.name, str(f.word)
        if repeated == "op":
            stride = 1 if f.word >= BOX_BASE else OPERAND_WORDS
            name = name.replace("op0.", "op[i].").replace("coord0", "coord[c]")
            word = f"{f.word} + {stride if stride > 1 else ''}i" + (" + c" if "coord" in f.name else "")
            name += f" (i < {OPERANDS}" + (f", c < {COORDS})" if "coord" in f.name else ")")
        elif repeated == "wait":
            name = name.replace("wait0.", "wait[i].") + f" (i < {WAITS})"
            word = f"{f.word} + {WAIT_WORDS}i"
        elif repeated == "arrive":
            name = f"arrive[i] (i < {ARRIVES})"
            word = f"{f.word} + i"
        bits = f"{f.hi}:{f.lo}" if f.bits > 1 else str(f.lo)
        rows.append(f"| `{name}` | {word} | {bits} | {f.doc} |")
    if RESERVED_WORDS:
        span = f"{RESERVED_WORDS[0]}-{RESERVED_WORDS[-1]}" if len(RESERVED_WORDS) > 1 else str(RESERVED_WORDS[0])
        rows.append(f"| reserved | {span} | | zero |")
    return "\n".join(rows) + "\n"


__all__ = [
    "WORDS", "BYTES", "Field", "FIELDS", "BY_NAME", "pack", "unpack", "field_table", "fp32_bits", "fp32_value",
    "OPCODES", "ACTIVATIONS", "BINOPS", "OPERAND_ROLES", "OPERANDS", "COORDS", "WAITS", "ARRIVES",
    "NOOP", "GEMM", "UNARY", "BINARY", "SILU_MUL", "RMSNORM", "ATTENTION", "ATTENTION_COMBINE", "ROPE", "ACT_NONE", "ACT_RELU", "ACT_SILU", "ACT_GELU_TANH",
    "BIN_ADD", "BIN_MUL", "RESERVED_WORDS", "AXIS_K", "AXIS_PAIR", "AXIS_FIXED", "BOX_BASE", "SCALE_WORD",
]
