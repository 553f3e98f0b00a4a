"""Helpers that drive one hardware unit through a Program, one module a unit: `tma` (bulk tensor
copies between global and shared memory), `wgmma` (sm_90a warpgroup MMA) and `tcgen05` (sm_100a
tensor-core MMA). Each is a function taking the Program first; it derives its operands' addresses
and descriptors from the buffers and emits the unit's instruction (from `warpy.isa.families`).
"""
