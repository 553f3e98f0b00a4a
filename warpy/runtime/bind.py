"""Binding a kernel's header parameters to named device memory and scalars, and launching from the
header.

A warpy kernel's parameters are named in its SASS header (`.tmap NAME ...` lines, then `.param NAME
TYPE` lines; `Header.kernel_params()` gives them in order). The host binds by name, never by
position:

    params = bind_params(header, {"a": buf_a, "b": buf_b, "c": buf_c}, {"M": 4096})
    run_header(kernel, header, params)              # grid/block/smem/cluster from the header

- `.tmap NAME`: the memory given for NAME (a `DeviceBuffer`, a `DeviceSpan`, or an address) is
  encoded as a tensor map from the header's `TmaBox` (memoised by box and address, so a repeated
  binding costs a dict lookup). Where the memory's size is known it must hold the map's extent.
- `.param NAME u64`: the memory given for NAME (its address), or else a scalar of that name.
- `.param NAME u32|u16|s32|s64|f32`: the scalar of that name.
- `.param T u64` that is the table of `.tmap NAME table=T slot=K` lines: every slot's map is encoded
  over the memory given for its `over=` parameter (or its own name), `offset` bytes in, and the
  table (128 bytes a slot, 64-byte aligned) uploaded to device memory once per distinct binding
  (`map_table`, cached); the parameter is the table's address.
- `.param NAME u64 scratch`: device memory the host owns (docs/sass.md, `Program.scratch`), from
  `scratch[name]` only: allocated zero-filled once per loaded kernel and per CUDA stream, never
  cleared again. `alloc_scratch(header, stream)` makes one set; `ScratchPool(header).get(stream)`
  keeps one set per stream; `FastLaunch` owns a pool and hands each stream's set to `make_params`.

A parameter with nothing given is an error naming it; a name given that the kernel does not have is
an error too, unless `strict=False` (a caller offering the same scalars to many kernels).

`FastLaunch` is the launch path for calls repeated with few distinct arguments (warpy.gemm): it
keeps the launch configuration per stream and the packed parameter block per argument tuple (and
stream, where the kernel has scratch memory), so a repeated launch is one `cuLaunchKernelEx`.

Threads: every cache here (tensor maps, tables, scratch sets, launch configurations, packed
parameters) may be used from any number of threads at once. Lookups take no lock; a miss builds
under the cache's lock (built once, never twice), and an entry is replaced or dropped only under
it. A packed block is handed to the driver through a reference the launching thread holds, so
another thread dropping it from the cache cannot free it mid-launch. Streams are told apart by
handle, except the per-thread default stream (handle 2, `CU_STREAM_PER_THREAD`), which is a
different stream on each thread: its scratch sets and packed blocks are kept per thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import attrs

from warpy.errors import WarpyError
from warpy.isa.text import Header
from warpy.layout.tma import TmaBox
from warpy.target import dtype_bytes
from warpy.runtime.launcher import Scalar, f32, i32, launch, pack_params, run, u32, u64
from warpy.runtime.memory import DeviceBuffer
from warpy.runtime.module import Kernel
from warpy.runtime.tensormap import TensorMap


@attrs.frozen
class DeviceSpan:
    """Device memory someone else owns (a torch/cupy tensor's storage): its address and size in
    bytes. Passed for a `u64` parameter it is the pointer; for a `.tmap`, the tensor's base."""

    ptr: int
    nbytes: int

    def __int__(self) -> int:
        return self.ptr


def tmap_extent_bytes(box: TmaBox) -> int:
    """Bytes from the tensor's base to one past its last element, as the map addresses it."""
    elem = dtype_bytes(box.dtype)
    return elem * box.dims[0] + sum((d - 1) * s for d, s in zip(box.dims[1:], box.strides))


# Encoded tensor maps by (box, address): a map depends on nothing else, so it stays valid for as
# long as the address holds a tensor of that box's shape (reuse after free re-encodes the same bytes).
_TMAP_CACHE: OrderedDict[tuple[TmaBox, int], TensorMap] = OrderedDict()
_TMAP_CACHE_SIZE = 256
_cache_lock = threading.Lock()  # the tensor-map and table caches' reorderings, insertions, drops


def encode_cached(box: TmaBox, address: int) -> TensorMap:
    """`encode_tensor_map(box, address)`, memoised (least recently used of 256 are dropped)."""
    key = (box, address)
    cache = _TMAP_CACHE
    hit = cache.get(key)
    if hit is not None:
        with _cache_lock:
            if key in cache:
                cache.move_to_end(key)
        return hit
    from warpy.runtime.tensormap import encode_tensor_map

    tm = encode_tensor_map(box, address)  # pure: two threads encoding one key get the same bytes
    with _cache_lock:
        cache[key] = tm
        if len(cache) > _TMAP_CACHE_SIZE:
            cache.popitem(last=False)
    return tm


def _address(name: str, mem: Any) -> tuple[int, int | None]:
    """(address, size in bytes or None) of what was given for parameter `name`."""
    if isinstance(mem, (DeviceBuffer, DeviceSpan)):
        return mem.ptr, mem.nbytes
    if isinstance(mem, bool) or not hasattr(mem, "__int__"):
        raise WarpyError(f"parameter {name!r}: give a DeviceBuffer, a DeviceSpan or an address, not {type(mem).__name__}")
    return int(mem), getattr(mem, "nbytes", None)


def _scalar(name: str, typ: str, value: Any) -> Scalar:
    if isinstance(value, Scalar):
        return value
    if typ == "f32":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise WarpyError(f"parameter {name!r} (f32): {value!r} is not a number")
        return f32(float(value))
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise WarpyError(f"parameter {name!r} ({typ}): {value!r} is not an integer")
    v = int(value)
    if typ == "u32":
        return u32(v)
    if typ == "u16":
        if not 0 <= v < 1 << 16:
            raise WarpyError(f"parameter {name!r} (u16): {v} does not fit 16 bits")
        return u32(v)  # the driver copies the parameter's 2 bytes: the low half (little-endian)
    if typ == "s32":
        return i32(v)
    if typ == "s64":
        if not -(1 << 63) <= v < 1 << 63:
            raise WarpyError(f"parameter {name!r} (s64): {v} does not fit 64 bits")
        return u64(v & ((1 << 64) - 1))  # the same 8 bytes, two's complement
    if typ == "u64":
        return u64(v)
    raise WarpyError(f"parameter {name!r} has a type warpy cannot pass: {typ}")


# ---------------------------------------------------------------------------------------------
# Tables of tensor maps: `.tmap NAME table=T slot=K` behind `.param T u64`

MAP_STRIDE = 128  # bytes a slot: one CUtensorMap (64-byte aligned: every slot of a 256-aligned table is)

# uploaded tables by their contents (each slot's box and address): the device memory holding them
_TABLE_CACHE: OrderedDict[tuple[tuple[int, TmaBox, int], ...], Any] = OrderedDict()
_TABLE_CACHE_SIZE = 64
_table_lock = threading.Lock()

# (the table's bytes) -> device memory holding them, uploaded before any later launch reads them
Upload = Callable[[bytes], Any]


def _upload(data: bytes) -> Any:
    import numpy as np

    from warpy.runtime.driver import synchronize_context
    from warpy.runtime.memory import to_device

    buf = to_device(np.frombuffer(data, dtype=np.uint8))
    synchronize_context()  # the copy has landed before any launch on any stream reads the table
    return buf


def table_bytes(header: Header, table: str, memory: Mapping[str, Any],
                encode: Callable[[TmaBox, int], TensorMap] = encode_cached) -> tuple[bytes, tuple[tuple[int, TmaBox, int], ...]]:
    """The bytes of table `table` (128 a slot, slot k at 128 k; a slot no map declares is zeros) and
    its key (each slot's number, box and address): each slot's map encoded over the memory given
    for its `over=` parameter (else its own name), `offset` bytes in. One-line errors for memory
    not given or too small."""
    slots = header.tables().get(table)
    if not slots:
        raise WarpyError(f"kernel {header.kernel} has no table of tensor maps called {table!r}")
    out = bytearray(MAP_STRIDE * (max(t.slot or 0 for t in slots) + 1))
    key: list[tuple[int, TmaBox, int]] = []
    for t in slots:
        assert t.slot is not None
        src = t.over if t.over is not None and t.name not in memory else t.name
        if src not in memory:
            raise WarpyError(f"kernel {header.kernel}: nothing given for the memory of tensor map {t.name!r} (slot "
                             f"{t.slot} of {table}{', a view of ' + repr(t.over) if t.over else ''}; given: "
                             f"{_names(memory)})")
        address, size = _address(src, memory[src])
        off = t.offset if src != t.name else 0
        need = off + tmap_extent_bytes(t.box)
        if size is not None and size < need:
            raise WarpyError(f"kernel {header.kernel}: tensor map {t.name!r} spans bytes {off}..{need} of "
                             f"{src!r}, but the memory given holds {size}")
        tm = encode(t.box, address + off)
        out[MAP_STRIDE * t.slot:MAP_STRIDE * t.slot + 128] = tm.data
        key.append((t.slot, t.box, address + off))
    return bytes(out), tuple(key)


def map_table(header: Header, table: str, memory: Mapping[str, Any], *,
              encode: Callable[[TmaBox, int], TensorMap] = encode_cached, upload: Upload = _upload) -> Any:
    """Device memory holding table `table` (`table_bytes`), uploaded once per distinct contents
    (the least recently used of 64 are forgotten: a launch still in flight keeps its own reference
    only through the packed parameters, so keep fewer than 64 bindings in flight at once)."""
    data, key = table_bytes(header, table, memory, encode)
    with _table_lock:  # one upload per distinct contents, however many threads ask at once
        hit = _TABLE_CACHE.get(key)
        if hit is not None:
            _TABLE_CACHE.move_to_end(key)
            return hit
        buf = upload(data)
        _TABLE_CACHE[key] = buf
        if len(_TABLE_CACHE) > _TABLE_CACHE_SIZE:
            _TABLE_CACHE.popitem(last=False)
    return buf


# ---------------------------------------------------------------------------------------------
# Scratch memory: `.param NAME u64 scratch`

# (nbytes, stream) -> new device memory, zero in that stream's order (None: warpy's own stream)
Zeros = Callable[[int, Any], Any]


def _zeros(nbytes: int, stream: Any) -> DeviceBuffer:
    from warpy.runtime.memory import zeros

    return zeros(nbytes, stream)


def alloc_scratch(header: Header, stream: Any = None, *, zeros: Zeros | None = None) -> dict[str, Any]:
    """New scratch memory for each of the header's scratch parameters (`Header.scratch_params`
    bytes each), zero-filled in the order of `stream` (None: warpy's own stream): pass it as
    `bind_params(..., scratch=...)` for launches on that stream. Free it (`.free()`) when done."""
    make = zeros or _zeros
    out: dict[str, Any] = {}
    try:
        for name, nbytes in header.scratch_params().items():
            out[name] = make(nbytes, stream)
    except BaseException:
        free_scratch(out)
        raise
    return out


def free_scratch(scratch: Mapping[str, Any]) -> None:
    """Free what `alloc_scratch` returned (anything with a `free()`)."""
    for mem in scratch.values():
        free = getattr(mem, "free", None)
        if free is not None:
            free()


CU_STREAM_PER_THREAD = 2  # the handle of the per-thread default stream: another stream on each thread


def stream_key(stream: Any) -> Hashable:
    """What tells streams apart: -1 for None (warpy's own on the thread's GPU), the handle, and for
    the per-thread default stream the handle with the calling thread's identity."""
    if stream is None:
        return -1
    s = int(stream)
    return (s, threading.get_ident()) if s == CU_STREAM_PER_THREAD else s


class ScratchPool:
    """One loaded kernel's scratch memory, one set per CUDA stream: allocated zero-filled (in that
    stream's order) on the first `get(stream)` and the same memory every later time, so each launch on
    a stream finds what the previous one there left. A kernel without scratch parameters gets `{}`
    and never touches the driver. `stream`: a CUstream handle as an int, or None (warpy's own).
    Safe from any thread: a stream's set is allocated once (under the pool's lock); threads on one
    stream share its set (their launches are ordered by the stream), threads on different streams
    never do (the per-thread default stream is a stream per thread: `stream_key`)."""

    def __init__(self, header: Header, zeros: Zeros | None = None) -> None:
        self.header = header
        self.sizes = header.scratch_params()
        self._zeros = zeros
        self._sets: dict[Hashable, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.sizes)

    def get(self, stream: Any = None) -> Mapping[str, Any]:
        if not self.sizes:
            return {}
        key = stream_key(stream)
        got = self._sets.get(key)
        if got is None:
            with self._lock:
                got = self._sets.get(key)
                if got is None:
                    got = self._sets[key] = alloc_scratch(self.header, stream, zeros=self._zeros)
        return got

    def free(self) -> None:
        """Free every stream's set (after the launches using them have finished)."""
        with self._lock:
            sets, self._sets = self._sets, {}
        for s in sets.values():
            free_scratch(s)


# ---------------------------------------------------------------------------------------------
# Binding


def bind_params(
    header: Header,
    buffers: Mapping[str, Any] = {},
    scalars: Mapping[str, Any] = {},
    *,
    scratch: Mapping[str, Any] | None = None,
    strict: bool = True,
    encode: Callable[[TmaBox, int], TensorMap] = encode_cached,
    upload: Upload = _upload,
) -> list[Any]:
    """The kernel's parameters in order, each bound by its name in the header: tensor maps encoded
    over `buffers[name]`, u64 pointers from `buffers[name]` (or a scalar), other scalars from
    `scalars[name]`, scratch pointers from `scratch[name]` (and from nowhere else: see
    `alloc_scratch`, `ScratchPool`). Raises a one-line WarpyError for a missing or (with `strict`)
    unknown name."""
    declared = header.kernel_params()
    tables = header.tables()
    sizes = header.scratch_params() if any(p.scratch for p in header.params) else {}
    scratch = {} if scratch is None else scratch
    params: list[Any] = []
    for name, typ in declared:
        if name in sizes:
            need = sizes[name]
            if name in buffers or name in scalars:
                raise WarpyError(f"kernel {header.kernel}: {name!r} is scratch memory the host owns: give it "
                                 "with scratch= (alloc_scratch or ScratchPool), not with the operands")
            if name not in scratch:
                raise WarpyError(f"kernel {header.kernel}: nothing given for scratch memory {name!r} ({need} bytes, "
                                 "allocated zero-filled once per kernel and stream): pass scratch= "
                                 "(alloc_scratch(header, stream) or a ScratchPool's get(stream))")
            mem = scratch[name]
            address, size = _address(name, mem)
            if size is not None and size < need:
                raise WarpyError(f"kernel {header.kernel}: scratch memory {name!r} needs {need} bytes, "
                                 f"but the memory given holds {size}")
            params.append(mem if isinstance(mem, DeviceBuffer) else u64(address))
        elif typ == "tmap":
            decl = next(t for t in header.tmaps if t.name == name)
            src = name if name in buffers or decl.over is None else decl.over  # `over`: that memory
            if src not in buffers:
                raise WarpyError(f"kernel {header.kernel}: nothing given for tensor map {name!r}"
                                 + (f" (a view of {decl.over!r})" if decl.over else "")
                                 + f" (given: {_names(buffers)})")
            box = header.tmap(name)
            address, size = _address(name, buffers[src])
            need = tmap_extent_bytes(box)
            if size is not None and size < need:
                raise WarpyError(f"kernel {header.kernel}: tensor map {name!r} spans {need} bytes "
                                 f"(dims {box.dims}), but the memory given holds {size}")
            params.append(encode(box, address))
        elif name in tables:
            if name in buffers or name in scalars:
                raise WarpyError(f"kernel {header.kernel}: {name!r} is the table of its tensor maps: give the memory "
                                 "of its maps, not the table")
            table = map_table(header, name, buffers, encode=encode, upload=upload)
            params.append(table if isinstance(table, DeviceBuffer) else u64(_address(name, table)[0]))
        elif typ == "u64" and name in buffers:
            mem = buffers[name]
            if isinstance(mem, DeviceBuffer):
                params.append(mem)
            else:
                params.append(u64(_address(name, mem)[0]))
        elif name in scalars:
            params.append(_scalar(name, typ, scalars[name]))
        else:
            what = "pointer or scalar" if typ == "u64" else f"{typ} scalar"
            raise WarpyError(f"kernel {header.kernel}: nothing given for {what} {name!r}"
                             f" (given: {_names({**buffers, **scalars})})")
    unknown_scratch = sorted(set(scratch) - set(sizes))
    if unknown_scratch:  # scratch memory is per kernel: memory for another kernel is a mistake
        raise WarpyError(f"kernel {header.kernel} has no scratch parameter {unknown_scratch[0]!r}"
                         f" (scratch parameters: {', '.join(sizes) or 'none'})")
    if strict:
        known = {n for n, _ in declared} | {t.name for t in header.tmaps}
        unknown = sorted(set(buffers) - known) + sorted(set(scalars) - known - set(buffers))
        if unknown:
            raise WarpyError(f"kernel {header.kernel} has no parameter {unknown[0]!r}"
                             f" (parameters: {', '.join(n for n, _ in declared) or 'none'})")
    return params


def rebind_scalars(header: Header, params: Sequence[Any], scalars: Mapping[str, Any]) -> list[Any]:
    """`params` (what `bind_params` gave for the same header) with the named scalar parameters set
    anew: a kernel launched again and again over the same memory with only a scalar changing (the
    megakernel's call number) binds once and pays this per launch, not the tensor maps and their
    table again. Raises a one-line WarpyError for a name that is not one of the header's scalars."""
    declared = header.kernel_params()
    if len(params) != len(declared):
        raise WarpyError(f"kernel {header.kernel}: {len(params)} bound parameters, but the kernel takes {len(declared)}")
    out = list(params)
    index = {n: (i, t) for i, (n, t) in enumerate(declared)}
    for name, value in scalars.items():
        hit = index.get(name)
        if hit is None or hit[1] == "tmap" or name in header.tables():
            raise WarpyError(f"kernel {header.kernel} has no scalar parameter {name!r}")
        out[hit[0]] = _scalar(name, hit[1], value)
    return out


def _names(m: Mapping[str, Any]) -> str:
    return ", ".join(sorted(m)) or "nothing"


def launch_header(kernel: Kernel, header: Header, params: Sequence[Any], *, pdl: bool = False,
                  stream: Any = None) -> None:
    """Enqueue `kernel` with the grid, block, dynamic shared memory and cluster of its header."""
    launch(kernel, grid=header.grid, block=header.threads, smem=header.dynsmem, params=params,
           cluster=header.cluster, pdl=pdl, stream=stream)


def run_header(kernel: Kernel, header: Header, params: Sequence[Any], *, pdl: bool = False,
               stream: Any = None, timeout: float = 30.0) -> None:
    """`launch_header` then wait under the watchdog."""
    run(kernel, grid=header.grid, block=header.threads, smem=header.dynsmem, params=params,
        cluster=header.cluster, pdl=pdl, stream=stream, timeout=timeout)


# make_params(scratch) -> the bound parameters; `scratch`: the stream's scratch memory by name
MakeParams = Callable[[Mapping[str, Any]], Sequence[Any]]


class FastLaunch:
    """Repeated launches of one kernel with its header's geometry, with as little Python per call as
    possible: the CUlaunchConfig is built once per stream and the packed parameter block once per
    key the caller names (e.g. the tuple of addresses the parameters were bound from).

    The launcher owns the kernel's scratch memory (`scratch`, a `ScratchPool`: one zero-filled set
    per stream). `make_params(scratch)` binds the parameters with the set of the stream launched on
    (pass it as `bind_params(..., scratch=scratch)`); where the kernel has scratch parameters a packed
    block is kept per (key, stream), since each stream's pointers differ.

    The first launch on a stream goes through `warpy.runtime.launch` (its checks and error
    messages, and the dynamic shared memory opt-in); later ones call cuLaunchKernelEx directly.
    Calls may come from any thread (the module docstring says how the caches stay whole); the
    caller makes the kernel's context current on the calling thread (`driver.enter`)."""

    def __init__(self, kernel: Kernel, header: Header, *, pdl: bool = False, max_params: int = 64,
                 zeros: Zeros | None = None) -> None:
        self.kernel = kernel
        self.header = header
        self.pdl = pdl
        self.scratch = ScratchPool(header, zeros)
        self._per_stream = bool(self.scratch)
        self._configs: dict[Hashable, Any] = {}
        self._packed: OrderedDict[Hashable, tuple[int, Any]] = OrderedDict()
        self._max_params = max_params
        self._lock = threading.RLock()
        self._driver: Any = None  # the driver module, from the first launch on

    def _key(self, key: Hashable, stream: int | None) -> Hashable:
        return (key, stream_key(stream)) if self._per_stream else key

    def _block(self, key: Hashable, make_params: MakeParams, stream: int | None) -> tuple[int, Any]:
        """(address, what keeps it alive) of the packed block for `key` on `stream`."""
        pkey = self._key(key, stream)
        hit = self._packed.get(pkey)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._packed.get(pkey)
            if hit is None:
                hit = pack_params(make_params(self.scratch.get(stream)))
                self._packed[pkey] = hit
                if len(self._packed) > self._max_params:
                    self._packed.popitem(last=False)  # a thread launching with it holds its own reference
        return hit

    def packed(self, key: Hashable, make_params: MakeParams, stream: int | None = None) -> int:
        """The address of the packed parameter block for `key` on `stream`, made by
        `make_params(scratch)` on a miss (valid while the block is cached: launch through `__call__`)."""
        return self._block(key, make_params, stream)[0]

    def __call__(self, key: Hashable, make_params: MakeParams, stream: int | None = None) -> None:
        """Launch with the parameters of `key` on `stream` (a CUstream handle as an int; None:
        warpy's own stream)."""
        skey = -1 if stream is None else stream
        cfg = self._configs.get(skey)
        if cfg is None:
            with self._lock:
                cfg = self._configs.get(skey)
                if cfg is None:
                    self._configs[skey] = self._first_launch(key, make_params, stream)
                    return
        d = self._driver
        block = self._block(key, make_params, stream)  # held until the driver has copied it
        err = d.cuLaunchKernelEx(cfg, self.kernel.handle, block[0], 0)
        if (err[0] if isinstance(err, tuple) else err) != d.CUresult.CUDA_SUCCESS:
            from warpy.runtime.driver import check

            check(err, f"launch of kernel {self.kernel.name}")

    def _first_launch(self, key: Hashable, make_params: MakeParams, stream: int | None) -> Any:
        from warpy.runtime.driver import cuda
        from warpy.runtime.launcher import default_stream, launch_config, launch_with

        d = self._driver = cuda()
        h = self.header
        cu_stream = default_stream() if stream is None else d.CUstream(stream)
        if self.scratch and stream is not None and _capturing(cu_stream):
            raise WarpyError(f"kernel {self.kernel.name}'s first launch on stream 0x{int(stream):x} is being captured "
                             "into a CUDA graph, and it first allocates that stream's scratch memory, which a capture "
                             "cannot hold: make one call of the same shape on that stream before capturing")
        cfg = launch_config(self.kernel, grid=h.grid, block=h.threads, smem=h.dynsmem, cluster=h.cluster, pdl=self.pdl,
                            stream=cu_stream)
        params = make_params(self.scratch.get(stream))
        launch_with(self.kernel, cfg, params)
        self._packed[self._key(key, stream)] = pack_params(params)
        return cfg


def _capturing(stream: Any) -> bool:
    """Whether `stream` is being captured into a CUDA graph (False where the driver cannot say)."""
    from warpy.runtime.driver import cuda

    d = cuda()
    try:
        err, status = d.cuStreamIsCapturing(stream)
    except Exception:
        return False
    return bool(err == d.CUresult.CUDA_SUCCESS and int(status) != 0)


__all__ = [
    "DeviceSpan", "FastLaunch", "ScratchPool", "alloc_scratch", "bind_params", "encode_cached", "free_scratch",
    "launch_header", "map_table", "rebind_scalars", "run_header", "stream_key", "table_bytes", "tmap_extent_bytes",
]
