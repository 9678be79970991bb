#!/usr/bin/env bash
# A real single-node Apache Kafka broker (KRaft) for tests and local use, without Docker:
#   bash deploy/kafka-local.sh start|stop|status|address|fetch
# The script ships inside the package (dpsynth/testing/kafka_local/kafka-local.sh, used by the
# pytest plugin too); this wrapper runs it from a source checkout. See its header for settings.
set -euo pipefail
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/operators/dpsynth/testing/kafka_local/kafka-local.sh" "$@"
