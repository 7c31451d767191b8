"""Diff logic of the mlxconfig module: desired NV config against ``-e q`` next-boot values."""

from __future__ import annotations

import re

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import nvconfig
from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxconfig import parse_query
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError
from fake_mft import FakeMft


@pytest.fixture
def fake():
    return FakeMft().add_card("0000:18:00").add_card("0000:29:00", ports=2, link=2, name="MCX755106AS-HEA_Ax")


def blocks_of(fake, devices):
    return {device: parse_query(fake.query(device))["devices"][0] for device in devices}


@pytest.mark.parametrize(("device", "card"), [
    ("0000:29:00.1", ("0000:29:00", 1)),
    ("29:00.0", ("0000:29:00", 0)),
    ("0108:00:00.0", ("0108:00:00", 0)),
    ("/dev/mst/mt4129_pciconf1", ("/dev/mst/mt4129_pciconf1", 0)),
    ("/dev/mst/mt4129_pciconf0.1", ("/dev/mst/mt4129_pciconf0", 1)),
    ("mlx5_0", ("mlx5_0", 0)),
])
def test_device_card(device, card):
    assert nvconfig.device_card(device) == card


def test_names_and_numbers_equal_next_boot_plan_nothing(fake):
    blocks = blocks_of(fake, ["0000:18:00.0"])
    planned = nvconfig.plan([{"device": "0000:18:00.0", "settings": {
        "SRIOV_EN": "true", "NUM_OF_VFS": "16", "LINK_TYPE": 1, "ATS_ENABLED": False, "CNP_DSCP": "48"}}], blocks)
    assert planned["writes"] == []
    assert planned["changes"] == {}
    params = planned["devices"]["0000:18:00.0"]["params"]
    assert set(params) == {"SRIOV_EN", "NUM_OF_VFS", "LINK_TYPE_P1", "ATS_ENABLED", "CNP_DSCP_P1"}
    assert params["SRIOV_EN"] == {"default": "True(1)", "current": "True(1)", "next_boot": "True(1)",
                                  "desired": "True(1)", "hidden": False, "change": False}


def test_change_writes_only_differing_keys_as_numbers(fake):
    blocks = blocks_of(fake, ["0000:18:00.0"])
    planned = nvconfig.plan([{"device": "0000:18:00.0", "settings": {
        "SRIOV_EN": True, "NUM_OF_VFS": 8, "LINK_TYPE": "eth"}}], blocks)
    assert planned["writes"] == [{"device": "0000:18:00.0", "card": "0000:18:00",
                                  "set": {"NUM_OF_VFS": "8", "LINK_TYPE_P1": "2"}, "hidden": {}}]
    assert planned["changes"] == {"0000:18:00.0": {"NUM_OF_VFS": {"before": "16", "after": "8"},
                                                   "LINK_TYPE_P1": {"before": "IB(1)", "after": "ETH(2)"}}}
    assert nvconfig.set_argv("mlxconfig", "0000:18:00.0", planned["writes"][0]["set"]) == [
        "mlxconfig", "-d", "0000:18:00.0", "-y", "set", "LINK_TYPE_P1=2", "NUM_OF_VFS=8"]


def test_dual_port_card_sets_card_keys_once_and_each_port_through_its_function(fake):
    devices = ["0000:29:00.0", "0000:29:00.1"]
    blocks = blocks_of(fake, devices)
    settings = {"NUM_OF_VFS": 4, "LINK_TYPE": "IB"}
    planned = nvconfig.plan([{"device": d, "settings": settings} for d in devices], blocks)
    assert planned["writes"] == [
        {"device": "0000:29:00.0", "card": "0000:29:00", "set": {"NUM_OF_VFS": "4", "LINK_TYPE_P1": "1"}, "hidden": {}},
        {"device": "0000:29:00.1", "card": "0000:29:00", "set": {"LINK_TYPE_P2": "1"}, "hidden": {}},
    ]
    assert planned["devices"]["0000:29:00.1"]["params"]["NUM_OF_VFS"]["change"] is True


