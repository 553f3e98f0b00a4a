"""warpy.isa: the language kernels are written in.

- `warpy.isa.operands`: typed operands (`R`, `UR`, `P`, `UP`, `RVec`, `URVec`, `Imm`, `Mem`, `GMem`,
  `Desc`, `TmapRef`, `CBank`, `SReg`, `Sym`, `Kw`, `LabelRef`; `RZ URZ PT UPT`).
- `warpy.isa.families`: opcode records by family (`ALL`, `FAMILIES`, `lookup`, `validate`,
  `defs_uses`) and typed builders (`families.alu.iadd3(...)`, `families.sync.try_wait(...)` ...).
- `warpy.isa.program`: `Program` (registers, labels, loops, rings, roles, buffers, pipes, derived
  addresses) and the buffer/operand types (`Tile`, `Barrier`, `TmemRef`, `Counter`, `Ring`,
  `ProducerEnd`, `ConsumerEnd`).
- `warpy.isa.text`: the SASS text (`Kernel`, `Header`, `parse`, `ParseError`); docs/sass.md is its spec.
- `warpy.isa.colour`: register colouring by liveness; `warpy.isa.interp`: a scalar ALU interpreter.
- `warpy.isa.examples`: example programs (`EXAMPLES`), used by the lifter's and checker's tests.
"""

from __future__ import annotations

from warpy.isa.instr import Affine, Comment, Instr, Label, Note
from warpy.isa.program import (
    Barrier,
    ConsumerEnd,
    Counter,
    Pipe,
    ProducerEnd,
    Program,
    Ring,
    Tile,
    TileRing,
    TmemRef,
)
from warpy.isa.text import Header, Kernel, ParseError, parse

__all__ = [
    "Affine", "Barrier", "Comment", "ConsumerEnd", "Counter", "Header", "Instr", "Kernel", "Label", "Note",
    "ParseError", "Pipe", "ProducerEnd", "Program", "Ring", "Tile", "TileRing", "TmemRef", "parse",
]
