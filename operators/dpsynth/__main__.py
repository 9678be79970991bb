"""``python -m dpsynth``: the command line of :mod:`dpsynth.cli`.

Layer: adapter.
"""

from __future__ import annotations

from dpsynth.cli import main

if __name__ == "__main__":
    main()
