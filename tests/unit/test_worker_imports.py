"""The worker imports only what it runs (issue 29 item 3: start in seconds).

A fresh interpreter imports what ``dpsynth worker`` imports before consuming — the command line,
the worker command, the Faust app and worker, the settings — and must not load the plotting,
optimal-transport or data-frame libraries of the offline tools, nor any scipy submodule
(numba's own version check imports scipy's top level only).
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("matplotlib", "ot", "sklearn", "pandas", "torch", "plotly")
ALLOWED_SCIPY = ("scipy.__config__", "scipy.version", "scipy._distributor_init",
                 "scipy._lib", "scipy._cyutility")

_PROBE = """
import json, sys
from dpsynth.cli import main
import dpsynth.cli.worker
from dpsynth.stream.app import create_app
from faust.worker import Worker
print(json.dumps(sorted(sys.modules)))
"""


def test_the_worker_does_not_import_the_offline_tools_libraries():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,  # noqa: S603
                         check=True, timeout=120).stdout
    modules = json.loads(out)
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert heavy == []
    scipy = [m for m in modules if m.startswith("scipy.")
             and not m.startswith(ALLOWED_SCIPY)]
    assert scipy == []
