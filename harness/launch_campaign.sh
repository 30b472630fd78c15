#!/usr/bin/env bash
# Start or resume an ATTUNE campaign: harness/launch_campaign.sh <campaign_dir> [goal_prompt.txt]
#   [--session ID] [--prepare] [--config config.env] [--agent-command CMD]
# The real demo: harness/launch_campaign.sh --demo-real [campaign_dir] [--demo-budget GPUH] (Megatron-LM's own
#   pretrain_gpt.py on this host's CPU; needs ATTUNE_MEGATRON_DIR, ATTUNE_MEGATRON_ARCHIVE or ATTUNE_CORPUS_DIR).
# The demo: harness/launch_campaign.sh --demo [campaign_dir] [--demo-model llama3-70b|qwen3-30b-a3b|qwen3-4b-grpo|qwen3-4b-grpo-loop]
#   [--demo-budget GPUH] (a whole SIMULATED campaign on this machine, in a new temporary directory
#   when none is given; installs what it needs into .venv first).
# harness/launch_campaign.sh --help lists every option of both.
# Python: $ATTUNE_PYTHON, else this checkout's .venv when it has what the launcher needs, else python3.
# Exit codes: 0 finished (budget spent or stop recorded, report written); 1 agent failure (resumable)
# or a failing `attune doctor` check (nothing started);
# 2 bad settings or usage; 3 integrity violation (live runs torn down).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
NEEDS="import yaml, numpy, kubernetes, orjson, matplotlib"

# The real demo runs Megatron-LM's own training loop: torch (its CPU build where the package index has one) and
# the packages the loop imports (the megatron extra), installed into .venv once.
REAL_NEEDS="import torch, six, regex, pydantic, tqdm, pybind11, triton"
if [ "${1:-}" = "--demo-real" ] && [ -z "${ATTUNE_PYTHON:-}" ] && \
   ! { [ -x "$REPO/.venv/bin/python" ] && "$REPO/.venv/bin/python" -c "$NEEDS; $REAL_NEEDS" 2>/dev/null; }; then
  echo "launch_campaign: installing what the real demo needs into $REPO/.venv (once; torch is large) ..." >&2
  [ -x "$REPO/.venv/bin/python" ] || python3 -m venv "$REPO/.venv"
  cpu_torch=$("$REPO/.venv/bin/pip" index versions torch 2>/dev/null | sed -n 's/^Available versions: //p' \
    | tr ',' '\n' | tr -d ' ' | grep -E '^[0-9.]+\+cpu$' | head -n 1 || true)
  if [ -n "$cpu_torch" ]; then
    "$REPO/.venv/bin/pip" install -q --disable-pip-version-check "torch==$cpu_torch" >&2
  fi
  "$REPO/.venv/bin/pip" install -q --disable-pip-version-check -e "$REPO[plot,megatron]" >&2
fi

if [ -n "${ATTUNE_PYTHON:-}" ]; then
  PYTHON="$ATTUNE_PYTHON"
elif [ -x "$REPO/.venv/bin/python" ] && "$REPO/.venv/bin/python" -c "$NEEDS" 2>/dev/null; then
  PYTHON="$REPO/.venv/bin/python"
elif python3 -c "$NEEDS" 2>/dev/null; then
  PYTHON=python3
elif [ "${1:-}" = "--demo" ]; then
  echo "launch_campaign: installing what the demo needs into $REPO/.venv (once) ..." >&2
  [ -x "$REPO/.venv/bin/python" ] || python3 -m venv "$REPO/.venv"
  "$REPO/.venv/bin/pip" install -q --disable-pip-version-check -e "$REPO[plot]" >&2
  PYTHON="$REPO/.venv/bin/python"
else
  echo "launch_campaign: neither $REPO/.venv nor python3 has what the launcher needs ($NEEDS). Fix:" \
       "python3 -m venv $REPO/.venv && $REPO/.venv/bin/pip install -e '$REPO[plot]', or set ATTUNE_PYTHON" >&2
  exit 2
fi
exec "$PYTHON" "$HERE/launcher.py" "$@"
