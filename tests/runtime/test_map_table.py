"""Tables of tensor maps in global memory (`.tmap NAME table=T slot=K`): the bytes of a table (every
slot's map encoded over its memory, at its offset, 128 bytes a slot), uploaded once per distinct
binding; the table parameter bound to the uploaded memory; one-line refusals. And the watchdog's
hang report: what `on_hang` returns follows the message."""

from __future__ import annotations

from typing import Any

import pytest

from warpy.errors import WarpyError
from warpy.isa.text import parse
from warpy.layout.tma import TmaBox
from warpy.runtime import bind as B
from warpy.runtime.launcher import Scalar
from warpy.runtime.tensormap import TensorMap

HEADER = parse(
    ".kernel k\n.sm sm_90a\n.threads 32\n"
    ".tmap a table=maps slot=0 over=mem dtype=bf16 dims=64,16 strides=128 box=64,16\n"
    ".tmap b table=maps slot=2 over=mem offset=2048 dtype=bf16 dims=64,16 strides=128 box=64,8\n"
    ".tmap c dtype=bf16 dims=64 strides= box=64\n"
    ".param mem u64\n.param maps u64\n.param n u32\n"
).header


def encode(box: TmaBox, address: int) -> TensorMap:
    """A fake encoder: the address in the first 8 bytes, the box's second extent in the next 4."""
    return TensorMap(address.to_bytes(8, "little") + box.box[-1].to_bytes(4, "little") + bytes(116), box, address)


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(B, "_TABLE_CACHE", type(B._TABLE_CACHE)())


def test_the_table_holds_each_slot_at_128_k() -> None:
    data, key = B.table_bytes(HEADER, "maps", {"mem": 0x1000}, encode)
    assert len(data) == 3 * 128
    assert int.from_bytes(data[0:8], "little") == 0x1000 and int.from_bytes(data[8:12], "little") == 16
    assert data[128:256] == bytes(128)  # slot 1: no map declares it
    assert int.from_bytes(data[256:264], "little") == 0x1000 + 2048 and int.from_bytes(data[264:268], "little") == 8
    assert [k[0] for k in key] == [0, 2]
    assert HEADER.kernel_params() == [("c", "tmap"), ("mem", "u64"), ("maps", "u64"), ("n", "u32")]


def test_uploaded_once_per_distinct_binding() -> None:
    uploads: list[bytes] = []

    def upload(data: bytes) -> int:
        uploads.append(data)
        return 0xA0000 + 0x1000 * len(uploads)

    first = B.bind_params(HEADER, {"mem": 0x1000, "c": 0x8000}, {"n": 3}, encode=encode, upload=upload)
    again = B.bind_params(HEADER, {"mem": 0x1000, "c": 0x8000}, {"n": 4}, encode=encode, upload=upload)
    other = B.bind_params(HEADER, {"mem": 0x2000, "c": 0x8000}, {"n": 4}, encode=encode, upload=upload)
    assert len(uploads) == 2
    assert [p.value for p in (first[2], again[2], other[2])] == [0xA1000, 0xA1000, 0xA2000]
    assert isinstance(first[0], TensorMap) and first[0].address == 0x8000  # a map that is a parameter, as before
    assert isinstance(first[3], Scalar) and first[3].value == 3


def test_rebinding_a_scalar_keeps_the_rest_and_encodes_nothing() -> None:
    encoded: list[int] = []

    def counting(box: TmaBox, address: int) -> TensorMap:
        encoded.append(address)
        return encode(box, address)

    first = B.bind_params(HEADER, {"mem": 0x1000, "c": 0x8000}, {"n": 3}, encode=counting, upload=lambda d: 0xA000)
    n = len(encoded)
    again = B.rebind_scalars(HEADER, first, {"n": 7})
    assert len(encoded) == n  # no map encoded again, no table uploaded
    assert again[:3] == first[:3] and isinstance(again[3], Scalar) and again[3].value == 7
    assert first[3].value == 3  # the first binding is not changed
    # the same bytes as binding afresh with n = 7
    fresh = B.bind_params(HEADER, {"mem": 0x1000, "c": 0x8000}, {"n": 7}, encode=encode, upload=lambda d: 0xA000)
    assert [p.value if isinstance(p, Scalar) else p.address for p in again] == \
        [p.value if isinstance(p, Scalar) else p.address for p in fresh]


@pytest.mark.parametrize("name", ["c", "maps", "nothing"])
def test_rebinding_what_is_not_a_scalar_is_refused(name: str) -> None:
    first = B.bind_params(HEADER, {"mem": 0x1000, "c": 0x8000}, {"n": 3}, encode=encode, upload=lambda d: 0xA000)
    with pytest.raises(WarpyError, match=rf"^kernel k has no scalar parameter '{name}'$"):
        B.rebind_scalars(HEADER, first, {name: 1})


@pytest.mark.parametrize("memory,what", [
    ({"mem": B.DeviceSpan(0x1000, 1024), "c": 0x8000}, "spans bytes 0..2048 of 'mem', but the memory given holds 1024"),
    ({"mem": 0x1000, "c": 0x8000, "maps": 0x5000}, "'maps' is the table of its tensor maps"),
])
def test_refused_in_one_line(memory: dict[str, Any], what: str) -> None:
    with pytest.raises(WarpyError) as e:
        B.bind_params(HEADER, memory, {"n": 1}, encode=encode, upload=lambda d: 0)
    assert what in str(e.value) and "\n" not in str(e.value)


def test_a_slot_without_its_memory_is_named() -> None:
    with pytest.raises(WarpyError, match=r"nothing given for the memory of tensor map 'a' \(slot 0 of maps, a view of "
                                         r"'mem'; given: c\)"):
        B.table_bytes(HEADER, "maps", {"c": 0x8000}, encode)


def test_a_hang_reports_what_on_hang_says(monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_cuda_driver import CUresult, fake_driver, install

    from warpy.runtime import launcher as L

    install(monkeypatch, fake_driver(cuStreamQuery=lambda s: (CUresult.CUDA_ERROR_NOT_READY,)))
    with pytest.raises(L.HangError) as e:
        L.synchronize(timeout=0.05, kernel="mega", on_hang=lambda: "SM 0: the loader waits\nSM 1: idle")
    assert str(e.value).splitlines() == ["hang: kernel mega did not finish within 0.05 s", "SM 0: the loader waits",
                                         "SM 1: idle"]