def test_single_port_card_never_gets_port_two(fake):
    blocks = blocks_of(fake, ["0000:18:00.0"])
    planned = nvconfig.plan([{"device": "0000:18:00.0", "settings": {"LINK_TYPE": "ETH"}}], blocks)
    assert list(planned["writes"][0]["set"]) == ["LINK_TYPE_P1"]
    with pytest.raises(nvconfig.NvConfigError, match=r"LINK_TYPE_P2 names port 2 but the device has port\(s\) 1"):
        nvconfig.plan([{"device": "0000:18:00.0", "settings": {"LINK_TYPE_P2": "ETH"}}], blocks)


def test_conflicting_wishes_for_one_card_are_rejected_with_every_error(fake):
    devices = ["0000:29:00.0", "0000:29:00.1", "0000:18:00.0"]
    blocks = blocks_of(fake, devices)
    with pytest.raises(nvconfig.NvConfigError) as err:
        nvconfig.plan([
            {"device": "0000:29:00.0", "settings": {"NUM_OF_VFS": 8, "SRIOV_EN": True}},
            {"device": "0000:29:00.1", "settings": {"NUM_OF_VFS": 16, "SRIOV_EN": "True(1)"}},
            {"device": "0000:18:00.0", "settings": {"SRIOV_EN": "ETH", "NO_SUCH_PARAM": 1}},
        ], blocks)
    assert err.value.errors == [
        "card 0000:29:00: 0000:29:00.0 wants NUM_OF_VFS=8 but 0000:29:00.1 wants NUM_OF_VFS=16; "
        "NV config is per card, both functions share it",
        "0000:18:00.0: SRIOV_EN is a boolean (prints True(1)), got 'ETH'",
        "0000:18:00.0: mlxconfig shows neither NO_SUCH_PARAM nor NO_SUCH_PARAM_P1 on this device; "
        "if it is hidden until ADVANCED_PCI_SETTINGS=1, add ADVANCED_PCI_SETTINGS: true to the same settings",
    ]


@pytest.mark.parametrize(("settings", "problem"), [
    ({"NUM_OF_VFS": "lots"}, "NUM_OF_VFS is a number (prints 16), got 'lots'"),
    ({"NUM_OF_VFS": [1, 2]}, "expected a name or number"),
    ({"num of vfs": 1}, "is not an mlxconfig parameter name"),
])
def test_bad_values_are_rejected(fake, settings, problem):
    with pytest.raises(nvconfig.NvConfigError, match=re.escape(problem)):
        nvconfig.plan([{"device": "0000:18:00.0", "settings": settings}], blocks_of(fake, ["0000:18:00.0"]))


def test_duplicate_device_rejected(fake):
    blocks = blocks_of(fake, ["0000:18:00.0"])
    with pytest.raises(nvconfig.NvConfigError, match="listed twice"):
        nvconfig.plan([{"device": "0000:18:00.0", "settings": {}}] * 2, blocks)


def test_hidden_parameter_needs_advanced_pci_settings_in_the_same_wish(fake):
    blocks = blocks_of(fake, ["0000:18:00.0"])
    planned = nvconfig.plan([{"device": "0000:18:00.0", "settings": {
        "ADVANCED_PCI_SETTINGS": True, "MAX_ACC_OUT_READ": 32}}], blocks)
    assert planned["writes"] == [{"device": "0000:18:00.0", "card": "0000:18:00",
                                  "set": {"ADVANCED_PCI_SETTINGS": "1"}, "hidden": {"MAX_ACC_OUT_READ": "32"}}]
    assert planned["changes"]["0000:18:00.0"]["MAX_ACC_OUT_READ"] == {"before": None, "after": "32"}
    assert "(hidden)" in nvconfig.diff_table(planned)


def test_pending_params_and_reboot(fake):
    fake.cards["0000:18:00"]["params"]["NUM_OF_VFS"]["next_boot"] = 8
    (block,) = blocks_of(fake, ["0000:18:00.0"]).values()
    assert nvconfig.pending_params(block) == ["NUM_OF_VFS"]
    fake.reboot()
    (block,) = blocks_of(fake, ["0000:18:00.0"]).values()
    assert nvconfig.pending_params(block) == []


