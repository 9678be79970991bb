"""dpsynth tests (a package, so that tests.support and the folders import by full name)."""
