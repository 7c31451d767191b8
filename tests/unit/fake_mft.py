"""A small in-process stand-in for ``mlxconfig`` and ``mlxreg`` used by the module unit tests.

It prints the real layouts (real-outputs ``mlxconfig-e-q-cx6lx-sriov-network-operator-968.txt``,
``mlxconfig-set-cx7-sigitp-aws.txt``, ``mlxreg-roce-accl-get-adaptive-routing.txt``) from a dict of
cards, and keeps NV config per card, as the hardware does. It lets a test make a device refuse
mlxconfig, make a written value not take, or hide parameters until ADVANCED_PCI_SETTINGS=1.
"""

from __future__ import annotations

import copy
import re

BOOL = {0: "False", 1: "True"}
LINK = {1: "IB", 2: "ETH", 3: "VPI"}
ACCL_FIELDS = ["roce_adp_retrans_en", "roce_tx_window_en", "roce_slow_restart_en", "roce_slow_restart_idle_en",
               "min_ack_timeout_limit_disabled", "adaptive_routing_forced_en", "selective_repeat_forced_en",
               "dc_half_handshake_en", "ack_dscp_force", "ack_dscp"]


def cx7_params(ports=1, link=1):
    """Factory NV config of a ConnectX-7 (hardware-facts.md "mlxconfig / NV config")."""
    params = {"SRIOV_EN": ("bool", 1), "NUM_OF_VFS": ("int", 16), "ATS_ENABLED": ("bool", 0),
              "ADVANCED_PCI_SETTINGS": ("bool", 0), "ROCE_ADAPTIVE_ROUTING_EN": ("bool", 0)}
    for port in range(1, ports + 1):
        params[f"LINK_TYPE_P{port}"] = ("link", link)
        params[f"ROCE_CC_PRIO_MASK_P{port}"] = ("int", 255)
        params[f"CNP_DSCP_P{port}"] = ("int", 48)
        params[f"CNP_802P_PRIO_P{port}"] = ("int", 6)
    return {name: {"kind": kind, "default": value, "current": value, "next_boot": value}
            for name, (kind, value) in params.items()}


HIDDEN = {"MAX_ACC_OUT_READ": {"kind": "int", "default": 0, "current": 0, "next_boot": 0}}


def show(param):
    kind = param["kind"]

    def fmt(value):
        if kind == "bool":
            return f"{BOOL[value]}({value})"
        if kind == "link":
            return f"{LINK[value]}({value})"
        return str(value)

    return fmt


