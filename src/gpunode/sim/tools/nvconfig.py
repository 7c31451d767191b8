"""The simulated NV config (mlxconfig) parameter catalogue, per NIC model (stdlib only).

Values are raw integers, as the firmware stores them. A parameter is a :class:`Param` with a kind:
``bool`` (``True(1)``/``False(0)``), ``enum`` (``ETH(2)``), ``int`` (a range) or ``array``
(printed ``Array[0..N]``, not settable here). Port parameters exist once per port as
``<NAME>_P1``, ``<NAME>_P2`` (``_P2`` only on two-port cards); every other parameter is per
device, i.e. shared by both functions of a dual-port card (real-outputs/mlxconfig-set-cx7-sigitp-aws.txt:
NUM_OF_VFS set on .0 reads back on .1).

Sources of the defaults: ../shared/hardware-facts.md "mlxconfig / NV config" (SRIOV_EN True,
NUM_OF_VFS 16 on CX-7 / 8 on CX-6 Dx, ROCE_CC_PRIO_MASK 255, CNP_DSCP 48, CNP_802P_PRIO 6,
ROCE_ADAPTIVE_ROUTING_EN, USER_PROGRAMMABLE_CC, ATS_ENABLED, ADVANCED_PCI_SETTINGS all False),
real-outputs/mlxconfig-q-cx7-sriov-device-plugin-601.txt (CX-7 rows),
real-outputs/mstconfig-q-bf3-b3220-edcdavid-ptp-tools.txt (BlueField-3 rows, LINK_TYPE_P1/P2,
QOS_TRUST_STATE, PCI_WR_ORDERING per_mkey(0), ROCE_CONTROL) and
real-outputs/mlxconfig-e-q-cx6lx-sriov-network-operator-968.txt (ConnectX-6 family rows).
Enum members and ranges no sample shows are marked inferred below.
"""

from __future__ import annotations

_BOOL = {"False": 0, "True": 1}


def _named_number(text: str) -> tuple[str, int] | None:
    """``NAME(<number>)`` (``True(1)``, ``ETH(2)``, ``X(-1)``; no parenthesis in the name) -> ``(name, number)``."""
    if not text.endswith(")"):
        return None
    name, sep, number = text[:-1].partition("(")
    digits = number.removeprefix("-")
    if not sep or not name or ")" in name or not digits.isdecimal():
        return None
    return name, int(number)


class Param:
    """One NV config parameter, read-only. A plain class: every simulated tool call imports this module, and
    importing ``dataclasses`` (with ``inspect``) cost each call about 6 ms."""

    __slots__ = ("name", "kind", "default", "options", "low", "high", "length", "port", "hidden", "models",
                 "dual_only")

    def __init__(self, name: str, kind: str, default: int | None = 0, options: dict | None = None, *,
                 low: int = 0, high: int = 0xFFFFFFFF, length: int = 0, port: bool = False, hidden: bool = False,
                 models: tuple = ("cx7", "cx6dx", "cx6lx", "bf3"), dual_only: bool = False):
        values = {"name": name, "kind": kind,  # kind: bool | enum | int | array
                  "default": default, "options": {} if options is None else options,  # enum: NAME -> number
                  "low": low, "high": high, "length": length,  # length: array
                  "port": port,
                  "hidden": hidden,  # shown (and settable) only once ADVANCED_PCI_SETTINGS is 1
                  "models": models, "dual_only": dual_only}
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, key, value):
        raise AttributeError(f"Param is read-only: cannot set {key}")

    def _key(self) -> tuple:
        return tuple(getattr(self, key) if key != "options" else tuple(self.options.items()) for key in self.__slots__)

    def __eq__(self, other):
        return isinstance(other, Param) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"Param({self.name!r}, {self.kind!r})"

    def render(self, value) -> str:
        if self.kind == "array":
            return f"Array[0..{self.length - 1}]"
        if self.kind == "bool":
            return "True(1)" if value else "False(0)"
        if self.kind == "enum":
            name = next((k for k, v in self.options.items() if v == value), None)
            return f"{name}({value})" if name is not None else str(value)
        return str(value)

    def parse(self, text: str) -> int | None:
        """A value as given on the command line -> raw int; None when not valid for this parameter."""
        text = text.strip()
        if self.kind == "array":
            return None
        named = _named_number(text)
        if named:  # "True(1)", "ETH(2)": the name decides, the number must agree
            number = self.parse(named[0])
            return number if number == named[1] else None
        if self.kind == "bool":
            table = {k.upper(): v for k, v in _BOOL.items()}
            if text.upper() in table:
                return table[text.upper()]
            return int(text) if text in ("0", "1") else None
        if self.kind == "enum":
            for name, number in self.options.items():
                if name.upper() == text.upper():
                    return number
            if text.isdecimal() and int(text) in self.options.values():
                return int(text)
            return None
        try:
            number = int(text, 16) if text.lower().startswith("0x") else int(text, 10)
        except ValueError:
            return None
        return number if self.low <= number <= self.high else None


