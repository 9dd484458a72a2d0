"""``python -m nri_resmgr`` and the ``nri-resmgr`` console script."""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Sequence

from nri_resmgr.log import setup_logging


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["demo"]:
        from nri_resmgr import demo

        setup_logging("warning")
        return demo.main(args[1:])
    if args[:1] == ["simulate"]:
        from nri_resmgr.simulate import command

        return command.main(args[1:])
    if args[:1] == ["snapshot-topology"]:
        from nri_resmgr.simulate import command

        return command.snapshot_main(args[1:])
    # Start-up makes ~70,000 long-lived objects (modules, classes, the policy's topology):
    # automatic collections while they are made find next to no garbage and only slow the
    # start. One full collection runs before the heap is frozen (app.freeze_startup_heap),
    # which turns collection back on; so does waiting for a cluster's configuration.
    gc.disable()
    try:
        return _daemon(args)
    finally:
        gc.enable()


def _daemon(args: list[str]) -> int:
    # Imported here, with collection off: the NRI stack is most of the start-up time.
    from nri_resmgr.cli import UsageError, parse_options

    try:
        options = parse_options(args)
    except UsageError as exc:
        print(f"nri-resmgr: error: {exc}", file=sys.stderr)
        return 2
    setup_logging(options.log_level)
    from nri_resmgr import app

    logging.getLogger("nri_resmgr").debug("options: %s", options)
    return app.main(options)


if __name__ == "__main__":
    sys.exit(main())
