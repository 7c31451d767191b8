"""Simulated mlxreg ROCE_ACCL: parses like the real sample; runtime state lost at reboot."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import mlxreg
from simhost import make_host, run_tool

from gpunode.sim import hwstate


def verbatim(path: Path) -> str:
    return "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#")) + "\n"


@pytest.fixture
def hgx(tmp_path: Path) -> Path:
    return make_host(tmp_path / "h", "hgx-h100")


def get(root: Path, dev: str) -> dict:
    res = run_tool(root, "mlxreg", "-d", dev, "--reg_name", "ROCE_ACCL", "--get")
    assert res.rc == 0, res.out
    return mlxreg.parse_get(res.out)


def test_get_parses_like_the_real_sample(hgx: Path, real_outputs: Path) -> None:
    real = mlxreg.parse_get(verbatim(real_outputs / "mlxreg-roce-accl-get-adaptive-routing.txt"))
    assert run_tool(hgx, "mlxreg", "-d", "1a:00.0", "--reg_name", "ROCE_ACCL", "--set",
                    "adaptive_routing_forced_en=0x1", "--yes").rc == 0
    res = run_tool(hgx, "mlxreg", "-d", "1a:00.0", "--reg_name", "ROCE_ACCL", "--get")
    sim = mlxreg.parse_get(res.out)
    assert list(sim["fields"]) == list(real["fields"])  # same fields, same order
    assert sim == real  # the sample was read right after setting adaptive routing on a fresh NIC
    real_lines = [x for x in verbatim(real_outputs / "mlxreg-roce-accl-get-adaptive-routing.txt").splitlines()
                  if not x.startswith("# ")]
    assert res.out.splitlines() == [x for x in real_lines if x]


def test_set_is_per_function_and_cleared_by_reboot(hgx: Path) -> None:
    assert get(hgx, "0000:1a:00.0")["fields"]["adaptive_routing_forced_en"] == 0
    res = run_tool(hgx, "mlxreg", "-d", "0000:1a:00.0", "--reg_name", "ROCE_ACCL", "--set",
                   "adaptive_routing_forced_en=0x1,roce_tx_window_en=0x1", "--yes")
    assert res.rc == 0
    fields = get(hgx, "0000:1a:00.0")["fields"]
    assert (fields["adaptive_routing_forced_en"], fields["roce_tx_window_en"]) == (1, 1)
    assert get(hgx, "0000:3c:00.0")["fields"]["adaptive_routing_forced_en"] == 0
    hwstate.reboot_state(hgx)
    assert get(hgx, "0000:1a:00.0")["fields"]["adaptive_routing_forced_en"] == 0


def test_set_without_yes_prompts(hgx: Path) -> None:
    res = run_tool(hgx, "mlxreg", "-d", "1a:00.0", "--reg_name", "ROCE_ACCL", "--set",
                   "adaptive_routing_forced_en=1", stdin="n\n")
    assert res.rc == 1 and "-E- Aborted by user" in res.out
    assert get(hgx, "1a:00.0")["fields"]["adaptive_routing_forced_en"] == 0
    res = run_tool(hgx, "mlxreg", "-d", "1a:00.0", "--reg_name", "ROCE_ACCL", "--set",
                   "adaptive_routing_forced_en=1", stdin="y\n")
    assert res.rc == 0 and get(hgx, "1a:00.0")["fields"]["adaptive_routing_forced_en"] == 1


@pytest.mark.parametrize("setting", ["no_such_field=1", "adaptive_routing_forced_en=2",
                                     "adaptive_routing_forced_en_field_select=0", "roce_tx_window_en=x"])
def test_bad_set_changes_nothing(hgx: Path, setting: str) -> None:
    res = run_tool(hgx, "mlxreg", "-d", "1a:00.0", "--reg_name", "ROCE_ACCL", "--set", setting, "--yes")
    assert res.rc == 1 and res.out.startswith("-E- ")
    assert not (hgx / "run" / "roce_accl.json").exists()


def test_unknown_register_and_device(hgx: Path) -> None:
    assert mlxreg.parse_get(run_tool(hgx, "mlxreg", "-d", "1a:00.0", "--reg_name", "NOPE", "--get").out)["errors"]
    assert mlxreg.parse_get(run_tool(hgx, "mlxreg", "-d", "77:00.0", "--reg_name", "ROCE_ACCL", "--get").out)["errors"]
