"""The parts owned elsewhere (policy decisions, DRA) and the hot-path profile.

The policy and DRA benchmarks are imported lazily: when one is missing or fails, its rows
say so and the rest of the bench still runs.
"""

from __future__ import annotations

import importlib
import shutil
import signal
import subprocess
import sys
import traceback
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import trio

from tests.bench.contenders import Contender, open_lane

PROFILE_LIVE = 500
# tests.bench_dra.FLOORS, named here too so that a failed import still names its rows.
FLOORS = ("floor_grpclib_asyncio", "floor_grpcio")


def unavailable(exc: BaseException) -> dict[str, Any]:
    return {"unavailable": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}


def policy_decisions(
    policies: tuple[str, ...] = ("topology-aware", "balloons"),
    on_s8c4k: tuple[str, ...] = ("topology-aware",),
) -> dict[str, Any]:
    """tests.bench_policy: one allocation decision at 500 live, Synchronize of 1,000, on the
    128-CPU machine; ``on_s8c4k`` also on the 4,096-CPU one."""
    runs = [(name, name, "128 CPUs") for name in policies]
    runs += [(f"{name} (s8c4k, 4,096 CPUs)", name, "s8c4k") for name in on_s8c4k]
    try:
        bench_policy = importlib.import_module("tests.bench_policy").bench_policy
    except Exception as exc:
        return {key: unavailable(exc) for key, _, _ in runs}
    out: dict[str, Any] = {}
    for key, name, machine in runs:
        try:
            out[key] = bench_policy(name, n_live=500, machine=machine)
        except Exception as exc:
            traceback.print_exc()
            out[key] = unavailable(exc)
    return out


async def dra_chain(n: int) -> dict[str, Any]:
    """tests.bench_dra_chain: real scheduler allocation and slice wipe repair."""
    return await _bench_module("tests.bench_dra_chain", "bench_chain", n)


async def dra_grouped(n: int) -> dict[str, Any]:
    """tests.bench_dra_grouped: grouped devices, real kube-scheduler 1.37, n4c128 and s8c4k."""
    return await _bench_module("tests.bench_dra_grouped", "bench_grouped", n)


async def _bench_module(module: str, function: str, n: int) -> dict[str, Any]:
    try:
        run = getattr(importlib.import_module(module), function)
        result: dict[str, Any] = await run(n)
    except Exception as exc:
        traceback.print_exc()
        result = unavailable(exc)
    return result


async def dra_prepare(n: int) -> dict[str, Any]:
    """tests.bench_dra: NodePrepareResources from a grpcio client: the idle daemon in turns
    with the floors (trivial grpclib-on-asyncio and grpcio servers), then under NRI load."""
    try:
        bench_dra = importlib.import_module("tests.bench_dra")
    except Exception as exc:
        return {key: unavailable(exc) for key in ("idle", *FLOORS, "nri_load")}
    out: dict[str, Any] = {}
    try:
        out.update(await bench_dra.bench_prepare_with_floors(n))
    except Exception as exc:
        traceback.print_exc()
        out.update({key: unavailable(exc) for key in ("idle", *FLOORS)})
    try:
        out["nri_load"] = await bench_dra.bench_prepare(n, nri_load=True)
    except Exception as exc:
        traceback.print_exc()
        out["nri_load"] = unavailable(exc)
    # CPU claims (issue 17): Prepare of a 2-CPU claim without the API GET; wiped pool back.
    for key, run in (
        ("cpu_claim_state_on_disk", partial(bench_dra.bench_claim_prepare, min(n, 1000))),
        ("cpu_claim_state_on_tmpfs",
         partial(bench_dra.bench_claim_prepare, min(n, 1000), state_on_tmpfs=True)),
        ("wiped_pool_back (real apiserver)", bench_dra.bench_slice_repair),
    ):  # fmt: skip
        try:
            out[key] = await run()
        except Exception as exc:
            traceback.print_exc()
            out[key] = unavailable(exc)
    return out


async def profile_create(
    contender: Contender, harness: Path, workdir: Path, samples: int, out_dir: Path
) -> dict[str, Any]:
    """py-spy on our daemon (samples taken while it holds the GIL, so idle waits do not
    count) while the harness runs ``samples`` container lifecycles at 500 live; own and
    inclusive time by function go to ``profile-<policy>.txt``, the raw stacks beside it."""
    # Also beside this interpreter: a venv's python run by path has its bin dir off PATH.
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        return unavailable(RuntimeError("py-spy is not installed (pip install -e .[bench])"))
    raw = out_dir / f"profile-{contender.policy}.stacks"
    async with open_lane(contender, harness, workdir / "profile") as lane:
        await lane.populate(PROFILE_LIVE)
        argv = [spy, "record", "--pid", str(lane.pid), "--gil", "--nonblocking"]
        argv += ["--rate", "997", "--format", "raw", "--output", str(raw)]
        proc = await trio.lowlevel.open_process(argv, stdout=subprocess.DEVNULL)
        try:
            await lane.sample_lifecycle(samples)
            proc.send_signal(signal.SIGINT)  # py-spy writes its file and exits
            with trio.fail_after(30):
                await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
    report = out_dir / f"profile-{contender.policy}.txt"
    report.write_text(summarize_stacks(raw.read_text()))
    return {"contender": contender.name, "samples": samples, "report": str(report)}


def summarize_stacks(collapsed: str, limit: int = 40) -> str:
    """Own and inclusive share of samples per function, from py-spy's collapsed stacks
    (``frame;frame;... count`` per line)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_function(f) for f in stack.split(";")]
        total += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
    lines = [f"{total} samples (GIL held)", "", "own time:"]
    lines += [f"{n / total:6.1%}  {name}" for name, n in own.most_common(limit)]
    lines += ["", "inclusive time:"]
    lines += [f"{n / total:6.1%}  {name}" for name, n in inclusive.most_common(limit)]
    return "\n".join(lines) + "\n"


def _function(frame: str) -> str:
    """``name (path:line)`` → ``name (package/module.py)``, comparable across lines."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    for marker in ("site-packages/", "/nri_resmgr/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"
