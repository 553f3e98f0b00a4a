"""Helpers that drive one hardware unit through a Program, one module a unit: `tma` (bulk tensor
copies between global and shared memory), `wgmma` (sm_90a warpgroup MMA, A from shared memory or
from registers) and `tcgen05` (sm_100a tensor-core MMA, A from shared or tensor memory). Each is a
function taking the Program first; it derives its operands' addresses and descriptors from the
buffers and emits the unit's instruction (from `warpy.isa.families`).

Multi-instruction idioms over the other units live here too: `warp` (warp reductions through
shuffles, the butterfly), `flags` (global atomics with acquire/release, the spin-wait on a counter)
and `dispatch` (a jump on an opcode word that ptxas makes an indexed branch).
"""