class FakeMft:
    """Cards keyed by slot (``0000:18:00``); functions ``<slot>.<n>`` for n < ports."""

    def __init__(self):
        self.cards = {}
        self.reject = set()
        self.not_taking = {}  # device -> params whose write is ignored
        self.failing_set = set()  # devices whose `set` fails after a good query (a tool failing midway)
        self.calls = []
        self.accl = {}

    def add_card(self, slot, ports=1, link=1, name="MCX75310AAS-NEA_Ax"):
        params = cx7_params(ports, link)
        self.cards[slot] = {"ports": ports, "name": name, "params": params, "hidden": copy.deepcopy(HIDDEN)}
        for function in range(ports):
            self.accl[f"{slot}.{function}"] = dict.fromkeys(ACCL_FIELDS, 0) | {"roce_adp_retrans_en": 1,
                                                                                "roce_slow_restart_en": 1}
        return self

    def _card(self, device):
        slot, _, function = device.rpartition(".")
        card = self.cards.get(slot)
        if card is None or not function.isdigit() or int(function) >= card["ports"]:
            return None
        return card

    def visible(self, card):
        params = dict(card["params"])
        if card["params"]["ADVANCED_PCI_SETTINGS"]["next_boot"] == 1:
            params.update(card["hidden"])
        return params

    def reboot(self):
        """Promote next boot to current, except parameters marked ``stuck`` (a value that does not stick)."""
        for card in self.cards.values():
            for param in list(card["params"].values()) + list(card["hidden"].values()):
                if not param.get("stuck"):
                    param["current"] = param["next_boot"]
        for fields in self.accl.values():
            fields["adaptive_routing_forced_en"] = 0

    # -- output ---------------------------------------------------------------------------------
    def _header(self, card, device):
        return ("\nDevice #1:\n----------\n\n"
                f"Device type:        ConnectX7           \nName:               {card['name']:<20}\n"
                "Description:        NVIDIA ConnectX-7 HHHL Adapter card; 400GbE / NDR IB (default mode); "
                "Single-port OSFP; PCIe 5.0 x16; Crypto Disabled; Secure Boot Enabled;\n"
                f"Device:             {device:<20}\n\n")

    def query(self, device):
        card = self._card(device)
        out = self._header(card, device)
        out += "Configurations:" + " " * 42 + "Default             Current         Next Boot\n"
        for name, param in self.visible(card).items():
            fmt = show(param)
            star = "*" if param["next_boot"] != param["default"] else " "
            out += (f"{star:<8}{name:<44}{fmt(param['default']):<21}{fmt(param['current']):<21}"
                    f"{fmt(param['next_boot']):<20}\n")
        out += "The '*' shows parameters with next value different from default/current value.\n"
        return out

    def parse_value(self, param, text):
        text = text.upper()
        if param["kind"] == "bool":
            return {"TRUE": 1, "FALSE": 0, "1": 1, "0": 0}.get(text)
        if param["kind"] == "link":
            return {"IB": 1, "ETH": 2, "VPI": 3, "1": 1, "2": 2, "3": 3}.get(text)
        return int(text) if text.isdigit() else None

    def set(self, device, assignments):
        card = self._card(device)
        params = self.visible(card)
        out = self._header(card, device)
        out += "Configurations:                                      Next Boot       New\n"
        new = {}
        for assignment in assignments:
            name, _, text = assignment.partition("=")
            param = params.get(name)
            if param is None:
                return 1, out, f"-E- The Device doesn't support {name} parameter\n"
            value = self.parse_value(param, text)
            if value is None:
                return 1, out, f"-E- Bad value {text} for {name}\n"
            new[name] = value
            fmt = show(param)
            out += f"         {name:<44}{fmt(param['next_boot']):<16}{fmt(value):<16}\n"
        out += "\n Apply new Configuration? (y/n) [n] : y\nApplying... Done!\n"
        out += "-I- Please reboot machine to load new configurations.\n"
        for name, value in new.items():
            if name not in self.not_taking.get(device, ()):
                params[name]["next_boot"] = value
        return 0, out, ""

    def accl_get(self, device):
        fields = self.accl[device]
        out = "Sending access register...\nField Name                                     | Data\n"
        out += "=" * 60 + "\n"
        for name in ACCL_FIELDS[:7]:
            out += f"{name + '_field_select':<47}| 0x00000001\n"
        for name in ACCL_FIELDS:
            out += f"{name:<47}| 0x{fields[name]:08x}\n"
        return out + "=" * 60 + "\n"

    # -- entry point ----------------------------------------------------------------------------
    def run(self, argv):
        self.calls.append(list(argv))
        tool = argv[0].rsplit("/", 1)[-1]
        args = argv[1:]
        device = args[args.index("-d") + 1]
        if tool in ("mlxconfig", "mstconfig"):
            if device in self.reject or self._card(device) is None:
                return 1, "", f"-E- Failed to open the device: {device}\n"
            if args[-1] == "q":
                return 0, self.query(device), ""
            if "set" in args:
                if device in self.failing_set:
                    return 1, "", f"-E- Failed to set configuration of {device}: Device or resource busy\n"
                return self.set(device, args[args.index("set") + 1:])
        if tool == "mlxfwreset":
            if device in self.reject or self._card(device) is None:
                return 1, f"-E- Failed to open device: {device}\n", ""
            if args[-1] in ("q", "query"):
                return 0, "Reset-levels:\n3: Driver restart and PCI reset  -Supported\n", ""
            if args[-1] in ("r", "reset"):
                return 0, "-I- FW was loaded successfully.\n", ""
        if tool == "mlxreg":
            if device not in self.accl or device in self.reject:
                return 1, "", "-E- Failed to send access register: ME_REG_ACCESS_BAD_PARAM\n"
            if "--get" in args:
                return 0, self.accl_get(device), ""
            if "--set" in args:
                for item in args[args.index("--set") + 1].split(","):
                    name, _, value = item.partition("=")
                    if name not in self.accl[device] or not re.fullmatch(r"0x[0-9a-f]+", value):
                        return 1, "", f"-E- Unknown field {name}\n"
                    if name not in self.not_taking.get(device, ()):
                        self.accl[device][name] = int(value, 16)
                return 0, "Sending access register...\n", ""
        return 2, "", f"fake: unexpected call {argv}\n"


def save(fake, path):
    """Keep a fake's state in a JSON file (for the command-line wrappers)."""
    import json

    state = {"cards": fake.cards, "reject": sorted(fake.reject), "accl": fake.accl,
             "not_taking": {k: sorted(v) for k, v in fake.not_taking.items()},
             "failing_set": sorted(fake.failing_set)}
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(state, handle)


def load(path):
    import json

    with open(path, encoding="utf-8") as handle:
        state = json.load(handle)
    fake = FakeMft()
    fake.cards, fake.accl = state["cards"], state["accl"]
    fake.reject = set(state["reject"])
    fake.not_taking = {k: set(v) for k, v in state["not_taking"].items()}
    fake.failing_set = set(state.get("failing_set", ()))
    return fake


def cli(tool, argv, path):
    """Run one tool call against the state file, print like the tool, return its exit status."""
    import sys

    fake = load(path)
    rc, out, err = fake.run([tool, *argv])
    save(fake, path)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


def reboot_cli(path):
    """``python fake_mft.py reboot <state>``: what a power cycle does to the fake cards."""
    fake = load(path)
    fake.reboot()
    save(fake, path)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(reboot_cli(sys.argv[2]) if sys.argv[1:2] == ["reboot"] else 2)


def install(fake, bindir, state):
    """Write ``mlxconfig`` and ``mlxreg`` wrappers into ``bindir`` that use ``state``."""
    import os
    import sys

    save(fake, state)
    here = os.path.dirname(os.path.abspath(__file__))
    for tool in ("mlxconfig", "mlxreg"):
        path = os.path.join(bindir, tool)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {here!r})\nimport fake_mft\n"
                         f"sys.exit(fake_mft.cli({tool!r}, sys.argv[1:], {str(state)!r}))\n")
        os.chmod(path, 0o755)  # noqa: S103 - an executable test wrapper
