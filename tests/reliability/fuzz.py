"""The long fuzz run (nox -s fuzz): ≥ 1,000,000 inputs through the NRI receive path.

    python -m tests.reliability.fuzz [--runs N] [--engine atheris|random] [--seed S]

``atheris`` (coverage-guided, if installed) or ``random`` (recipes from a seeded PRNG, so a
failure is reproducible from the seed and the input number). Any exception other than our
protocol/wire errors escapes and fails the run; so does peak RSS above ``--max-rss-mib``.
Prints inputs, inputs/s and peak RSS.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from collections.abc import Callable, Sequence

MIB = 1 << 20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class Meter:
    def __init__(self, engine: str, max_rss_mib: float) -> None:
        self.engine = engine
        self.max_rss_mib = max_rss_mib
        self.inputs = 0
        self.start = time.perf_counter()

    def report(self) -> str:
        elapsed = time.perf_counter() - self.start
        rate = self.inputs / elapsed if elapsed else 0.0
        return (
            f"fuzz[{self.engine}]: {self.inputs} inputs in {elapsed:.1f}s "
            f"({rate:,.0f} inputs/s), peak RSS {peak_rss_mib():.1f} MiB"
        )

    def check_rss(self) -> None:
        if peak_rss_mib() > self.max_rss_mib:
            raise SystemExit(f"peak RSS above {self.max_rss_mib} MiB: {self.report()}")


def run_random(target: Callable[[bytes], None], runs: int, seed: int, meter: Meter) -> None:
    rng = random.Random(seed)
    every = max(1, runs // 10)
    for n in range(runs):
        recipe = rng.randbytes(rng.randrange(0, 512))
        try:
            target(recipe)
        except BaseException:
            print(f"input #{n} (seed {seed}) failed: recipe={recipe.hex()}", file=sys.stderr)
            raise
        meter.inputs += 1
        if meter.inputs % every == 0:
            meter.check_rss()
            print(meter.report(), flush=True)


def run_atheris(runs: int, meter: Meter) -> None:
    import atheris  # type: ignore[import-untyped]

    with atheris.instrument_imports(include=["nri_resmgr", "tests.reliability.fuzz_target"]):
        from tests.reliability.fuzz_target import one_input

    meter.start = time.perf_counter()  # not counting the instrumented imports
    every = max(1, runs // 10)

    def target(data: bytes) -> None:
        one_input(data)
        meter.inputs += 1
        if meter.inputs % every == 0:
            meter.check_rss()
            print(meter.report(), flush=True)

    # libFuzzer ends the process itself when done (no Python exit handlers run), so the
    # figures come from the periodic reports and libFuzzer's final stats.
    flags = ["-max_len=1024", f"-rss_limit_mb={int(meter.max_rss_mib)}", "-print_final_stats=1"]
    atheris.Setup([sys.argv[0], f"-runs={runs}", *flags], target)
    atheris.Fuzz()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--engine", choices=("auto", "atheris", "random"), default="auto")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--max-rss-mib", type=float, default=512.0)
    args = parser.parse_args(argv)
    engine = args.engine
    if engine == "auto":
        try:
            import atheris  # noqa: F401

            engine = "atheris"
        except ImportError:
            engine = "random"
    if engine == "atheris":
        run_atheris(args.runs, Meter(engine, args.max_rss_mib))
        return 0
    from tests.reliability.fuzz_target import one_input

    meter = Meter(engine, args.max_rss_mib)
    run_random(one_input, args.runs, args.seed, meter)
    meter.check_rss()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
