"""dpsynth's benchmarks: not installed with the package; run with ``python -m benchmarks``."""
