"""prometheus_client is loaded only once metrics are exported; counting starts then.

Each check runs in a fresh interpreter: the rest of the suite has long imported it."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from nri_resmgr import app, cli  # the daemon's start-up path
from nri_resmgr.config.models import InstrumentationConfig, TemplateSpec
from nri_resmgr.instrumentation import metrics
from nri_resmgr.observability import setup

observer = metrics.RequestObserver("nri")

def answer() -> None:
    observer.done("CreateContainer", observer.start(), True)

answer()
metrics.count_reload("applied")
print("before", "prometheus_client" in sys.modules, metrics.enabled())
setup._metrics_hook(TemplateSpec())(True)  # export still off: nothing changes
print("off", "prometheus_client" in sys.modules, metrics.enabled())
spec = TemplateSpec(instrumentation=InstrumentationConfig(prometheus_export=True))
setup._metrics_hook(spec)(False)  # refused: nothing changes
print("refused", metrics.enabled())
setup._metrics_hook(spec)(True)
answer()
metrics.count_reload("applied")
prom = metrics.enable()
print("after", prom.NRI_REQUESTS.labels("CreateContainer", "ok")._value.get(),
      prom.CONFIG_RELOADS.labels("applied")._value.get())
"""


def test_no_prometheus_until_export_then_counting_starts() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out == ["before False False", "off False False", "refused False", "after 1.0 1.0"]
