"""An immutable set of CPU (or memory node) ids with the kernel's list syntax ("0-3,8")."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

MAX_ID = 1 << 16
"""Ids above this are rejected: the kernel's NR_CPUS ceiling is far below it, and a typo such as
"0-4000000" would otherwise allocate millions of ints."""


class CpuSetError(ValueError):
    """A cpuset string that is not valid Linux list syntax."""


class CpuSet:
    """A frozen set of non-negative ids, ordered when iterated, printed as a Linux list."""

    __slots__ = ("_ids",)

    def __init__(self, ids: Iterable[int] = ()) -> None:
        frozen = frozenset(ids)
        for i in frozen:
            if not isinstance(i, int) or i < 0:
                raise CpuSetError(f"invalid cpu id {i!r}: must be a non-negative integer")
        self._ids: frozenset[int] = frozen

    @classmethod
    def _trusted(cls, ids: frozenset[int]) -> CpuSet:
        # Results of set algebra on valid sets are valid: skip the per-id check.
        cs = cls.__new__(cls)
        cs._ids = ids
        return cs

    @classmethod
    def parse(cls, text: str) -> CpuSet:
        """Parse "0-3,8,10-11"; the empty string (or whitespace) is the empty set."""
        text = text.strip()
        if not text:
            return cls()
        ids: set[int] = set()
        for part in text.split(","):
            ids.update(_parse_range(part.strip(), text))
        return cls(ids)

    def __str__(self) -> str:
        return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in self.ranges())

    def __repr__(self) -> str:
        return f"CpuSet({str(self)!r})"

    def ranges(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for i in sorted(self._ids):
            if out and out[-1][1] == i - 1:
                out[-1] = (out[-1][0], i)
            else:
                out.append((i, i))
        return out

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._ids))

    def __len__(self) -> int:
        return len(self._ids)

    def __bool__(self) -> bool:
        return bool(self._ids)

    def __contains__(self, item: object) -> bool:
        return item in self._ids

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CpuSet) and self._ids == other._ids

    def __hash__(self) -> int:
        return hash(self._ids)

    def __or__(self, other: CpuSet) -> CpuSet:
        return CpuSet._trusted(self._ids | other._ids)

    def __and__(self, other: CpuSet) -> CpuSet:
        return CpuSet._trusted(self._ids & other._ids)

    def __sub__(self, other: CpuSet) -> CpuSet:
        return CpuSet._trusted(self._ids - other._ids)

    def issubset(self, other: CpuSet) -> bool:
        return self._ids <= other._ids

    def isdisjoint(self, other: CpuSet) -> bool:
        return self._ids.isdisjoint(other._ids)

    def ids(self) -> frozenset[int]:
        return self._ids

    @staticmethod
    def union_all(sets: Iterable[CpuSet]) -> CpuSet:
        ids: set[int] = set()
        for s in sets:
            ids |= s._ids
        return CpuSet._trusted(frozenset(ids))


def _parse_range(part: str, whole: str) -> range:
    if not part:
        raise CpuSetError(f"invalid cpuset {whole!r}: empty element")
    lo_text, sep, hi_text = part.partition("-")
    lo = _parse_id(lo_text, whole)
    hi = _parse_id(hi_text, whole) if sep else lo
    if hi < lo:
        raise CpuSetError(f"invalid cpuset {whole!r}: range {part!r} is reversed")
    return range(lo, hi + 1)


def _parse_id(text: str, whole: str) -> int:
    text = text.strip()
    if not text.isdigit():
        raise CpuSetError(f"invalid cpuset {whole!r}: {text!r} is not a cpu id")
    value = int(text)
    if value > MAX_ID:
        raise CpuSetError(f"invalid cpuset {whole!r}: id {value} is above {MAX_ID}")
    return value
