"""The targets warpy writes kernels for, one frozen record each, and the element-type table.

Every fact that differs between sm_90a and sm_100a and is not a property of one opcode lives in
a `Target`: how many SMs the reference GPU has, how much dynamic shared memory a block may opt
into, where kernel parameters and the global memory descriptor sit in constant bank 0, how the
text spells the instructions whose form differs. Opcode facts (which targets have an opcode) live
in the opcode's record (`warpy.isa.families`); element types in `warpy.layout.dtype`, re-exported
here so that `warpy.target` is the one import for both.

Layering: this module imports only `warpy.errors` and `warpy.layout`; everything above
(`isa`, `lift`, `check`, `runtime`, `kernels`) reads targets from here.
"""

from __future__ import annotations

from typing import Literal

import attrs

from warpy.errors import WarpyError
from warpy.layout.dtype import DTYPES, DType, canonical, dtype, dtype_bytes, from_cai, from_dlpack, names


@attrs.frozen
class Target:
    """One architecture.

    name: the PTX target (`sm_90a`); short: the short name used in kernel and descriptor names
    (`sm90`); unit: the tensor-core unit (`wgmma` or `tcgen05`); gpu / sms: the reference GPU the
    schedules and the checker's residency assume, and its SM count; gpu_memory: bytes of global
    memory on that GPU (as the driver reports it: a GEMM whose operands cannot fit is refused
    before anything is built); max_dynamic_smem: bytes of
    dynamic shared memory a block may opt into; tmem_columns: tensor-memory columns per SM (0:
    none); param_base: constant-bank offset of the first kernel parameter; memdesc: constant-bank
    offset of the global-memory descriptor word; const_load: the uniform constant-load mnemonic the
    disassembler prints; iadd3_carry_outs: IADD3/UIADD3 print their two carry-out predicates; desc:
    the shared-memory descriptor encoding (`warpy.layout.desc`).
    """

    name: str
    short: str
    unit: Literal["wgmma", "tcgen05"]
    gpu: str
    sms: int
    gpu_memory: int
    max_dynamic_smem: int
    tmem_columns: int
    param_base: int
    memdesc: int
    const_load: Literal["ULDC", "LDCU"]
    iadd3_carry_outs: bool
    desc: Literal["sm90", "sm100"]

    @property
    def major(self) -> str:
        """The GPU architecture that runs its cubins (`sm_90`): arch-specific cubins run only there."""
        return self.name.rstrip("a")

    def __str__(self) -> str:
        return self.name


SM90A = Target(
    name="sm_90a", short="sm90", unit="wgmma", gpu="H200", sms=132, gpu_memory=143771 << 20,  # 143771 MiB
    max_dynamic_smem=232448, tmem_columns=0, param_base=0x210, memdesc=0x208, const_load="ULDC",
    iadd3_carry_outs=False, desc="sm90",
)
SM100A = Target(
    name="sm_100a", short="sm100", unit="tcgen05", gpu="B200", sms=148, gpu_memory=183359 << 20,  # 183359 MiB
    max_dynamic_smem=232448, tmem_columns=512, param_base=0x380, memdesc=0x358, const_load="LDCU",
    iadd3_carry_outs=True, desc="sm100",
)

TARGETS: dict[str, Target] = {t.name: t for t in (SM90A, SM100A)}
ARCHS: tuple[str, ...] = tuple(TARGETS)


def target(name: str | Target) -> Target:
    """The target named `name` (`sm_90a`, `sm_100a`); a one-line error for anything else."""
    if isinstance(name, Target):
        return name
    t = TARGETS.get(name)
    if t is None:
        raise WarpyError(f"target {name!r} is not one of {', '.join(ARCHS)}")
    return t


def element_type(spelling: str) -> DType:
    """`warpy.layout.dtype.dtype`, with the one-line error a user sees (WarpyError)."""
    try:
        return dtype(spelling)
    except Exception as e:  # LayoutError: warpy.layout's own error type
        raise WarpyError(str(e)) from None


__all__ = [
    "Target", "TARGETS", "ARCHS", "SM90A", "SM100A", "target",
    "DType", "DTYPES", "dtype", "element_type", "canonical", "dtype_bytes", "names", "from_dlpack", "from_cai",
]
