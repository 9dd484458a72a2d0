"""CPU classes as frequency limits, written to sysfs under ``--host-root`` (nri-plugins'
``pkg/resmgr/control/cpu``): per CPU ``cpufreq/scaling_min_freq``, ``scaling_max_freq`` and
``scaling_governor``; per package and die ``intel_uncore_frequency/package_PP_die_DD/
min_freq_khz`` and ``max_freq_khz``.

A separate control step: the policy decides which class each CPU is in, ``apply`` writes
only what differs from its last write, and logs every write. A die's uncore limits are the
highest minimum and the highest maximum of the classes on its CPUs, as upstream takes them.
Restore: before the first write to a file its value is remembered; when no class sets that
file any more (the class was removed, or its CPUs left every classed balloon) the
remembered value is written back. A write that fails (no cpufreq driver, read-only sysfs)
is logged, never fatal: placement does not depend on frequencies.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

from nri_resmgr.sysfs import System

log = logging.getLogger(__name__)


@attrs.frozen
class FreqClass:
    """The settings of one CPU class; 0 or "" leaves that file as it is (or restores it)."""

    name: str
    min_freq: int = 0
    """kHz, like the sysfs files."""
    max_freq: int = 0
    governor: str = ""
    uncore_min_freq: int = 0
    uncore_max_freq: int = 0


class CpuFreqControl:
    """Owns every cpufreq/uncore file it wrote (see the module docstring)."""

    def __init__(self, host_root: str, system: System) -> None:
        self.root = Path(host_root or "/") / "sys/devices/system/cpu"
        self.system = system
        self._original: dict[Path, str] = {}
        """File -> its value before nri-resmgr first wrote it."""
        self._written: dict[Path, str] = {}
        """File -> what nri-resmgr last wrote there (and still owns)."""
        self._failed: set[Path] = set()

    def read_only(self, classes: Iterable[FreqClass]) -> str | None:
        """Which directory ``classes`` would write in is on a read-only filesystem (then they
        can never be applied: a container's /sys is read-only unless mounted otherwise);
        None when none is, or when the files do not exist (that is logged when written)."""
        needed: list[Path] = []
        present = list(classes)
        cpus = sorted(self.system.cpus)
        if cpus and any(c.min_freq or c.max_freq or c.governor for c in present):
            needed.append(self.cpu_file(cpus[0], "scaling_governor").parent)
        if any(c.uncore_min_freq or c.uncore_max_freq for c in present):
            needed.append(self.root / "intel_uncore_frequency")
        for directory in needed:
            try:
                flags = os.statvfs(directory).f_flag
            except OSError:
                continue
            if flags & os.ST_RDONLY:
                return f"{self._shown(directory)} is on a read-only filesystem"
        return None

    def cpu_file(self, cpu: int, name: str) -> Path:
        return self.root / f"cpu{cpu}" / "cpufreq" / name

    def uncore_file(self, package: int, die: int, name: str) -> Path:
        return self.root / "intel_uncore_frequency" / f"package_{package:02d}_die_{die:02d}" / name

    def wanted(self, classes: Mapping[int, FreqClass]) -> dict[Path, str]:
        """The file values for CPU -> class ``classes`` (CPUs not listed: no class)."""
        out: dict[Path, str] = {}
        dies: dict[tuple[int, int], list[FreqClass]] = {}
        for cpu, c in sorted(classes.items()):
            for name, value in (
                ("scaling_min_freq", c.min_freq),
                ("scaling_max_freq", c.max_freq),
                ("scaling_governor", c.governor),
            ):
                if value:
                    out[self.cpu_file(cpu, name)] = str(value)
            info = self.system.cpus.get(cpu)
            if info is not None:
                dies.setdefault((info.package, info.die), []).append(c)
        for (package, die), present in sorted(dies.items()):
            for name, value in (
                ("min_freq_khz", max(c.uncore_min_freq for c in present)),
                ("max_freq_khz", max(c.uncore_max_freq for c in present)),
            ):
                if value:
                    out[self.uncore_file(package, die, name)] = str(value)
        return out

    def apply(self, classes: Mapping[int, FreqClass], why: Mapping[int, str]) -> list[Path]:
        """Bring the files to ``classes`` (``why``: CPU -> its balloon, for the log); return
        the files written."""
        target = self.wanted(classes)
        written: list[Path] = []
        for path in sorted(set(self._written) - set(target)):
            value = self._original.get(path)
            if value is not None and self._write(path, value, "restored"):
                written.append(path)
            self._written.pop(path, None)
        for path, value in sorted(target.items()):
            if self._written.get(path) == value:
                continue
            if path not in self._original:
                before = self._read(path)
                if before is None:
                    continue
                self._original[path] = before
            cpu = _cpu_of(path)
            reason = f"class {classes[cpu].name!r}, {why.get(cpu, '')}" if cpu is not None else ""
            if self._write(path, value, reason or "uncore of the classes on this die"):
                self._written[path] = value
                written.append(path)
        return written

    def _read(self, path: Path) -> str | None:
        try:
            return path.read_text().strip()
        except OSError as e:
            self._fail(path, f"cannot read: {e.strerror or e}")
            return None

    def _write(self, path: Path, value: str, reason: str) -> bool:
        try:
            path.write_text(value)
        except OSError as e:
            self._fail(path, f"cannot write {value}: {e.strerror or e}")
            return False
        self._failed.discard(path)
        log.info("cpu control: %s = %s (%s)", self._shown(path), value, reason)
        return True

    def _fail(self, path: Path, what: str) -> None:
        if path not in self._failed:  # once per file until it works again
            self._failed.add(path)
            log.error("cpu control: %s: %s; CPU class not applied there", self._shown(path), what)

    def _shown(self, path: Path) -> str:
        return "/" + str(path.relative_to(self.root.parent.parent.parent.parent))


def _cpu_of(path: Path) -> int | None:
    name = path.parent.parent.name
    return int(name[3:]) if name.startswith("cpu") and name[3:].isdigit() else None


__all__ = ["CpuFreqControl", "FreqClass"]
