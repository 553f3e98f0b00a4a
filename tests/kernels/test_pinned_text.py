"""Programs' SASS text pinned by hash: a refactor of the DSL, the derivation or the colouring that
changes one byte of what a GEMM, an attention program, an example or a probe prints fails here,
naming the program.

The hashes were taken before the restructuring that split `Program` and `Machine` and gave the
GEMM family its seam (it changed no program's text). When a change is meant to alter a program,
update the hash in the same commit and say why in its message. (sha256 of the named and of the
coloured text, first 24 hex digits.) The attention programs' hashes were taken before their
shared parts moved into kernels/attention_common.py."""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import pytest

from warpy.isa.examples import EXAMPLES
from warpy.kernels import attention
from warpy.kernels.gemm import GemmProblem, build, configure
from warpy.kernels.probes import PROBES


def _gemm(m: int, n: int, k: int, out: str = "fp32", arch: str = "sm_90a", config: str = "") -> Callable[[], Any]:
    def make() -> Any:
        p = GemmProblem(m, n, k, out_dtype=out, arch=arch)
        return build(p, configure(p, config) if config else None)
    return make


#: the sm_90a attention programs with V transposed in shared memory (the rule before V's ring was read
#: MN-major): their hashes are the ones taken before
OLD128, OLD64 = "v_mn=0,k_stages=2,v_stages=2,t_stages=2", "v_mn=0,k_stages=4,v_stages=2,t_stages=4"


def _attention(arch: str, B: int, H: int, S: int, D: int, config: str = "", **kw: Any) -> Callable[[], Any]:
    def make() -> Any:
        p = attention.problem(B, H, S, D, arch=arch, **kw)
        return attention.build(p, attention.configure(p, config) if config else None)
    return make


