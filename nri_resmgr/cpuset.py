"""An immutable set of CPU (or memory node) ids with the kernel's list syntax ("0-3,8")."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from nri_resmgr.errors import InvalidValue

MAX_ID = 1 << 16
"""Ids above this are rejected: the kernel's NR_CPUS ceiling is far below it, and a typo such as
"0-4000000" would otherwise allocate millions of ints."""

MAX_TEXT = 1 << 16
"""Longer lists are rejected before parsing: the longest real one (every other id up to
MAX_ID) would be about 190 KB, but 64 KiB already holds every other CPU of 8,192."""


LIST_BODY = r"\s*\d+(?:-\d+)?(?:\s*,\s*\d+(?:-\d+)?)*\s*"
"""The list syntax a configuration writes ("0-3,8"), unanchored, read alike by Python's re and
RE2 (the CRDs' patterns): what ``parse`` reads, less the empty list and spaces in a range."""


class CpuSetError(InvalidValue):
    """A cpuset string that is not valid Linux list syntax."""


class CpuSet:
    """A frozen set of non-negative ids, ordered when iterated, printed as a Linux list."""

    __slots__ = ("_ids", "_text")

    def __init__(self, ids: Iterable[int] = ()) -> None:
        frozen = frozenset(ids)
        for i in frozen:
            if not isinstance(i, int) or i < 0:
                raise CpuSetError(f"invalid cpu id {i!r}: must be a non-negative integer")
        self._ids: frozenset[int] = frozen
        self._text: str | None = None

    @classmethod
    def _trusted(cls, ids: frozenset[int]) -> CpuSet:
        # Results of set algebra on valid sets are valid: skip the per-id check.
        cs = cls.__new__(cls)
        cs._ids = ids
        cs._text = None
        return cs

    @classmethod
    def parse(cls, text: str) -> CpuSet:
        """Parse "0-3,8,10-11"; the empty string (or whitespace) is the empty set."""
        text = text.strip()
        if not text:
            return cls()
        if len(text) > MAX_TEXT:
            raise CpuSetError(f"invalid cpuset: {len(text)} characters, more than {MAX_TEXT}")
        # Ranges are merged before any id is made, so "0-65536,0-65536,..." costs one range
        # per element, not 65,537 set insertions per element.
        ids: set[int] = set()
        for r in merge_ranges(_parse_range(part.strip(), text) for part in text.split(",")):
            ids.update(r)
        return cls._trusted(frozenset(ids))

    def __str__(self) -> str:
        # Kept: every container of a pool is sent the same set, and a set never changes.
        text = self._text
        if text is None:
            text = self._text = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in self.ranges())
        return text

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


def merge_ranges(ranges: Iterable[range]) -> list[range]:
    """Overlapping and adjacent ranges joined, in order, without listing their members."""
    merged: list[range] = []
    for r in sorted(ranges, key=lambda r: (r.start, r.stop)):
        if merged and r.start <= merged[-1].stop:
            if r.stop > merged[-1].stop:
                merged[-1] = range(merged[-1].start, r.stop)
        else:
            merged.append(r)
    return merged


def _parse_range(part: str, whole_text: str) -> range:
    whole = _short(whole_text)
    if not part:
        raise CpuSetError(f"invalid cpuset {whole}: empty element")
    lo_text, sep, hi_text = part.partition("-")
    lo = _parse_id(lo_text, whole)
    hi = _parse_id(hi_text, whole) if sep else lo
    if hi < lo:
        raise CpuSetError(f"invalid cpuset {whole}: range {_short(part)} is reversed")
    return range(lo, hi + 1)


def _parse_id(text: str, whole: str) -> int:
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 6:
        raise CpuSetError(f"invalid cpuset {whole}: {_short(text)} is not a cpu id")
    value = int(text)
    if value > MAX_ID:
        raise CpuSetError(f"invalid cpuset {whole}: id {value} is above {MAX_ID}")
    return value


def _short(text: str, limit: int = 60) -> str:
    # Errors quote the bad list, not all of it: a config value reaches every node's log.
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}… ({len(text)} characters)"
