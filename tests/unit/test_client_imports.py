"""The client and `hot_tier.records` load the record format only, never the local log.

Each check runs in a fresh interpreter: this process has imported everything already.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOG_MODULES = ("hot_tier.log", "hot_tier.segment", "hot_tier.index", "hot_tier.recovery")


def _modules_after(statement: str) -> set[str]:
    script = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    )
    return set(result.stdout.split())


@pytest.mark.parametrize("statement", ["import diskless.client", "import hot_tier.records"])
def test_import_does_not_load_the_log(statement: str) -> None:
    modules = _modules_after(statement)
    assert "hot_tier.records" in modules
    assert [name for name in LOG_MODULES if name in modules] == []


def test_the_log_still_loads_on_demand_from_the_package() -> None:
    modules = _modules_after("from hot_tier import Log, AppendInfo, LogConfig, OffsetIndex")
    assert "hot_tier.log" in modules
    assert "hot_tier.index" in modules
