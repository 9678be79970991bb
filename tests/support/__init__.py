"""Kits only dpsynth's own tests use (never shipped in the package)."""
