"""The instruction's field declaration: a leaf module, 64 words, pack/unpack round-trip, limits refused
in one line, and the table in docs/megakernel.md generated from it."""

from __future__ import annotations

import ast
import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.mega import fields as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_fields_is_a_leaf() -> None:
    """The device interpreter imports it: only the standard library and warpy.errors."""
    tree = ast.parse(open(os.path.join(ROOT, "warpy", "mega", "fields.py")).read())
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in mods if m and m.split(".")[0] not in sys.stdlib_module_names} == {"warpy.errors"}


def test_layout_golden() -> None:
    assert F.WORDS == 64 and F.BYTES == 256
    assert F.BY_NAME["opcode"].word == 0 and F.BY_NAME["opcode"].lo == 0
    assert (F.OPERAND_BASE, F.WAIT_BASE, F.ARRIVE_BASE) == (9, 34, 50)
    assert F.BOX_BASE == 58 and F.SCALE_WORD == 63 and F.RESERVED_WORDS == ()
    assert (F.BY_NAME["causal"].word, F.BY_NAME["causal"].lo, F.BY_NAME["group"].lo, F.BY_NAME["group"].bits) == (3, 14, 15, 8)
    assert (F.BY_NAME["op4.box_16"].word, F.BY_NAME["op0.col_stride"].lo, F.BY_NAME["op0.col_stride"].bits) == (62, 23, 9)
    assert (F.BY_NAME["wait7.target"].word, F.BY_NAME["wait7.before_store"].lo) == (49, 31)
    assert (F.BY_NAME["op4.coord3"].word, F.BY_NAME["arrive7"].word) == (33, 57)
    assert F.fp32_bits(1e-5) == 0x3727C5AC and F.fp32_value(0x3F800000) == 1.0


values = st.fixed_dictionaries({}, optional={f.name: st.integers(0, f.mask) for f in F.FIELDS})


@settings(derandomize=True, max_examples=300)
@given(values)
def test_pack_unpack_round_trip(v: dict[str, int]) -> None:
    words = F.pack(v)
    assert len(words) == 64 and all(0 <= w < 1 << 32 for w in words)
    back = F.unpack(words)
    assert back == {f.name: v.get(f.name, 0) for f in F.FIELDS}


@pytest.mark.parametrize("name,value,msg", [
    ("wait3.target", 1 << 24, "field wait3.target = 16777216 does not fit its 24 bits"),
    ("opcode", 256, "field opcode = 256 does not fit its 8 bits"),
    ("op0.tmap", -1, "field op0.tmap = -1 does not fit"),
    ("nonsense", 1, "no instruction field is called 'nonsense'"),
])
def test_limits_refused_in_one_line(name: str, value: int, msg: str) -> None:
    with pytest.raises(WarpyError) as e:
        F.pack({name: value}, "instruction 7")
    assert msg in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("instruction 7")


def test_docs_table_is_the_declaration() -> None:
    doc = open(os.path.join(ROOT, "docs", "megakernel.md")).read()
    assert F.field_table() in doc