def test_verify_names_a_value_that_did_not_take(fake):
    blocks = blocks_of(fake, ["0000:18:00.0"])
    planned = nvconfig.plan([{"device": "0000:18:00.0", "settings": {"NUM_OF_VFS": 8}}], blocks)
    assert nvconfig.verify(planned, blocks) == [("0000:18:00.0", "NUM_OF_VFS", "8", "16")]
    fake.cards["0000:18:00"]["params"]["NUM_OF_VFS"]["next_boot"] = 8
    assert nvconfig.verify(planned, blocks_of(fake, ["0000:18:00.0"])) == []


def test_diff_table_is_readable(fake):
    blocks = blocks_of(fake, ["0000:18:00.0"])
    planned = nvconfig.plan([{"device": "0000:18:00.0", "settings": {"NUM_OF_VFS": 8, "SRIOV_EN": 1}}], blocks)
    assert nvconfig.diff_table(planned, blocks).splitlines() == [
        "0000:18:00.0 (ConnectX7 MCX75310AAS-NEA_Ax), card 0000:18:00, port 1",
        "     parameter   default  current  next boot  desired",
        "  *  NUM_OF_VFS  16       16       16         8",
        "     SRIOV_EN    True(1)  True(1)  True(1)    True(1)",
    ]


def test_query_devices_separates_refused_from_unreadable(fake):
    fake.reject.add("0000:18:00.0")
    blocks, rejected = nvconfig.query_devices(fake.run, "mlxconfig", ["0000:18:00.0", "0000:29:00.1"])
    assert list(blocks) == ["0000:29:00.1"]
    assert rejected == {"0000:18:00.0": "Failed to open the device: 0000:18:00.0"}
    with pytest.raises(ParseError):
        nvconfig.query_devices(lambda argv: (0, "garbage\n", ""), "mlxconfig", ["0000:18:00.0"])


def test_display_value_spellings():
    assert nvconfig.display_value("LINK_TYPE_P1", "eth") == "ETH(2)"
    assert nvconfig.display_value("SRIOV_EN", True) == "True(1)"
    assert nvconfig.display_value("SRIOV_EN", "false") == "False(0)"
    assert nvconfig.display_value("NUM_OF_VFS", 8) == "8"


def test_block_of_rebuilds_what_the_plan_reads_from_the_printed_text(tmp_path):
    """The host read returns only config_of's printed text; block_of gives the plan, the pending parameters and
    the unknown current values the same answers as the parsed block, on the real mlxconfig query samples and on
    the simulated DGX's three-column read with a value waiting for next boot."""
    from conftest import SHARED

    # The samples' "# source:" header lines are not tool output.
    texts = ["\n".join(line for line in p.read_text().splitlines() if not line.startswith("#")) + "\n"
             for p in sorted((SHARED / "real-outputs").glob("mlxconfig*q*"))]
    simhost = pytest.importorskip("simhost")
    host = simhost.make_host(tmp_path / "dgx", "dgx-h100")
    from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify
    from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import read_sysfs

    pci = classify(read_sysfs(str(host / "sys")))["rails"][0]["pci_address"]
    assert simhost.run_tool(host, "mlxconfig", "-d", pci, "-y", "set", "NUM_OF_VFS=4").rc == 0
    texts.append(simhost.run_tool(host, "mlxconfig", "-d", pci, "-e", "q").out)
    blocks = [b for text in texts for b in parse_query(text)["devices"] if b.get("params")]
    assert len(blocks) >= 3
    for block in blocks:
        device = block.get("device") or pci
        rebuilt = nvconfig.block_of(device, nvconfig.config_of(block))
        assert nvconfig.config_of(rebuilt) == nvconfig.config_of(block)
        assert nvconfig.pending_params(rebuilt) == nvconfig.pending_params(block)
        for param, row in block["params"].items():
            for column in ("default", "current", "next_boot"):
                if row.get(column):
                    assert rebuilt["params"][param][column] == row[column], (param, column)
        wish = [{"device": device, "settings": {"NUM_OF_VFS": 8}}] if "NUM_OF_VFS" in block["params"] else []
        if wish:
            assert nvconfig.plan(wish, {device: rebuilt}) == nvconfig.plan(wish, {device: block})
    assert nvconfig.pending_params(nvconfig.block_of(pci, nvconfig.config_of(blocks[-1]))) == ["NUM_OF_VFS"]
    with pytest.raises(ParseError):
        nvconfig.block_of(pci, {"SRIOV_EN": {"current": "two words"}})