_CX = ("cx7", "cx6dx", "cx6lx", "bf3")
_CX7_BF3 = ("cx7", "bf3")
_LINK_TYPE = {"IB": 1, "ETH": 2, "VPI": 3}  # hardware-facts.md IB(1)/ETH(2); VPI(3) mlxconfig docs

# Order = the order mlxconfig prints them (real samples), a representative subset of ~430 keys.
PARAMS: tuple[Param, ...] = (
    Param("MODULE_SPLIT_M0", "array", None, length=16, models=_CX7_BF3),
    Param("MEMIC_BAR_SIZE", "int", 0, high=255, models=_CX7_BF3),
    Param("MEMIC_SIZE_LIMIT", "enum", 1, {"_256KB": 1, "_512KB": 2, "_1MB": 3}, models=_CX7_BF3),  # 2/3 inferred
    Param("HOST_CHAINING_MODE", "enum", 0, {"DISABLED": 0, "BASIC": 1}, models=_CX7_BF3),  # BASIC inferred
    Param("HOST_CHAINING_DESCRIPTORS", "array", None, length=8, models=_CX7_BF3),
    Param("FLEX_PARSER_PROFILE_ENABLE", "int", 0, high=15),
    Param("PROG_PARSE_GRAPH", "bool", 0),
    Param("ROCE_NEXT_PROTOCOL", "int", 254, high=255),
    Param("DPA_AUTHENTICATION", "bool", 1, models=("cx7",)),
    Param("PF_BAR2_SIZE", "int", 0, high=15, models=_CX7_BF3),
    Param("PF_NUM_OF_VF_VALID", "bool", 0),
    Param("NUM_OF_VFS", "int", 16, high=127),  # default: the card's factory total (profile)
    Param("NUM_OF_PF", "int", 1, low=1, high=2),  # default: the card's port count
    Param("PF_BAR2_ENABLE", "bool", 0),
    Param("HIDE_PORT2_PF", "bool", 0, dual_only=True),
    Param("SRIOV_EN", "bool", 1),
    Param("PF_LOG_BAR_SIZE", "int", 5, high=32),
    Param("VF_LOG_BAR_SIZE", "int", 1, high=32),
    Param("NUM_PF_MSIX", "int", 63, high=2047),
    Param("NUM_VF_MSIX", "int", 11, high=2047),
    Param("INT_LOG_MAX_PAYLOAD_SIZE", "enum", 0, {"AUTOMATIC": 0, "_4KB": 12}),  # _4KB inferred
    Param("ADVANCED_PCI_SETTINGS", "bool", 0),
    Param("MAX_ACC_OUT_READ", "int", 0, high=255, hidden=True),  # hidden until ADVANCED_PCI_SETTINGS=1
    Param("PCI_WR_ORDERING", "enum", 0, {"per_mkey": 0, "force_relax": 1}),  # force_relax inferred
    Param("CQE_COMPRESSION", "enum", 0, {"BALANCED": 0, "AGGRESSIVE": 1}),  # AGGRESSIVE inferred
    Param("IP_OVER_VXLAN_EN", "bool", 0),
    Param("UCTX_EN", "bool", 1),
    Param("TRACER_ENABLE", "bool", 1),
    Param("RDMA_SELECTIVE_REPEAT_EN", "bool", 0),
    Param("ROCE_ADAPTIVE_ROUTING_EN", "bool", 0, models=_CX7_BF3),
    Param("USER_PROGRAMMABLE_CC", "bool", 0, models=_CX7_BF3),
    Param("LINK_TYPE", "enum", 2, _LINK_TYPE, port=True, models=_CX7_BF3),  # default: profile link layer
    Param("ROCE_CC_PRIO_MASK", "int", 255, high=255, port=True),
    Param("CNP_802P_PRIO", "int", 6, high=7, port=True),
    Param("CNP_DSCP", "int", 48, high=63, port=True),
    Param("KEEP_ETH_LINK_UP", "bool", 1, port=True),
    Param("LLDP_NB_DCBX", "bool", 0, port=True),  # True: DCBX negotiated by firmware (BF-3 sample False(0))
    Param("QOS_TRUST_STATE", "enum", 1, {"TRUST_PORT": 0, "TRUST_PCP": 1, "TRUST_DSCP": 2, "TRUST_PCP_DSCP": 3},
          port=True),  # TRUST_PCP(1) from the BF-3 sample; the other members inferred
    Param("ROCE_CONTROL", "enum", 2, {"ROCE_DISABLE": 0, "ROCE_ENABLE": 2}),  # ROCE_DISABLE inferred
    Param("IP_VER", "enum", 0, {"IPv4": 0, "IPv6": 1, "IPv4_IPv6": 2}),  # IPv6 / IPv4_IPv6 inferred
    Param("BOOT_VLAN", "int", 1, high=4095),
    Param("LEGACY_BOOT_PROTOCOL", "enum", 1, {"NONE": 0, "PXE": 1, "iSCSI": 2}),  # NONE / iSCSI inferred
    Param("BOOT_VLAN_EN", "bool", 0),
    Param("ATS_ENABLED", "bool", 0),
    Param("EXP_ROM_UEFI_x86_ENABLE", "bool", 1),
)

