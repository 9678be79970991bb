"""A point-engine worker configuration for processor-level unit tests (our own kit, not shipped).

Two columns x, y in [0, 1], the test key, an unreachable broker (nothing here talks to one), no
release linger, and a state commit with every release, so a test sees each release's commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpsynth.stream.settings import load_config
from dpsynth.testing.kafka import TEST_KEY_HEX


def point_config(tmp_path: Path, *, user_column: str | None = None, **env: str) -> Any:
    """The configuration, with ``env`` (DPSYNTH_* settings) on top; ``user_column`` declares the
    schema's user id column (privacy unit "user")."""
    schema = tmp_path / "schema.json"
    declared: dict[str, Any] = {"version": 1}
    if user_column is not None:
        declared["user_column"] = user_column
    declared["columns"] = [{"name": "x", "lower": 0, "upper": 1},
                           {"name": "y", "lower": 0, "upper": 1}]
    schema.write_text(json.dumps(declared))
    return load_config({
        "DPSYNTH_BROKER": "127.0.0.1:9", "DPSYNTH_SCHEMA_FILE": str(schema),
        "DPSYNTH_EPSILON": "1.0", "DPSYNTH_NOISE_KEY": TEST_KEY_HEX, "DPSYNTH_RUN_ID": "test-run",
        "DPSYNTH_MAX_DEPTH": "10", "DPSYNTH_DATA_DIR": str(tmp_path / "data"),
        "DPSYNTH_RELEASE_LINGER_S": "0", "DPSYNTH_CHECKPOINT_INTERVAL_S": "3600",
        "DPSYNTH_STATE_COMMIT_INTERVAL_S": "0",  # a state commit with every release
        **env,
    })
