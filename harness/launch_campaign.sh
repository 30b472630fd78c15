#!/usr/bin/env bash
# Start or resume an ATTUNE campaign: harness/launch_campaign.sh <campaign_dir> [goal_prompt.txt]
#   [--session ID] [--prepare] [--config config.env]
# Exit codes: 0 finished (budget spent or stop recorded, report written); 1 agent failure (resumable);
# 2 bad settings or usage; 3 integrity violation (live runs torn down).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${ATTUNE_PYTHON:-python3}"
exec "$PYTHON" "$HERE/launcher.py" "$@"