MODELS = ("cx7", "cx6dx", "cx6lx", "bf3")

# mlxconfig header lines per board id (PSID); fallbacks per model and port count.
BOARDS = {
    # real-outputs/mlxconfig-q-cx7-sriov-device-plugin-601.txt
    "MT_0000000838": ("ConnectX7", "MCX75310AAS-NEA_Ax",
                      "NVIDIA ConnectX-7 HHHL Adapter card; 400GbE / NDR IB (default mode); Single-port OSFP; "
                      "PCIe 5.0 x16; Crypto Disabled; Secure Boot Enabled;"),
    # real-outputs/mstconfig-q-bf3-b3220-edcdavid-ptp-tools.txt
    "MT_0000000884": ("BlueField3", "900-9D3B6-00CV-A_Ax",
                      "NVIDIA BlueField-3 B3220 P-Series FHHL DPU; 200GbE (default mode) / NDR200 IB; Dual-port "
                      "QSFP112; PCIe Gen5.0 x16 with x16 PCIe extension option; 16 Arm cores; 32GB on-board DDR; "
                      "integrated BMC; Crypto Enabled"),
}
_FALLBACK = {
    # dual-port CX-7: real-outputs/mlxconfig-set-cx7-sigitp-aws.txt
    ("cx7", 2): ("ConnectX7", "MCX755106AS-HEA_Ax",
                 "NVIDIA ConnectX-7 HHHL Adapter Card; 200GbE (default mode) / NDR200 IB; Dual-port QSFP112; PCIe 5.0 "
                 "x16 with x16 PCIe extension option; Crypto Disabled; Secure Boot Enabled"),
    ("cx7", 1): BOARDS["MT_0000000838"],
    ("bf3", 2): BOARDS["MT_0000000884"],
    ("bf3", 1): BOARDS["MT_0000000884"],
    # inferred: no public mlxconfig sample of a CX-6 Dx; part number of the common 100GbE dual-port card
    ("cx6dx", 2): ("ConnectX6DX", "MCX623106AN-CDA_Ax",
                   "ConnectX-6 Dx EN adapter card; 100GbE; Dual-port QSFP56; PCIe 4.0/3.0 x16;"),
    ("cx6dx", 1): ("ConnectX6DX", "MCX623105AN-CDA_Ax",
                   "ConnectX-6 Dx EN adapter card; 100GbE; Single-port QSFP56; PCIe 4.0/3.0 x16;"),
    # real-outputs/mlxconfig-e-q-cx6lx-sriov-network-operator-968.txt
    ("cx6lx", 2): ("ConnectX6LX", "MCX631102AC-ADA_Ax",
                   "ConnectX-6 Lx EN adapter card; 25GbE ; Dual-port SFP28; PCIe 4.0 x8; Crypto and Secure Boot"),
    ("cx6lx", 1): ("ConnectX6LX", "MCX631102AC-ADA_Ax",
                   "ConnectX-6 Lx EN adapter card; 25GbE ; Dual-port SFP28; PCIe 4.0 x8; Crypto and Secure Boot"),
}


