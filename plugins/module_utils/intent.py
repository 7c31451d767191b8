# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fabric declaration: its schema, and its resolution into each host's intent (pure functions, stdlib only).

A fabric is declared once, in the inventory group of its hosts (``group_vars/<fabric group>/gpunode.yml``)::

    gpunode_fabric: roce1                 # the fabric the hosts of this group are cabled to
    gpunode_fabric_settings:
      transport: roce                     # infiniband | roce; no default
      link_speed_gbps: 400                # expected rate of every rail (null: each rail's discovered rate)
      nics:                               # per NIC role that discovery gives (compute, storage, dpu)
        compute: {adaptive_routing: true, num_vfs: 8, nv_config: {}}
      qos: {trust: dscp, pfc_priorities: [3], ...}   # RoCE fabrics only

``resolve_fleet`` turns every host's two variables into one resolved intent per fabric, in one pass:
the defaults filled in, the NV config of each NIC role derived from the transport, the VFs and the
QoS profile, and ``expect``, the shape the read-back checks (node_validation, node_health) take.
Every consumer (the configuring roles, the fleet contract, validation, day two, the report, the
Kubernetes objects) reads that result and nothing else. ``SCHEMA`` is the single description of the
declaration; docs/variables.md is generated from it (``variables_markdown``).

