"""``python -m nri_resmgr`` and the ``nri-resmgr`` console script."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from nri_resmgr.cli import parse_options
from nri_resmgr.errors import UsageError
from nri_resmgr.log import setup_logging


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["demo"]:
        from nri_resmgr.sim import demo

        setup_logging("warning")
        return demo.main(args[1:])
    if args[:1] == ["simulate"]:
        from nri_resmgr.sim import command

        return command.main(args[1:])
    if args[:1] == ["snapshot-topology"]:
        from nri_resmgr.sim import command

        return command.snapshot_main(args[1:])
    try:
        options = parse_options(args)
    except UsageError as exc:
        print(f"nri-resmgr: error: {exc}", file=sys.stderr)
        return exc.exit_status
    setup_logging(options.log_level)
    from nri_resmgr import app

    logging.getLogger("nri_resmgr").debug("options: %s", options)
    return app.main(options)


if __name__ == "__main__":
    sys.exit(main())