def board_header(model: str, ports: int, board_id: str) -> tuple[str, str, str]:
    """``(Device type, Name, Description)`` mlxconfig prints for a card."""
    if board_id in BOARDS and BOARDS[board_id][0] == _FALLBACK[(model, 1)][0]:
        return BOARDS[board_id]
    return _FALLBACK[(model, min(ports, 2))]


def card_params(model: str, ports: int) -> list[tuple[str, Param]]:
    """The parameters a card shows, expanded: ``[("LINK_TYPE_P1", Param), ...]`` in print order."""
    out = []
    for param in PARAMS:
        if model not in param.models or (param.dual_only and ports < 2):
            continue
        if param.port:
            out.extend((f"{param.name}_P{p}", param) for p in range(1, ports + 1))
        else:
            out.append((param.name, param))
    return out


def defaults(model: str, ports: int, *, total_vfs: int, link_layers: list[str]) -> dict[str, int]:
    """The factory default of every settable parameter of a card (raw ints)."""
    values = {}
    for name, param in card_params(model, ports):
        if param.kind == "array":
            continue
        value = param.default
        if param.name == "NUM_OF_VFS":
            value = total_vfs
        elif param.name == "NUM_OF_PF":
            value = ports
        elif param.name == "LINK_TYPE":
            port = int(name.rsplit("_P", 1)[1])
            layer = link_layers[port - 1] if port <= len(link_layers) else link_layers[0]
            value = _LINK_TYPE["IB"] if layer == "InfiniBand" else _LINK_TYPE["ETH"]
        elif param.name == "DPA_AUTHENTICATION" and model == "bf3":
            value = 0
        values[name] = value
    return values


def initial_card(model: str, ports: int, *, total_vfs: int, link_layers: list[str], fw_version: str,
                 board_id: str, functions: list[str]) -> dict:
    """A fresh card entry of hw.json: ``default``, ``current`` and ``next_boot`` all at the factory values."""
    values = defaults(model, ports, total_vfs=total_vfs, link_layers=link_layers)
    return {"model": model, "ports": ports, "functions": functions, "fw_version": fw_version, "psid": board_id,
            "default": dict(values), "current": dict(values), "next_boot": dict(values)}


def link_layer_of(card: dict, port: int, fallback: str) -> str:
    """The link layer a port comes up with, from the card's current LINK_TYPE_P<port> (fallback: profile)."""
    value = card.get("current", {}).get(f"LINK_TYPE_P{port}")
    if value == _LINK_TYPE["IB"]:
        return "InfiniBand"
    if value == _LINK_TYPE["ETH"]:
        return "Ethernet"
    return fallback