A GPU node in no fabric, a fabric without a transport, an unknown key, a value out of range or a
contradiction (ECN on a priority without PFC, ...) is an ``IntentError`` naming the hosts, the fabric
and the variable: the caller fails the run before any host is touched.
"""

from __future__ import annotations

import json
import re

FABRIC_VAR = "gpunode_fabric"
SETTINGS_VAR = "gpunode_fabric_settings"

# NIC roles a fabric may declare settings for (nic_roles.ROLES less management and ignored, never touched).
MANAGED_ROLES = ("compute", "storage", "dpu")
TRANSPORTS = ("infiniband", "roce")
LINK_SPEEDS_GBPS = (10, 25, 40, 50, 56, 100, 200, 400, 800)
NV_PARAM = re.compile(r"^[A-Z][A-Z0-9_]*$")
FABRIC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")

# Variables that declared a fabric's intent before gpunode_fabric_settings: where each one went.
MOVED = {
    "gpunode_fabric_transport": "transport",
    "nic_firmware_transport": "transport",
    "nic_firmware_fabric": "(gpunode_fabric)",
    "nic_firmware_adaptive_routing": "nics.<role>.adaptive_routing",
    "nic_firmware_roce_accl_roles": "nics.<role>.adaptive_routing",
    "nic_firmware_default_settings": "nics.<role>.nv_config",
    "nic_firmware_settings": "nics.<role>.nv_config",
    "nic_firmware_compute_num_vfs": "nics.compute.num_vfs",
    "nic_firmware_cc_priorities": "qos.ecn_rp_priorities",
    "nic_firmware_cnp_dscp": "qos.cnp_dscp",
    "nic_firmware_cnp_priority": "qos.cnp_priority",
    "sriov_compute_num_vfs": "nics.compute.num_vfs",
    "sriov_storage_num_vfs": "nics.storage.num_vfs",
    "sriov_dpu_num_vfs": "nics.dpu.num_vfs",
    "roce_qos_fabric": "(gpunode_fabric)",
    "roce_qos_fabric_transport": "transport",
    "roce_qos_nic_roles": "qos.nic_roles",
    "roce_qos_lossless": "qos.lossless",
    "roce_qos_trust": "qos.trust",
    "roce_qos_pfc_priorities": "qos.pfc_priorities",
    "roce_qos_ecn_np_priorities": "qos.ecn_np_priorities",
    "roce_qos_ecn_rp_priorities": "qos.ecn_rp_priorities",
    "roce_qos_cnp_dscp": "qos.cnp_dscp",
    "roce_qos_tos": "qos.roce_tos",
    "roce_qos_mtu": "qos.mtu",
    "roce_qos_profiles": "qos (one declaration per fabric)",
    "validation_link_speed_gbps": "link_speed_gbps",
    "validation_link_layer": "transport",
    "validation_num_vfs": "nics.compute.num_vfs",
    "validation_roce_accl": "nics.compute.adaptive_routing",
    "validation_qos": "qos",
    "validation_nv_config": "nics.compute.nv_config",
}


class IntentError(ValueError):
    """The declaration does not hold; ``errors`` lists one message per problem."""

    def __init__(self, errors):
        self.errors = list(errors)
        super().__init__("fabric intent: " + "; ".join(self.errors))


def _priorities(name):
    return {"type": "priorities", "default": [3], "name": name}


# The schema of gpunode_fabric_settings: key -> {type, default, choices/range, description}. ``type``:
# str, bool, int, priorities (a list of distinct 802.1p priorities 0..7), nv_config (PARAM -> value, null
# drops a key), dict (nested keys below ``keys``), roles (NIC role -> ``keys``).
SCHEMA = {
    "transport": {
        "type": "str", "required": True, "choices": TRANSPORTS,
        "description": "What the compute rails are cabled to: C(infiniband) (LINK_TYPE IB, adaptive routing is the "
                       "subnet manager's job, no RoCE QoS) or C(roce) (LINK_TYPE ETH, ROCE_ACCL and the lossless "
                       "QoS profile managed). No default: a missing transport fails the run.",
    },
    "link_speed_gbps": {
        "type": "int", "default": None, "choices": LINK_SPEEDS_GBPS,
        "description": "Expected rate of every compute rail in Gb/s, checked at validation and on day two; null "
                       "takes each rail's rate as discovery read it.",
    },
    "nics": {
        "type": "roles", "default": {},
        "description": "Settings per NIC role that discovery gives (compute, storage, dpu); management and "
                       "ignored NICs are never configured.",
        "keys": {
            "nv_config": {
                "type": "nv_config", "default": {},
                "description": "NV config parameters (mlxconfig, next boot) merged over what the role gets "
                               "from the transport and the other settings; a null value drops a parameter. "
                               "A key without _P<n> means the function's own port.",
            },
            "adaptive_routing": {
                "type": "bool", "default": None,
                "description": "ROCE_ACCL adaptive_routing_forced_en on the role's NICs, now and at every boot "
                               "(RoCE fabrics; null leaves the register alone). The compute rails of a RoCE "
                               "fabric are always managed: undeclared there means false.",
            },
            "num_vfs": {
                "type": "int", "default": None, "min": 0, "max": 127,
                "description": "SR-IOV VFs per PF of the role; the firmware's NUM_OF_VFS of the compute rails "
                               "follows it. Defaults: compute 8, storage 0, dpu 0.",
            },
            "vf_trust": {
                "type": "bool", "default": None,
                "description": "Trust mode of every VF (ip link set ... vf N trust); null leaves it alone.",
            },
            "vf_spoofchk": {
                "type": "bool", "default": None,
                "description": "Spoof checking of every VF; null leaves it alone.",
            },
        },
    },
    "qos": {
        "type": "dict", "default": {},
        "description": "The lossless RoCEv2 profile of the compute rails (RoCE fabrics only; declaring it on "
                       "an InfiniBand fabric is an error). It must match the switches.",
        "keys": {
            "lossless": {"type": "bool", "default": True,
                         "description": "PFC-protected (lossless) RoCE: ECN only on PFC priorities, the "
                                        "RoCE ToS on a PFC priority."},
            "trust": {"type": "str", "default": "dscp", "choices": ("dscp", "pcp"),
                      "description": "What the port classifies traffic by (mlnx_qos --trust)."},
            "pfc_priorities": {**_priorities("pfc"),
                               "description": "802.1p priorities with PFC on (mlnx_qos --pfc)."},
            "ecn_np_priorities": {**_priorities("ecn_np"),
                                  "description": "Priorities whose ECN notification point is enabled "
                                                 "(sysfs ecn/roce_np/enable/<p>)."},
            "ecn_rp_priorities": {**_priorities("ecn_rp"),
                                  "description": "Priorities whose ECN reaction point is enabled (roce_rp); "
                                                 "the firmware's ROCE_CC_PRIO_MASK follows it."},
            "cnp_dscp": {"type": "int", "default": 48, "min": 0, "max": 63,
                         "description": "DSCP of the CNPs the NIC sends (sysfs roce_np/cnp_dscp, NV config "
                                        "CNP_DSCP)."},
            "cnp_priority": {"type": "int", "default": 6, "min": 0, "max": 7,
                             "description": "802.1p priority of the CNPs (NV config CNP_802P_PRIO)."},
            "roce_tos": {"type": "int", "default": 106, "min": 0, "max": 255,
                         "description": "ToS of RDMA-CM connections (cma_roce_tos); its DSCP is ToS >> 2."},
            "mtu": {"type": "int", "default": 9000, "min": 1280, "max": 9978,
                    "description": "MTU of the rail netdevs."},
            "nic_roles": {"type": "roles_list", "default": ["compute"],
                          "description": "NIC roles whose netdevs carry RoCE traffic and get the profile."},
        },
    },
}

ROLE_DEFAULT_VFS = {"compute": 8, "storage": 0, "dpu": 0}


def _where(hosts):
    """``a, b and 3 more`` for an error message."""
    hosts = sorted(hosts)
    shown = ", ".join(hosts[:3])
    return shown + (f" and {len(hosts) - 3} more" if len(hosts) > 3 else "")


def _check_value(path, spec, value, errors):
    """Check one value against its spec; returns it normalized (ints as int) or None after an error."""
    kind = spec["type"]
    if value is None:
        return None
    if kind == "bool":
        if isinstance(value, bool):
            return value
        errors.append(f"{path}: {value!r} is not a boolean (true or false)")
        return None
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                value = int(value)
            else:
                errors.append(f"{path}: {value!r} is not a whole number")
                return None
        if "choices" in spec and value not in spec["choices"]:
            errors.append(f"{path}: {value} is not one of {', '.join(str(c) for c in spec['choices'])}")
            return None
        if value < spec.get("min", value) or value > spec.get("max", value):
            errors.append(f"{path}: {value} is outside {spec['min']}..{spec['max']}")
            return None
        return value
    if kind == "str":
        if not isinstance(value, str) or value not in spec.get("choices", (value,)):
            errors.append(f"{path}: {value!r} is not one of {', '.join(spec['choices'])}")
            return None
        return value
    if kind == "priorities":
        if not isinstance(value, list):
            errors.append(f"{path}: {value!r} is not a list of priorities 0..7")
            return None
        bad = [p for p in value if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 7]
        if bad:
            errors.append(f"{path}: {', '.join(repr(p) for p in bad)} is not a priority 0..7")
            return None
        if len(set(value)) != len(value):
            errors.append(f"{path}: {value} names a priority twice")
            return None
        return sorted(value)
    if kind == "roles_list":
        if not isinstance(value, list) or not value or any(r not in MANAGED_ROLES for r in value):
            errors.append(f"{path}: {value!r} is not a non-empty list of NIC roles ({', '.join(MANAGED_ROLES)})")
            return None
        return sorted(set(value), key=MANAGED_ROLES.index)
    if kind == "nv_config":
        if not isinstance(value, dict):
            errors.append(f"{path}: {value!r} is not a mapping of NV config parameters")
            return None
        out = {}
        for param, setting in value.items():
            base = re.sub(r"_P[0-9]+$", "", str(param))
            if not isinstance(param, str) or not NV_PARAM.match(base):
                errors.append(f"{path}: {param!r} is not an NV config parameter name (upper case, e.g. NUM_OF_VFS)")
            elif setting is not None and not isinstance(setting, (bool, int, str)):
                errors.append(f"{path}.{param}: {setting!r} is not a boolean, number or string")
            else:
                out[param] = setting
        return out
    raise AssertionError(kind)


def _check_keys(path, keys, value, errors):
    """Check a mapping against ``keys`` (name -> spec); returns {name: normalized value or default}."""
    if not isinstance(value, dict):
        errors.append(f"{path}: {value!r} is not a mapping")
        return {name: spec.get("default") for name, spec in keys.items()}
    unknown = sorted(str(k) for k in value if k not in keys)
    if unknown:
        errors.append(f"{path}: unknown key {', '.join(unknown)} (known: {', '.join(keys)})")
    out = {}
    for name, spec in keys.items():
        sub = f"{path}.{name}"
        if spec.get("required") and value.get(name) is None:
            errors.append(f"{sub} is not set ({' or '.join(spec['choices'])}; there is no default)")
            out[name] = None
            continue
        if spec["type"] == "roles":
            roles = value.get(name)
            if roles is None:
                roles = {}
            if not isinstance(roles, dict):
                errors.append(f"{sub}: {roles!r} is not a mapping of NIC roles")
                roles = {}
            for role in sorted(str(r) for r in roles if r not in MANAGED_ROLES):
                why = " (never configured)" if role in ("management", "ignored") else ""
                errors.append(f"{sub}: {role} is not a NIC role that can be configured{why}; "
                              f"known: {', '.join(MANAGED_ROLES)}")
            out[name] = {role: _check_keys(f"{sub}.{role}", spec["keys"], roles.get(role) or {}, errors)
                         for role in MANAGED_ROLES}
        elif spec["type"] == "dict":
            out[name] = _check_keys(sub, spec["keys"], value.get(name) or {}, errors)
        else:
            checked = _check_value(sub, spec, value.get(name), errors)
            out[name] = spec.get("default") if checked is None else checked
    return out


def _mask(priorities):
    return sum(1 << p for p in set(priorities))


def resolve_fabric(name, settings):
    """One fabric's declaration -> its resolved intent. Raises IntentError with messages that start with
    ``gpunode_fabric_settings``; ``resolve_fleet`` puts the hosts and the fabric in front."""
    errors = []
    if not isinstance(settings, dict):
        raise IntentError([f"{SETTINGS_VAR} is not set (a mapping with at least transport: infiniband or roce)"
                           if settings is None else f"{SETTINGS_VAR}: {settings!r} is not a mapping"])
    declared_qos = settings.get("qos")
    checked = _check_keys(SETTINGS_VAR, SCHEMA, settings, errors)
    transport = checked["transport"]
    roles = checked["nics"]
    qos = checked["qos"]
    if transport == "infiniband":
        if declared_qos:
            errors.append(f"{SETTINGS_VAR}.qos: fabric {name} is InfiniBand: PFC, ECN and DSCP trust are RoCE "
                          "settings (remove qos, or declare transport: roce)")
        for role, values in roles.items():
            if values["adaptive_routing"]:
                errors.append(f"{SETTINGS_VAR}.nics.{role}.adaptive_routing: fabric {name} is InfiniBand, where "
                              "adaptive routing is the subnet manager's job, not ROCE_ACCL (set it false or "
                              "remove it)")
    if transport == "roce" and qos["lossless"]:
        ecn = sorted(set(qos["ecn_np_priorities"]) | set(qos["ecn_rp_priorities"]))
        without_pfc = [p for p in ecn if p not in qos["pfc_priorities"]]
        if without_pfc:
            errors.append(f"{SETTINGS_VAR}.qos: ECN (ecn_np_priorities/ecn_rp_priorities) is on priorities "
                          f"{without_pfc}, which have no PFC (pfc_priorities {qos['pfc_priorities']}) in a lossless "
                          "profile")
        tos_prio = qos["roce_tos"] // 4 // 8
        if qos["trust"] == "dscp" and tos_prio not in qos["pfc_priorities"]:
            errors.append(f"{SETTINGS_VAR}.qos.roce_tos: {qos['roce_tos']} is DSCP {qos['roce_tos'] // 4}, which "
                          f"trust dscp puts on priority {tos_prio}, but PFC (pfc_priorities) is on "
                          f"{qos['pfc_priorities']}: RoCE traffic would not be lossless")
    if transport == "roce" and qos["cnp_dscp"] == qos["roce_tos"] // 4:
        errors.append(f"{SETTINGS_VAR}.qos.cnp_dscp: {qos['cnp_dscp']} equals the data DSCP of roce_tos "
                      f"{qos['roce_tos']}: CNPs need their own DSCP to reach the sender ahead of the data")
    if errors:
        raise IntentError(errors)

    resolved_roles = {}
    for role in MANAGED_ROLES:
        values = roles[role]
        num_vfs = ROLE_DEFAULT_VFS[role] if values["num_vfs"] is None else values["num_vfs"]
        accl = values["adaptive_routing"]
        if transport == "roce" and role == "compute" and accl is None:
            accl = False
        if transport != "roce":
            accl = None
        nv = {}
        if role == "compute":
            nv = {"SRIOV_EN": True, "NUM_OF_VFS": num_vfs,
                  "LINK_TYPE": "IB" if transport == "infiniband" else "ETH",
                  # GPUDirect RDMA peer-to-peer traffic must not go through ATS.
                  "ATS_ENABLED": False}
            if transport == "roce":
                nv.update(ROCE_CC_PRIO_MASK=_mask(qos["ecn_rp_priorities"]), CNP_DSCP=qos["cnp_dscp"],
                          CNP_802P_PRIO=qos["cnp_priority"])
        nv.update(values["nv_config"])
        nv = {k: v for k, v in nv.items() if v is not None}
        resolved_roles[role] = {"nv_config": nv, "adaptive_routing": accl, "num_vfs": num_vfs,
                                "vf_trust": values["vf_trust"], "vf_spoofchk": values["vf_spoofchk"]}
    resolved_qos = None
    if transport == "roce":
        resolved_qos = dict(qos)
    compute = resolved_roles["compute"]
    link_layer = "InfiniBand" if transport == "infiniband" else "Ethernet"
    expect = {"link_layer": link_layer, "link_speed_gbps": checked["link_speed_gbps"],
              "nv_config": compute["nv_config"], "num_vfs": compute["num_vfs"],
              "roce_accl": {} if compute["adaptive_routing"] is None
              else {"adaptive_routing_forced_en": int(compute["adaptive_routing"])},
              "qos": {} if resolved_qos is None else {
                  "trust": qos["trust"], "pfc_priorities": qos["pfc_priorities"],
                  "ecn_np": qos["ecn_np_priorities"], "ecn_rp": qos["ecn_rp_priorities"],
                  "cnp_dscp": qos["cnp_dscp"], "roce_tos": qos["roce_tos"], "mtu": qos["mtu"]}}
    # node_health takes the rail-drift part of it (its expect has no link layer or NV config).
    health = {k: expect[k] for k in ("link_speed_gbps", "num_vfs", "roce_accl", "qos")}
    return {"fabric": name, "transport": transport, "link_layer": link_layer,
            "link_speed_gbps": checked["link_speed_gbps"], "nics": resolved_roles, "qos": resolved_qos,
            "expect": expect, "health_expect": health}


def nv_config_devices(fabric, nics, overrides=None, skipped=()):
    """The NV config the ``mlxconfig`` module is asked for: ``[{"device", "settings"}]``, one entry for every NIC
    (``gpunode_hw.nics``) whose role declares an NV config, with the host's per-device ``overrides`` (PCI address
    -> {PARAM: value}, a null value drops a parameter) merged over it; NICs in ``skipped`` are left out."""
    out = []
    for nic in nics:
        role = (fabric["nics"].get(nic.get("role")) or {}).get("nv_config")
        if not role or nic["pci_address"] in skipped:
            continue
        wish = {**role, **((overrides or {}).get(nic["pci_address"]) or {})}
        wish = {k: v for k, v in wish.items() if v is not None}
        if wish:
            out.append({"device": nic["pci_address"], "settings": wish})
    return out


def roce_accl_devices(fabric, nics, skipped=()):
    """The ROCE_ACCL write the ``roce_accl`` module is asked for: ``[{"device", "fields":
    {"adaptive_routing_forced_en": 0|1}}]`` for every NIC whose role's adaptive routing is managed."""
    out = []
    for nic in nics:
        accl = (fabric["nics"].get(nic.get("role")) or {}).get("adaptive_routing")
        if accl is not None and nic["pci_address"] not in skipped:
            out.append({"device": nic["pci_address"], "fields": {"adaptive_routing_forced_en": int(accl)}})
    return out


