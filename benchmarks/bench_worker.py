"""What the benchmarks that run each configuration in a fresh process share: start this script
again as a worker and read back the JSON line it prints last."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_json_worker(args: list[str], timeout: float, **env: str) -> dict:
    """Runs `python <args>` with the environment plus `env` (Inductor's on-disk caches always off, so
    first calls measure a compilation); returns the last stdout line that is a JSON object, or
    {"error": the last line of stderr} when the worker printed none."""
    full_env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1", **env)
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full_env, timeout=timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1][:200]}
