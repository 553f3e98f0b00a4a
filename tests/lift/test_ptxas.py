"""The ptxas driver: discovery order, the cubin cache, the resource report and warnings."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from warpy.errors import WarpyError
from warpy.lift import ptxas as P

SMALL_PTX = textwrap.dedent(
    """\
    .version 8.7
    .target sm_90a
    .address_size 64

    .visible .entry small(.param .u64 out)
    {
        .reg .b32 %r<2>;
        .reg .b64 %rd<2>;
        .shared .align 8 .b64 bar[1];
        ld.param.u64 %rd1, [out];
        mov.u32 %r1, %tid.x;
        st.global.u32 [%rd1], %r1;
        ret;
    }
    """
)


def _fake_ptxas(folder: Path, version: str = "12.3.45") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "ptxas"
    p.write_text(f"#!/bin/sh\necho 'ptxas: NVIDIA (R) Ptx optimizing assembler'\necho 'Cuda compilation tools, release 12.3, V{version}'\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return p


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No discovery source is set: no WARPY_PTXAS, no wheel, no CUDA_HOME, an empty PATH."""
    monkeypatch.delenv("WARPY_PTXAS", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(P, "_wheel_ptxas", lambda: None)
    monkeypatch.setattr(P, "DEFAULT_CUDA_HOMES", ())
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return tmp_path


# ---------------------------------------------------------------------------------------------
# Discovery


def test_discovery_order(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = clean_env
    env_p = _fake_ptxas(tmp / "env", "12.1.1")
    wheel_p = _fake_ptxas(tmp / "wheel", "12.2.2")
    home_p = _fake_ptxas(tmp / "home" / "bin", "12.3.3")
    path_p = _fake_ptxas(tmp / "pathdir", "12.4.4")
    monkeypatch.setenv("PATH", str(path_p.parent))
    monkeypatch.setenv("CUDA_HOME", str(home_p.parent.parent))
    monkeypatch.setattr(P, "_wheel_ptxas", lambda: wheel_p)
    monkeypatch.setenv("WARPY_PTXAS", str(env_p))

    expected = [("WARPY_PTXAS", env_p, "12.1.1"), ("wheel", wheel_p, "12.2.2"), ("CUDA_HOME", home_p, "12.3.3"),
                ("PATH", path_p, "12.4.4")]
    for found_by, path, version in expected:
        t = P.find_ptxas()
        assert (t.found_by, t.path, t.version) == (found_by, str(path), version)
        # take away this source; the next one is found
        if found_by == "WARPY_PTXAS":
            monkeypatch.delenv("WARPY_PTXAS")
        elif found_by == "wheel":
            monkeypatch.setattr(P, "_wheel_ptxas", lambda: None)
        elif found_by == "CUDA_HOME":
            monkeypatch.delenv("CUDA_HOME")
        else:
            monkeypatch.setenv("PATH", str(tmp / "empty"))
    # last, the conventional toolkit folder
    monkeypatch.setattr(P, "DEFAULT_CUDA_HOMES", (str(home_p.parent.parent),))
    assert P.find_ptxas().found_by == "default"
    monkeypatch.setattr(P, "DEFAULT_CUDA_HOMES", ())
    with pytest.raises(WarpyError, match=r"^no ptxas found: set WARPY_PTXAS"):
        P.find_ptxas()


def test_cuda_home_without_ptxas_falls_through_to_path(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (clean_env / "home" / "bin").mkdir(parents=True)
    monkeypatch.setenv("CUDA_HOME", str(clean_env / "home"))
    p = _fake_ptxas(clean_env / "pathdir")
    monkeypatch.setenv("PATH", str(p.parent))
    assert P.find_ptxas().found_by == "PATH"


def test_bad_warpy_ptxas_is_an_error_not_skipped(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPY_PTXAS", str(clean_env / "nope" / "ptxas"))
    with pytest.raises(WarpyError, match=r"WARPY_PTXAS=.* is not an executable file"):
        P.find_ptxas()


def test_not_a_ptxas(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = clean_env / "bin" / "ptxas"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    monkeypatch.setenv("WARPY_PTXAS", str(fake))
    with pytest.raises(WarpyError, match="is not a working ptxas"):
        P.find_ptxas()


def test_real_ptxas_is_found() -> None:
    t = P.find_ptxas()
    major, minor = t.major_minor
    assert (major, minor) >= (12, 8), "sm_100a needs ptxas 12.8 or later"
    assert "Cuda compilation tools" in t.version_text


# ---------------------------------------------------------------------------------------------
# Assembly and the cache


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("WARPY_CACHE", str(tmp_path / "cache"))
    P.clear_memory_cache()
    yield tmp_path / "cache" / "cubin"
    P.clear_memory_cache()


def test_assemble_small(cache: Path) -> None:
    c = P.assemble(SMALL_PTX, "sm_90a")
    assert c.data[:4] == b"\x7fELF"
    assert c.arch == "sm_90a"
    assert c.kernels == ("small",)
    r = c.resource("small")
    assert r.registers > 0 and r.spill_stores == 0 and r.stack_frame == 0
    assert r.shared_bytes == 8  # the one mbarrier-sized .shared variable
    assert c.warnings == ()
    with pytest.raises(WarpyError, match="no kernel 'other'"):
        c.resource("other")


def test_cache_hit_and_miss(cache: Path) -> None:
    first = P.assemble(SMALL_PTX, "sm_90a")
    assert not first.cache_hit
    entries = list(cache.glob("*.wcubin"))
    assert len(entries) == 1
    again = P.assemble(SMALL_PTX, "sm_90a")
    assert again.cache_hit and again == first  # cache_hit does not take part in equality
    P.clear_memory_cache()
    from_disk = P.assemble(SMALL_PTX, "sm_90a")
    assert from_disk.cache_hit and from_disk.data == first.data and from_disk.resources == first.resources
    # flags, target and text are each part of the key
    assert not P.assemble(SMALL_PTX, "sm_90a", ["-O1"]).cache_hit
    assert not P.assemble(SMALL_PTX.replace("sm_90a", "sm_100a"), "sm_100a").cache_hit
    assert not P.assemble(SMALL_PTX + "\n// another comment\n", "sm_90a").cache_hit
    assert len(list(cache.glob("*.wcubin"))) == 4
    assert not list(cache.glob("*.tmp"))
    # use_cache=False neither reads nor writes
    assert not P.assemble(SMALL_PTX, "sm_90a", use_cache=False).cache_hit


def test_cache_key_includes_ptxas_version() -> None:
    a = P.Ptxas("/x/ptxas", "PATH", "12.9.86", "V12.9.86")
    b = P.Ptxas("/x/ptxas", "PATH", "13.0.88", "V13.0.88")
    assert P.cache_key("x", a, (), "sm_90a") != P.cache_key("x", b, (), "sm_90a")
    # the parts are length-prefixed: moving text between parts changes the key
    assert P.cache_key("ab", a, ("c",), "sm_90a") != P.cache_key("a", a, ("bc",), "sm_90a")


def test_damaged_cache_entry_is_a_miss_and_rewritten(cache: Path) -> None:
    P.assemble(SMALL_PTX, "sm_90a")
    (entry,) = cache.glob("*.wcubin")
    raw = entry.read_bytes()
    entry.write_bytes(raw[:-10] + b"0123456789")
    P.clear_memory_cache()
    c = P.assemble(SMALL_PTX, "sm_90a")
    assert not c.cache_hit
    assert entry.read_bytes() == raw


def test_unwritable_cache_still_assembles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("WARPY_CACHE", str(blocker))
    P.clear_memory_cache()
    assert P.assemble(SMALL_PTX, "sm_90a").data[:4] == b"\x7fELF"
    P.clear_memory_cache()


_WORKER = """
import sys
from warpy.lift import ptxas as P
c = P.assemble(open(sys.argv[1]).read(), "sm_90a")
print(len(c.data), c.cache_hit)
"""


def test_concurrent_processes_share_the_cache(cache: Path, tmp_path: Path) -> None:
    src = tmp_path / "k.ptx"
    src.write_text(SMALL_PTX)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, str(src)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    sizes = {o[0].split()[0] for o in outs}
    assert len(sizes) == 1
    assert len(list(cache.glob("*.wcubin"))) == 1
    assert not list(cache.glob("*.tmp"))
    assert P.assemble(SMALL_PTX, "sm_90a").cache_hit


def test_ptx_error_is_one_line(cache: Path) -> None:
    bad = SMALL_PTX.replace("st.global.u32", "st.global.u33")
    with pytest.raises(P.PtxasError) as e:
        P.assemble(bad, "sm_90a")
    msg = str(e.value)
    assert msg.startswith("ptxas failed for sm_90a: ") and "\n" not in msg
    assert "kernel.ptx" in msg and "u33" in e.value.log
    assert not list(cache.glob("*.wcubin"))  # failures are not cached


def test_bad_arguments(cache: Path) -> None:
    with pytest.raises(WarpyError, match="unknown target 'sm_80'"):
        P.assemble(SMALL_PTX, "sm_80")
    with pytest.raises(WarpyError, match="ptxas flag '-arch=sm_90' is not allowed"):
        P.assemble(SMALL_PTX, "sm_90a", ["-arch=sm_90"])
    with pytest.raises(WarpyError, match="allow='spills' is neither"):
        P.assemble(SMALL_PTX, "sm_90a", allow=("spills",))


# ---------------------------------------------------------------------------------------------
# Parsing real ptxas output (captured from ptxas 12.9 and 13.0)

LOG_129 = """\
ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient register resources for the wgmma pipeline in the function 'k_two'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_two' for 'sm_90a'
ptxas info    : Function properties for k_two
    2848 bytes stack frame, 4528 bytes spill stores, 4528 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 2848 bytes cumulative stack size
ptxas info    : Compile time = 271.489 ms
"""

LOG_CALL = """\
ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to wgmma pipeline crossing function boundary at a function call in the function 'k_caller'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_caller' for 'sm_90a'
ptxas info    : Function properties for k_caller
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 154 registers, used 1 barriers, 1032 bytes smem, 400 bytes cmem[0]
ptxas info    : Function properties for k_f
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""

LOG_INJECT = """\
ptxas info    : (C7519) warpgroup.arrive is injected in around line 147 by compiler to allow use of registers in GMMA in function 'k_touch'
ptxas info    : (C7517) warpgroup.wait is injected in around line 146 by compiler to allow use of registers defined by GMMA in function 'k_touch'
ptxas info    : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; unable to determine register count at entry.
ptxas warning : For profile sm_90a adjusting per thread register count of 16 to lower bound of 24
"""


def test_parse_resources_golden() -> None:
    (r,) = P.parse_resources(LOG_129)
    assert r == P.KernelResources(name="k_two", registers=255, stack_frame=2848, spill_stores=4528, spill_loads=4528)
    caller, callee = P.parse_resources(LOG_CALL)
    assert caller == P.KernelResources(name="k_caller", registers=154, barriers=1, shared_bytes=1032, const0_bytes=400)
    assert callee == P.KernelResources(name="k_f", is_entry=False)


def test_parse_warnings_golden() -> None:
    ws = P.parse_warnings(LOG_129, P.parse_resources(LOG_129))
    assert [(w.kind, w.code, w.kernel) for w in ws] == [("wgmma-serialized", "C7511", "k_two"), ("spill", None, "k_two")]
    (w,) = P.parse_warnings(LOG_CALL)
    assert (w.kind, w.code, w.kernel) == ("wgmma-serialized", "C7510", "k_caller")
    assert w.text.startswith("Potential Performance Loss: wgmma.mma_async instructions are serialized due to wgmma")
    ws = P.parse_warnings(LOG_INJECT)
    assert [(w.kind, w.code) for w in ws] == [
        ("wgmma-injected", "C7519"), ("wgmma-injected", "C7517"), ("setmaxnreg-ignored", "C7508"), ("other", None),
    ]
    # the resource report's own info lines are not warnings
    assert P.parse_warnings("ptxas info    : 0 bytes gmem\nptxas info    : Used 8 registers\n") == ()


def test_failing_warnings_and_allow() -> None:
    cubin = P.Cubin(
        data=b"", arch="sm_90a", resources=P.parse_resources(LOG_129),
        warnings=P.parse_warnings(LOG_129, P.parse_resources(LOG_129)), ptxas_version="12.9.86",
    )
    assert [w.kind for w in P.failing_warnings(cubin)] == ["wgmma-serialized", "spill"]
    assert [w.kind for w in P.failing_warnings(cubin, ("spill",))] == ["wgmma-serialized"]
    assert [w.kind for w in P.failing_warnings(cubin, ("C7511",))] == ["spill"]
    assert P.failing_warnings(cubin, ("spill", "wgmma-serialized")) == ()
    # a code other than the warning's does not excuse it
    assert len(P.failing_warnings(cubin, ("C7510", "spill"))) == 1