def vf_pfs(fabric, nics):
    """Every PF with SR-IOV whose role is configured, with its declared VF count: ``[{"pci_address", "num_vfs",
    "netdev", "rdma_device", "role", "rail", "total"}]`` (``sriov_vfs`` takes address and count)."""
    out = []
    for nic in nics:
        role = fabric["nics"].get(nic.get("role"))
        if role is None or nic.get("sriov_totalvfs") is None:
            continue
        out.append({"pci_address": nic["pci_address"], "num_vfs": role["num_vfs"], "netdev": nic.get("netdev"),
                    "rdma_device": nic.get("rdma_device"), "role": nic["role"], "rail": nic.get("rail"),
                    "total": nic["sriov_totalvfs"]})
    return out


def qos_interfaces(fabric, nics):
    """The QoS the ``roce_qos`` module is asked for, one entry per RoCE netdev (a NIC of the profile's roles, with a
    netdev, on an Ethernet link): ``[{"netdev", "rdma_device", "trust", "pfc" (8 x 0/1), "ecn_np", "ecn_rp",
    "cnp_dscp", "roce_tos", "mtu"}]``; none on InfiniBand."""
    qos = fabric["qos"]
    if not qos:
        return []
    pfc = [int(p in qos["pfc_priorities"]) for p in range(8)]
    return [{"netdev": nic["netdev"], "rdma_device": nic.get("rdma_device"), "trust": qos["trust"], "pfc": pfc,
             "ecn_np": sorted(qos["ecn_np_priorities"]), "ecn_rp": sorted(qos["ecn_rp_priorities"]),
             "cnp_dscp": qos["cnp_dscp"], "roce_tos": qos["roce_tos"], "mtu": qos["mtu"]}
            for nic in nics
            if nic.get("role") in qos["nic_roles"] and nic.get("netdev") and nic.get("link_layer") == "Ethernet"]


