"""Issue 18's new configurations of the sm_90a GEMM on the GPU, every element of C checked (inputs in
[-3, 3], exact against the float64 product; one rounding for 16-bit C): 192-row tiles (three
consumer warpgroups) whole, staged, in 2x1 clusters and with stream-K; A and B swapped for short M
(one row, ragged N, K split); the L2 promotions the sweep tries where rows are not 32-byte aligned;
multicast clusters of 4 and 8 CTAs and 2-D clusters; C^T staged and 256-row tiles of 128-row
warpgroups; multicast slices of unequal rows.
Each case runs in its own subprocess through tests/gpu/test_gemm.py's `config:` cases.

    python -m pytest -q tests/gpu/test_gemm_wide_gpu.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_case import run_case

GEMM_CASES = Path(__file__).resolve().parent / "test_gemm.py"

WIDE = [
    "config:1000:1000:1000:f32:consumers=3,bn=192",  # ragged, C from the registers
    "config:4097:1000:520:bf16:consumers=3,bn=192",  # staged epilogue, 3 chunks, a ragged last M-block
    "config:8192:8192:1024:bf16:consumers=3,bn=192",  # many tiles a CTA
    "config:3000:3000:3000:bf16:consumers=3,bn=128,cluster_m=2",  # 2x1 clusters, odd M-blocks, unaligned rows
    "config:1536:1536:4096:bf16:consumers=3,bn=192,stream_k=1",
    "config:8192:28672:1024:bf16:consumers=3,bn=192,cluster_m=2",  # "coopB": 192 x 192 in 2x1 clusters
    "config:4000:3000:1024:bf16:consumers=3,bn=192,staged_epilogue=0",  # C from the registers, 4 stages
]
SWAPPED = [
    "config:1:4096:4096:bf16:swap_ab=1,bn=16,consumers=1",
    "config:1:8191:8192:f32:swap_ab=1,bn=16,consumers=2",
    "config:16:4095:4096:bf16:swap_ab=1,bn=16,consumers=1,stream_k=1,split=2",
    "config:37:8191:136:bf16:swap_ab=1,bn=48,consumers=1",
    "config:64:28672:8192:bf16:swap_ab=1,bn=64,consumers=2",
    "config:5:1000:65536:f32:swap_ab=1,bn=16,consumers=1,stream_k=1",
    "config:20:4160:4096:bf16:swap_ab=1,bn=32,consumers=1,cluster_m=2",  # clusters share A's box; 65 N-blocks
    "config:64:5120:5120:bf16:swap_ab=1,bn=64,consumers=2,cluster_m=2",
]
UNALIGNED = [f"config:3000:3000:3000:bf16:l2_promotion={l2}" for l2 in (0, 64, 256)]
# multicast clusters of 4 and 8 CTAs and 2-D ones: slices of A's box along a cluster's rows, of B's along
# its columns; cluster tiles past M or N; more cluster tiles than resident clusters
MULTICAST = [
    "config:64:5120:5120:bf16:swap_ab=1,bn=64,consumers=1,cluster_m=4",
    "config:128:3072:8192:bf16:swap_ab=1,bn=64,consumers=1,cluster_m=4,cluster_n=2",
    "config:200:4000:1000:bf16:bn=64,consumers=1,cluster_m=2,cluster_n=4",  # staged, past M and N
    "config:1000:1000:1000:f32:bn=64,consumers=1,cluster_m=8",  # 16 M-blocks, 16 N-blocks: 32 tiles of 15 clusters
    "config:3000:3000:3000:bf16:consumers=3,bn=192,cluster_m=1,cluster_n=2",
]
# C^T staged (STSM.MT88 + TMA stores over C's own rows) and 128-row consumer warpgroups (256-row tiles)
STAGED_SWAPPED = [
    "config:777:3584:3584:bf16:swap_ab=1,bn=88,wg_rows=128,consumers=2,staged_epilogue=1",  # one tile a CTA
    "config:200:18944:3584:bf16:swap_ab=1,bn=200,consumers=2,staged_epilogue=1,stream_k=1",  # fixup, then staged
    "config:300:8192:1024:fp16:swap_ab=1,bn=152,consumers=2,staged_epilogue=1",  # many tiles a CTA, odd 8-row groups
    "config:301:1000:520:bf16:swap_ab=1,bn=40,wg_rows=128,consumers=2,staged_epilogue=1,cluster_n=2",
    "config:1000:1000:1000:bf16:bn=128,wg_rows=128,consumers=2,staged_epilogue=1",  # ragged 256 x 128
    "config:4096:4096:4096:f32:bn=128,wg_rows=128,consumers=2,cluster_m=2",
]
# multicast slices of unequal rows (the last CTA's box the shorter): cuBLAS's clusters at M = 777 and 200
UNEVEN = [
    "config:777:3584:3584:bf16:swap_ab=1,bn=88,wg_rows=128,consumers=2,staged_epilogue=1,cluster_m=2",
    "config:200:3584:3584:bf16:swap_ab=1,bn=104,consumers=1,staged_epilogue=1,cluster_m=4,cluster_n=2",
    "config:300:1000:136:f32:bn=200,consumers=2,cluster_m=2",
]


@pytest.mark.parametrize("case", WIDE + SWAPPED + UNALIGNED + MULTICAST + STAGED_SWAPPED + UNEVEN)
def test_new_configurations_are_exact(case: str) -> None:
    r = run_case(GEMM_CASES, [case])
    assert r.get("ok"), f"{case}: {json.dumps(r)}"
