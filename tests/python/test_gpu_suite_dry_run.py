"""The GPU suite's part 5 (tests/gpu/python/real_stacks_suite.py) as a dry run: tiny models
on the CPU, sublinear's runs trained without it. It checks that the scripts run end to end
and that their comparisons and JSON hold together; what sublinear does there waits for a
GPU (docs/gpu-suite.md, "Part 5")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "tests/gpu/python/real_stacks_suite.py"


def test_part_five_dry_run_trains_every_configuration_and_compares_them(torch, tmp_path):
    p = subprocess.run([sys.executable, str(SUITE), "--dry-run", "--models", "ddp", "--workdir", str(tmp_path)],
                       capture_output=True, text=True, timeout=800, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    result = json.loads(p.stdout)
    assert result["status"] == "passed" and result["dry_run"] is True
    for name in ("ddp",):
        model = result["models"][name]
        assert model["status"] == "passed", model
        assert set(model["runs"]) == {"baseline", "enable_2x", "checkpoint", "enable_ckpt", "enable_0.5x",
                                      "enable_ckpt_recompute"}
        assert model["runs"]["enable_ckpt_recompute"]["command"][-2:] == ["--offload", "off"]
        # CPU training is deterministic: the two baseline trainings agree, and the "sublinear"
        # runs (without it here) must then match bit for bit.
        assert model["figures"]["deterministic"] is True
        for tag in ("enable_2x", "enable_ckpt", "enable_0.5x", "enable_ckpt_recompute"):
            assert model["checks"][f"{tag}_same_as_baseline"]["passed"], model["checks"]
        assert model["figures"]["enable_2x_overhead"] is not None
        assert model["figures"]["offload_vs_recompute_only"] is not None
    assert result["models"]["ddp"]["runs"]["baseline"]["ddp_backend"] == "gloo"


def test_part_five_refuses_an_unknown_model():
    p = subprocess.run([sys.executable, str(SUITE), "--dry-run", "--models", "gpt,bert"], capture_output=True,
                       text=True, timeout=60, check=False)
    assert p.returncode == 2
    assert "unknown model(s) ['bert']" in p.stderr