def declared_contract(fabric, normalize):
    """The fleet contract's settings (module_utils.contract) as one fabric's resolved intent declares them for the
    compute rails: ``{setting: value}`` in the contract entries' spelling. ``normalize(param, value)`` is
    mlxconfig.normalize_value (the number mlxconfig prints a name as)."""
    compute = fabric["nics"]["compute"]
    out = {f"nv_config.{param}": normalize(param, value) for param, value in compute["nv_config"].items()}
    out["sriov_num_vfs"] = compute["num_vfs"]
    if compute["adaptive_routing"] is not None:
        out["roce_accl.adaptive_routing_forced_en"] = int(compute["adaptive_routing"])
    qos = fabric["qos"]
    if qos is not None:
        out.update({"qos_trust": qos["trust"], "qos_pfc": [int(p in qos["pfc_priorities"]) for p in range(8)],
                    "qos_ecn_np": qos["ecn_np_priorities"], "qos_ecn_rp": qos["ecn_rp_priorities"],
                    "qos_cnp_dscp": qos["cnp_dscp"], "qos_roce_tos": qos["roce_tos"], "mtu": qos["mtu"]})
    return out


def resolve_fleet(hosts):
    """Resolve every host's intent in one pass.

    ``hosts``: ``{host: {"gpunode_fabric": name, "gpunode_fabric_settings": {...}, "moved": [names of
    variables from MOVED the host sets], "unknown": [gpunode_fabric_* names it sets that are not ours]}}``.
    Returns ``{"fabrics": {name: resolved}, "hosts": {host: name}}``; raises IntentError naming, per
    problem, the hosts, the fabric and the variable. Each fabric's declaration is checked once; every
    other host of the fabric is compared with it (a fabric has one declaration).
    """
    errors = []
    by_fabric = {}  # name -> (settings, [hosts])
    differs = {}  # name -> [hosts whose settings differ from the first]
    membership = {}
    nowhere = []
    for host, variables in hosts.items():
        for name in variables.get("moved") or ():
            errors.append(f"{host}: {name} no longer declares a fabric's intent: set {SETTINGS_VAR}."
                          f"{MOVED[name]} in the fabric's group_vars instead")
        for name in variables.get("unknown") or ():
            errors.append(f"{host}: {name} is not a variable of the collection (known: {FABRIC_VAR}, "
                          f"{SETTINGS_VAR})")
        fabric = variables.get(FABRIC_VAR)
        if fabric is None or fabric == "":
            nowhere.append(host)
            continue
        if not isinstance(fabric, str) or not FABRIC_NAME.match(fabric):
            errors.append(f"{host}: {FABRIC_VAR}: {fabric!r} is not a fabric name (letters, digits, '.', '_', '-')")
            continue
        membership[host] = fabric
        settings = variables.get(SETTINGS_VAR)
        seen = by_fabric.get(fabric)
        if seen is None:
            by_fabric[fabric] = (settings, [host])
        elif settings == seen[0]:
            seen[1].append(host)
        else:
            differs.setdefault(fabric, []).append(host)
    if nowhere:
        errors.append(f"{_where(nowhere)}: GPU node in no fabric: {FABRIC_VAR} is not set (put the host in a "
                      f"fabric's inventory group, whose group_vars set {FABRIC_VAR} and {SETTINGS_VAR})")
    fabrics = {}
    for name, (settings, members) in sorted(by_fabric.items()):
        if name in differs:
            errors.append(f"fabric {name}: {SETTINGS_VAR} of {_where(differs[name])} differs from that of "
                          f"{_where(members)}: a fabric has one declaration (its group_vars); per-host exceptions "
                          "go by PCI address (nic_firmware_device_overrides)")
            continue
        try:
            fabrics[name] = resolve_fabric(name, settings)
        except IntentError as exc:
            errors.extend(f"{_where(members)}: fabric {name}: {problem}" for problem in exc.errors)
    if errors:
        raise IntentError(errors)
    return {"fabrics": fabrics, "hosts": membership}


