"""Loading cubins: `load(cubin) -> Module`, `Module.kernel(name) -> Kernel`."""

from __future__ import annotations

import ctypes
from typing import Any

import attrs

from warpy.errors import WarpyError
from warpy.lift.ptxas import Cubin
from warpy.runtime.driver import check, cuda, device, require_arch


@attrs.define(eq=False)
class Kernel:
    """A kernel (CUfunction) of a loaded module."""

    module: "Module"
    name: str
    handle: Any = attrs.field(repr=False)
    dynamic_smem_limit: int = 48 * 1024  # what the function accepts without the opt-in attribute

    def allow_dynamic_smem(self, nbytes: int) -> None:
        """Raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to `nbytes` when it is above the
        48 KiB a kernel gets without opting in (done once per size increase)."""
        if nbytes <= self.dynamic_smem_limit:
            return
        dev = device()
        if nbytes > dev.max_shared_per_block_optin:
            raise WarpyError(
                f"kernel {self.name} asks for {nbytes} bytes of dynamic shared memory; "
                f"{dev.name} allows at most {dev.max_shared_per_block_optin} per block"
            )
        d = cuda()
        check(
            d.cuFuncSetAttribute(
                self.handle, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes
            ),
            f"setting {nbytes} bytes of dynamic shared memory for kernel {self.name}",
        )
        self.dynamic_smem_limit = nbytes

    def attribute(self, name: str) -> int:
        """A CUfunction_attribute by its short name, e.g. "NUM_REGS", "MAX_THREADS_PER_BLOCK"."""
        d = cuda()
        device()
        try:
            a = getattr(d.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        except AttributeError:
            raise WarpyError(f"no function attribute {name!r}") from None
        return int(check(d.cuFuncGetAttribute(a, self.handle), f"cuFuncGetAttribute {name}"))


@attrs.define(eq=False)
class Module:
    """A loaded cubin (CUmodule). Kernels are looked up by name and kept."""

    arch: str | None
    handle: Any = attrs.field(repr=False)
    cubin: Cubin | None = attrs.field(default=None, repr=False)
    _image: Any = attrs.field(default=None, repr=False)  # the bytes the driver read, kept alive
    _kernels: dict[str, Kernel] = attrs.field(factory=dict, repr=False)

    def kernel(self, name: str) -> Kernel:
        if name not in self._kernels:
            d = cuda()
            device()
            result = d.cuModuleGetFunction(self.handle, name.encode())
            if result[0] != d.CUresult.CUDA_SUCCESS:
                known = f" (kernels: {', '.join(self.cubin.kernels)})" if self.cubin is not None else ""
                raise WarpyError(f"no kernel {name!r} in the module{known}")
            self._kernels[name] = Kernel(self, name, result[1])
        return self._kernels[name]

    def unload(self) -> None:
        if self.handle is not None:
            device()
            check(cuda().cuModuleUnload(self.handle), "cuModuleUnload")
            self.handle = None
            self._kernels.clear()


def load(cubin: Cubin | bytes, arch: str | None = None) -> Module:
    """Load a cubin into the primary context. A `Cubin` (or an explicit `arch`) is first checked
    against the GPU: an sm_90a cubin needs an sm_90 GPU, an sm_100a cubin an sm_100 one."""
    data = cubin.data if isinstance(cubin, Cubin) else bytes(cubin)
    arch = cubin.arch if isinstance(cubin, Cubin) else arch
    if arch is not None:
        require_arch(arch)
    else:
        device()
    image = ctypes.create_string_buffer(data, len(data))
    handle = check(cuda().cuModuleLoadData(ctypes.addressof(image)), "cuModuleLoadData")
    return Module(arch=arch, handle=handle, cubin=cubin if isinstance(cubin, Cubin) else None, image=image)
