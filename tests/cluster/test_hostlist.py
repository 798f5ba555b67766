"""Hostlist expansion/compression: pure functions, checked against Slurm's own syntax."""

from __future__ import annotations

import pytest

from pitstop.cluster.hostlist import MAX_HOSTS, HostlistError, compress, expand


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("gpu01", ["gpu01"]),
        ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
        ("gpu[1-3],login1", ["gpu1", "gpu2", "gpu3", "login1"]),
        ("gpu[8-11]", ["gpu8", "gpu9", "gpu10", "gpu11"]),
        ("gpu[098-101]", ["gpu098", "gpu099", "gpu100", "gpu101"]),
        ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("a, b ,c", ["a", "b", "c"]),
        ("gpu[01-02],cpu[1,3-4]", ["gpu01", "gpu02", "cpu1", "cpu3", "cpu4"]),
        ("node.example-1", ["node.example-1"]),
        ("", []),
        ("   ", []),
    ],
)
def test_expand(expression: str, names: list[str]) -> None:
    assert expand(expression) == names


@pytest.mark.parametrize(
    "bad",
    ["gpu[", "gpu]", "gpu[]", "gpu[a-b]", "gpu[3-1]", "a,,b", "a,", "gpu[1-2", "gpu[[1-2]]",
     "gpu[1--2]", "g p", "gpu;rm", "gpu[1-2]$", "[1-2", "gpu[-1]"],
)
def test_expand_rejects_garbage_with_typed_error(bad: str) -> None:
    with pytest.raises(HostlistError) as info:
        expand(bad)
    assert repr(bad)[1:-1] in str(info.value) or bad.strip() in str(info.value)


def test_expand_refuses_a_memory_bomb() -> None:
    with pytest.raises(HostlistError, match="more than"):
        expand("gpu[1-999999999]")
    with pytest.raises(HostlistError, match="more than"):
        expand("a[1-1000]b[1-1000]")  # a million names from a cartesian product
    assert len(expand(f"n[1-{MAX_HOSTS}]")) == MAX_HOSTS


def test_expand_rejects_non_text() -> None:
    with pytest.raises(HostlistError):
        expand(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("names", "expression"),
    [
        (["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"], "gpu[01-04,07]"),
        (["gpu03", "gpu01", "gpu02"], "gpu[01-03]"),
        (["gpu01"], "gpu01"),
        (["gpu9", "gpu10", "gpu11"], "gpu[9-11]"),
        (["gpu01", "gpu1"], "gpu01,gpu1"),
        (["login", "gpu1", "gpu2", "login"], "login,gpu[1-2]"),
        (["n1-ib", "n2-ib", "n4-ib"], "n[1-2,4]-ib"),
        ([], ""),
    ],
)
def test_compress(names: list[str], expression: str) -> None:
    assert compress(names) == expression


@pytest.mark.parametrize(
    "names",
    [
        ["gpu01", "gpu02", "gpu10", "gpu100", "gpu9", "gpu1", "x", "gpu001"],
        [f"rack{r}-n{n:03d}" for r in range(3) for n in range(0, 40, 3)],
        ["a1b2", "a1b3", "a2b2"],
    ],
)
def test_compress_then_expand_round_trips(names: list[str]) -> None:
    assert sorted(expand(compress(names))) == sorted(set(names))


@pytest.mark.parametrize("bad", ["", "gpu 1", "gpu[1]", None, "a,b"])
def test_compress_rejects_bad_names(bad) -> None:
    with pytest.raises(HostlistError):
        compress([bad])