def _doc_rows(prefix, keys, rows):
    for name, spec in keys.items():
        path = f"{prefix}.{name}"
        if spec["type"] == "roles":
            _doc_rows(f"{path}.<role>", spec["keys"], rows)
            continue
        if spec["type"] == "dict":
            rows.append((path, "mapping", "", spec["description"]))
            _doc_rows(path, spec["keys"], rows)
            continue
        default = "required" if spec.get("required") else json.dumps(spec.get("default"))
        if "choices" in spec:
            kind = " \\| ".join(str(c) for c in spec["choices"])
        elif "min" in spec:
            kind = f"int {spec['min']}..{spec['max']}"
        else:
            kind = {"priorities": "list of 0..7", "roles_list": "list of NIC roles", "nv_config": "mapping"}.get(
                spec["type"], spec["type"])
        rows.append((path, kind, default, spec["description"]))


def variables_markdown():
    """The table of every key of gpunode_fabric_settings, for docs/variables.md."""
    rows = []
    _doc_rows(SETTINGS_VAR, SCHEMA, rows)
    lines = ["| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
    for path, kind, default, text in rows:
        shown = default if default in ("required", "") else "`" + default + "`"
        text = re.sub(r"[CV]\(([^)]*)\)", r"`\1`", text)
        lines.append(f"| `{path}` | {kind} | {shown} | {text} |")
    return "\n".join(lines) + "\n"