CASES: dict[str, tuple[Callable[[], Any], tuple[str, str]]] = {
    "gemm sm_90a 1024x1024x1024 bf16": (_gemm(1024, 1024, 1024, "bf16"), ("4e34152da8459ffe6def86c7", "7ee1dc3704c07dfa26cbc8e3")),
    "gemm sm_90a 4096x4096x4096 fp32": (_gemm(4096, 4096, 4096), ("b8c816ba4eacd99a06d7564f", "e48f74e2bb727ec9f092da86")),
    # (the ring as deep as the rule made it when the hash was taken: rings past 8 stages came later)
    "gemm sm_90a 300x301x512 bf16": (_gemm(300, 301, 512, "bf16", config="stages=8"),
                                     ("08319bf8914e9b62357428a2", "f0491b9f82045bdc9c53dbc8")),
    "gemm sm_90a 1024x1024x65536 bf16 (split)": (_gemm(1024, 1024, 65536, "bf16"),
                                                  ("3b647c708c66eba9fd9f658f", "e2c1c1f88f753b672b73f42f")),
    "gemm sm_90a 4096x4096x4096 bf16 bn=192,cluster_m=2": (_gemm(4096, 4096, 4096, "bf16", config="bn=192,cluster_m=2"),
                                                             ("da8637657b9b5ebb8e32eb76", "8239fcf8f0910fe7c2539fb7")),
    "gemm sm_100a 1024x1024x1024 fp32": (_gemm(1024, 1024, 1024, arch="sm_100a"),
                                         ("d2bf2da0342420603c104563", "91d8c7df1784b88ee1045046")),
    "gemm sm_100a 2048x2048x16384 bf16": (_gemm(2048, 2048, 16384, "bf16", "sm_100a"),
                                          ("69c53057d2fde3a0e67b8031", "13af8d4c809beb05855b4f29")),
    "gemm sm_100a 300x301x512 bf16": (_gemm(300, 301, 512, "bf16", "sm_100a"),
                                      ("39a0266c300e0d80790ebaec", "03c8401fc7bc8a33d2b80379")),
    "gemm sm_100a 1024x1024x65536 fp32": (_gemm(1024, 1024, 65536, arch="sm_100a"),
                                          ("8996f89b0742f39747fc9ca6", "112172ebd00b15ee99d5c575")),
    "example-pipe sm_90a": (lambda: EXAMPLES["example-pipe"]("sm_90a"), ("4b9a6445fe0dd677f26e3164", "8c9042e5c59571f389ee426e")),
    "example-pipe sm_100a": (lambda: EXAMPLES["example-pipe"]("sm_100a"), ("1c0aac5125d56b398c547aa7", "3c4378b3ee9a4dae2632056f")),
    "example-features sm_90a": (lambda: EXAMPLES["example-features"]("sm_90a"),
                                ("32e0df005e1dd0efbc876202", "9b6c2014020d08cee814d20e")),
    "example-features sm_100a": (lambda: EXAMPLES["example-features"]("sm_100a"),
                                 ("5396e6e0c663d31e1eec9e73", "4420a3440fd5c8ca79422f97")),
    "probe tma_copy_3d sm_90a": (lambda: PROBES["tma_copy_3d"].build("sm_90a"), ("3c326ff21ff40ee82ea9c4cc", "f1257fa9f56470f9071a0236")),
    "probe multicast sm_100a": (lambda: PROBES["multicast"].build("sm_100a"), ("3e5a9f861715654da804a5bf", "98550925f14e70e264e9bff1")),
    "probe wgmma_bf16_sw128 sm_90a": (lambda: PROBES["wgmma_bf16_sw128"].build("sm_90a"),
                                      ("e4858ed334b674b132ce7be8", "b7c99cd8d716dfbaca32156b")),
    "probe umma_2cta sm_100a": (lambda: PROBES["umma_2cta"].build("sm_100a"), ("a7394f2d49a9b28988090e7b", "7320a0d5fa0456c39612d394")),
    # attention: both head dims, causal or not, GQA, ragged S_q/S_kv, both layouts, one or two tiles on sm_100a
    "attention sm_90a B=1 H=2 S=256 D=128": (_attention("sm_90a", 1, 2, 256, 128, OLD128),
                                             ("aadc237b0cc23dc7d507a902", "0a227e3817270600692c056f")),
    "attention sm_90a B=1 H=2 S=256 D=64 causal": (_attention("sm_90a", 1, 2, 256, 64, OLD64, causal=True),
                                                   ("9cc1c5e8bd96daa5caca3b07", "befe7a4a8d1b94dcc456accc")),
    "attention sm_90a B=2 H=8/2 S=200/333 D=128 causal bhsd": (
        _attention("sm_90a", 2, 8, 200, 128, OLD128, causal=True, H_kv=2, S_kv=333, layout="bhsd"),
        ("91ef93b17cbd0654f6211597", "b480a4fa5f29ea1d733bc9d6")),
    "attention sm_90a B=1 H=4/1 S=300/130 D=64 bhsd": (
        _attention("sm_90a", 1, 4, 300, 64, OLD64, H_kv=1, S_kv=130, layout="bhsd"),
        ("155b3b513e5b8ae4fd657844", "c1dda6e069c91e2700e37ce6")),
    "attention sm_90a B=1 H=2 S=1024 D=128 causal k_stages=2,t_stages=1": (
        _attention("sm_90a", 1, 2, 1024, 128, "v_mn=0,k_stages=2,v_stages=2,t_stages=1", causal=True),
        ("198f2bd3456104cee13e1e50", "246094536fc79b2ee4bdcf0e")),
    # the rule's: V's ring read MN-major by the P·V wgmma (hashes taken when it became the rule)
    "attention sm_90a B=1 H=2 S=256 D=128 v_mn": (_attention("sm_90a", 1, 2, 256, 128),
                                                  ("9730f930a90f39b27471887e", "80f3fbb00ed5160ae5df226d")),
    "attention sm_90a B=2 H=8/2 S=200/333 D=128 causal bhsd v_mn": (
        _attention("sm_90a", 2, 8, 200, 128, causal=True, H_kv=2, S_kv=333, layout="bhsd"),
        ("50a98dcdff91df9300fe3568", "e39613f14d3449663c850c40")),
    "attention sm_90a B=1 H=4/1 S=300/130 D=64 bhsd v_mn": (
        _attention("sm_90a", 1, 4, 300, 64, H_kv=1, S_kv=130, layout="bhsd"),
        ("e0ab11aaa6cc51b99a68db39", "7ce2491b99f9f2c7e0bb695f")),
    "attention sm_100a B=1 H=2 S=256 D=128": (_attention("sm_100a", 1, 2, 256, 128),
                                              ("c68b0c79673d10067c78c1e4", "bbd75d99026f7a59b4a9d679")),
    "attention sm_100a B=1 H=2 S=256 D=64 causal": (_attention("sm_100a", 1, 2, 256, 64, causal=True),
                                                    ("f1f234b1a2551cec49e291aa", "cd02aaca5a86cc2b43adb905")),
    "attention sm_100a B=2 H=8/2 S=200/333 D=128 causal bhsd": (
        _attention("sm_100a", 2, 8, 200, 128, causal=True, H_kv=2, S_kv=333, layout="bhsd"),
        ("e453e9a6a1fd7f4db9072898", "f1a5107d4bf2854965c07b0c")),
    "attention sm_100a B=1 H=4/1 S=300/130 D=64 bhsd": (
        _attention("sm_100a", 1, 4, 300, 64, H_kv=1, S_kv=130, layout="bhsd"),
        ("6cd1b10765d8d90ee44cbb86", "fa73689d53fa0b1ad61eaa37")),
    "attention sm_100a B=1 H=2 S=256 D=128 tiles=1": (_attention("sm_100a", 1, 2, 256, 128, "tiles=1"),
                                                      ("aa22d0358c7b1076132d88cb", "182f74fc02ef0f08c4caed09")),
    "attention sm_100a B=1 H=4/2 S=300/500 D=64 causal tiles=1": (
        _attention("sm_100a", 1, 4, 300, 64, "tiles=1", causal=True, H_kv=2, S_kv=500),
        ("7a4ce3dc6064a7cc6596aedc", "035a85b7c7885eff219991de")),
    "attention sm_100a B=1 H=2 S=1024 D=128 causal bhsd tiles=2": (
        _attention("sm_100a", 1, 2, 1024, 128, "tiles=2", causal=True, layout="bhsd"),
        ("8e276f7fbc3d3d28aee74a6b", "c411bf3017e1ae1e8ce83e78")),
}


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@pytest.mark.parametrize("name", list(CASES))
def test_program_text_is_unchanged(name: str) -> None:
    make, (named, coloured) = CASES[name]
    prog = make()
    assert (_h(str(prog.kernel())), _h(str(prog.coloured()))) == (named, coloured), name
