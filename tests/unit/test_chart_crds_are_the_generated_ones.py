"""The chart's copies of the CRDs are exactly what ``make chart-crds`` writes now.

twc's CRDs are generated from the fleet models and the Queue CRD from the test bed's
definition; the chart (deploy/chart) holds files, so a stale copy must fail here rather
than ship.
"""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.conftest import ROOT

CHART = ROOT / "deploy" / "chart"


def test_the_chart_crds_match_the_generator() -> None:
    done = subprocess.run(
        [sys.executable, "tools/chart_crds.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_chart_ships_every_crd_twc_prints() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "twc", "crds"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(printed) if d]
    shipped = [
        d["metadata"]["name"] for d in yaml.safe_load_all((CHART / "crds" / "twc.yaml").read_text())
    ]
    assert names
    assert shipped == names
