"""Rail neighbours (module_utils/neighbors.py): conformance on the real ``lldpctl -f keyvalue`` and ``ibnetdiscover``
samples (real-outputs-day-two), the JSON variants lldpd prints, and clear errors on anything else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import neighbors
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError

DAY_TWO = Path(__file__).resolve().parents[3] / "shared" / "real-outputs-day-two"


def _sample(name):
    """A sample without its '# source' header lines (and, for a shell transcript, the prompt line)."""
    lines = (DAY_TWO / name).read_text().splitlines()
    body = [line for line in lines if not line.startswith("# ")]
    return "\n".join(line for line in body if not line.startswith("root@")) + "\n"


def test_lldpctl_keyvalue_real_juniper_qfx_neighbours():
    (sample,) = DAY_TWO.glob("lldpctl-keyvalue-juniper-qfx-*.txt")
    got = neighbors.parse_lldpctl_keyvalue(_sample(sample.name))
    assert sorted(got) == ["eth0", "eth1"]
    (eth0,) = got["eth0"]
    # The port id is the switch's ifIndex (port.local=512); its description is the name on the switch.
    assert eth0 == {"switch": "sw-filer-f06.dc42", "switch_id": "40:a6:77:7a:72:00", "port": "xe-0/0/1",
                    "port_id": "512", "port_descr": "xe-0/0/1", "mgmt_ip": "10.192.192.116", "via": "LLDP"}
    assert got["eth1"][0]["switch"] == "sw-filer-f05.dc42"


def test_lldpctl_keyvalue_variants():
    text = ("lldp.bond0.100.via=LLDP\nlldp.bond0.100.rid=3\nlldp.bond0.100.chassis.mac=0c:42:a1:00:00:01\n"
            "lldp.bond0.100.chassis.name=leaf-a1\nlldp.bond0.100.port.ifname=swp17\nlldp.bond0.100.port.descr=rail 0\n"
            "lldp.bond0.100.via=LLDP\nlldp.bond0.100.rid=4\nlldp.bond0.100.chassis.name=leaf-a2\n"
            "lldp.bond0.100.port.ifname=swp18\n")
    got = neighbors.parse_lldpctl_keyvalue(text)
    # a dotted interface name, ifname port ids, and two neighbours on one interface
    assert [(n["switch"], n["port"]) for n in got["bond0.100"]] == [("leaf-a1", "swp17"), ("leaf-a2", "swp18")]
    assert neighbors.parse_lldpctl_keyvalue("") == {}
    with pytest.raises(ParseError, match=r"lldpctl -f keyvalue: expected lines .*line 1: 'Interface: eth0'"):
        neighbors.parse_lldpctl_keyvalue("Interface: eth0\n")


def test_lldpctl_json_and_json0():
    one = {"lldp": {"interface": {"enp77s0np0": {
        "via": "LLDP", "rid": "1", "age": "0 day, 00:10:00",
        "chassis": {"leaf-su1-r2": {"id": {"type": "mac", "value": "b8:59:9f:00:01:02"}, "descr": "Cumulus Linux",
                                    "mgmt-ip": "10.0.0.12"}},
        "port": {"id": {"type": "ifname", "value": "swp3"}, "descr": "swp3", "ttl": "120"}}}}}
    got = neighbors.parse_lldpctl_json(json.dumps(one))
    assert got == {"enp77s0np0": [{"switch": "leaf-su1-r2", "switch_id": "b8:59:9f:00:01:02", "port": "swp3",
                                   "port_id": "swp3", "port_descr": "swp3", "mgmt_ip": "10.0.0.12", "via": "LLDP"}]}
    many = {"lldp": {"interface": [{"eth0": one["lldp"]["interface"]["enp77s0np0"]},
                                   {"eth1": one["lldp"]["interface"]["enp77s0np0"]}]}}
    assert sorted(neighbors.parse_lldpctl_json(json.dumps(many))) == ["eth0", "eth1"]
    json0 = {"lldp": [{"interface": [{"name": "eth2", "via": "LLDP", "chassis": [{
        "id": [{"type": "mac", "value": "b8:59:9f:00:01:03"}], "name": [{"value": "leaf-su1-r3"}]}],
        "port": [{"id": [{"type": "ifname", "value": "swp4"}], "descr": [{"value": "swp4"}]}]}]}]}
    assert neighbors.parse_lldpctl_json(json.dumps(json0))["eth2"][0]["switch"] == "leaf-su1-r3"
    assert neighbors.parse_lldpctl_json('{"lldp": {}}') == {}
    with pytest.raises(ParseError, match="lldpctl -f json: expected JSON"):
        neighbors.parse_lldpctl_json("lldp.eth0.via=LLDP")


def test_ibnetdiscover_real_mqm9700_fabric():
    (sample,) = DAY_TWO.glob("ibnetdiscover-mqm9700-*.txt")
    nodes = neighbors.parse_ibnetdiscover(_sample(sample.name))
    (switch,) = nodes
    assert switch["type"] == "Switch" and switch["ports"] == 129 and switch["lid"] == 1
    assert switch["desc"] == "MF0;CNTSN-POD229-QM97-IB-02:MQM9700/U1"
    assert [link["port"] for link in switch["links"]] == [1, 2, 3, 4, 6]
    assert switch["links"][0] == {"port": 1, "remote_type": "Ca", "remote_guid": "b83f<redacted>", "remote_port": 1,
                                  "remote_desc": "tj01-4090-node005 mlx5_2", "remote_lid": 22, "speed": "2xNDR"}
    peers = neighbors.ib_neighbours(nodes)
    assert peers[("tj01-4090-node009", "mlx5_2")] == {"switch": "MF0;CNTSN-POD229-QM97-IB-02:MQM9700/U1",
                                                     "switch_guid": "9c05<redacted>", "port": 6, "speed": "2xNDR"}


def test_ibnetdiscover_ca_blocks_and_errors():
    text = ('vendid=0x2c9\ndevid=0x1021\nsysimgguid=0xb83fd203004d0ff0\ncaguid=0xb83fd203004d0ff0\n'
            'Ca\t1 "H-b83fd203004d0ff0"\t\t# "gpu07 mlx5_0"\n'
            '[1](b83fd203004d0ff0) \t"S-9c0591030090e000"[17]\t\t# lid 5 lmc 0 "leaf-r1" lid 1 4xNDR\n')
    nodes = neighbors.parse_ibnetdiscover(text)
    assert neighbors.ib_neighbours(nodes) == {("gpu07", "mlx5_0"): {"switch": "leaf-r1",
                                                                    "switch_guid": "9c0591030090e000",
                                                                    "port": 17, "speed": "4xNDR"}}
    with pytest.raises(ParseError, match="ibnetdiscover: expected node blocks.*line 2"):
        neighbors.parse_ibnetdiscover("vendid=0x2c9\nsomething else\n")
    with pytest.raises(ParseError, match="ibnetdiscover: expected the fabric's topology"):
        neighbors.parse_ibnetdiscover("")
