"""warpy.isa: the language kernels are written in.

- `warpy.isa.operands`: typed operands (`R`, `UR`, `P`, `UP`, `RVec`, `URVec`, `Imm`, `Mem`, `GMem`,
  `Desc`, `TmapRef`, `CBank`, `SReg`, `Sym`, `Kw`, `LabelRef`; `RZ URZ PT UPT`).
- `warpy.isa.families`: opcode records by family (`ALL`, `FAMILIES`, `lookup`, `validate`,
  `defs_uses`) and typed builders (`families.alu.iadd3(...)`, `families.sync.try_wait(...)` ...).
- `warpy.isa.program`: `Program` (registers, labels, roles, loops, rings, declarations, the text),
  built on `warpy.isa.index` (`Counter`, `Ring`, `Lane`, `Uniform`, affine coordinates),
  `warpy.isa.buffers` (`Tile`, `Barrier`, `TmemRef`, tensor maps, parameters), `warpy.isa.derive`
  (addresses derived from layouts: `p.derive`), `warpy.isa.pipes` (`Pipe`, `ProducerEnd`,
  `ConsumerEnd`, `init_barriers`, `wait`) and `warpy.isa.descriptors` (shared-memory descriptor words).
- `warpy.isa.units`: one module a hardware unit, functions taking the Program first
  (`units.tma.tma_load`, `units.wgmma.hgmma`, `units.tcgen05.utchmma`).
- `warpy.isa.text`: the SASS text (`Kernel`, `Header`, `parse`, `ParseError`); docs/sass.md is its spec.
- `warpy.isa.colour`: register colouring by liveness; `warpy.isa.interp`: a scalar ALU interpreter.
- `warpy.isa.examples`: example programs (`EXAMPLES`), used by the lifter's and checker's tests.
"""

from __future__ import annotations

from warpy.isa.buffers import Barrier, Tile, TileRing, TmemRef
from warpy.isa.index import Counter, Ring
from warpy.isa.instr import Affine, Comment, Instr, Label, Note
from warpy.isa.pipes import ConsumerEnd, Pipe, ProducerEnd
from warpy.isa.program import Program
from warpy.isa.text import Header, Kernel, ParseError, parse

__all__ = [
    "Affine", "Barrier", "Comment", "ConsumerEnd", "Counter", "Header", "Instr", "Kernel", "Label", "Note",
    "ParseError", "Pipe", "ProducerEnd", "Program", "Ring", "Tile", "TileRing", "TmemRef", "parse",
]
