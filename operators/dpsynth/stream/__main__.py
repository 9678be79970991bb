"""``python -m dpsynth.stream worker``: the worker without the main CLI.

Layer: adapter.
"""

from __future__ import annotations

from dpsynth.cli.worker import main

if __name__ == "__main__":
    main()
