# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""RoCE QoS per netdev: validate the wish, read the state, diff it and build the actions (pure functions).

Where each setting lives (docs/hardware-facts.md "Lossless RoCEv2"; formats in the public output from
https://github.com/att/netarbiter and ``roce-qos-sysfs-ecn-cnp-spiderpool.txt``):

- trust and PFC: ``mlnx_qos -i <if>`` (read), ``mlnx_qos -i <if> --trust dscp`` and
  ``mlnx_qos -i <if> --pfc 0,0,0,1,0,0,0,0`` (set);
- ECN per priority: ``/sys/class/net/<if>/ecn/roce_np/enable/<p>`` and ``.../roce_rp/enable/<p>`` (0/1);
- CNP DSCP: ``/sys/class/net/<if>/ecn/roce_np/cnp_dscp``;
- RoCE ToS: ``/sys/class/infiniband/<dev>/tc/1/traffic_class`` (reads ``Global tclass=106``) and
  ``cma_roce_tos -d <dev> -t 106`` (RDMA-CM default ToS; prints the value);
- MTU: ``/sys/class/net/<if>/mtu``, written directly: the kernel's store for that attribute is
  ``dev_set_mtu``, the call ``ip link set dev <if> mtu <n>`` makes, and it works on a simulated tree.

None of it survives a reboot.
"""

from __future__ import annotations

import os

from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError
from ansible_collections.mlplatform.gpunode.plugins.module_utils.rdma_tools import (
    cma_roce_tos_read_argv,
    mlnx_qos_read_argv,
    parse_cma_roce_tos,
    parse_mlnx_qos,
    read_traffic_class,
)

FIELDS = ("trust", "pfc", "ecn_np", "ecn_rp", "cnp_dscp", "roce_tos", "mtu")
TRUST_MODES = ("pcp", "dscp")
ECN_POINTS = {"ecn_np": "roce_np", "ecn_rp": "roce_rp"}
# Netdev MTU range a ConnectX accepts (68 is the IPv4 minimum; 9978 the mlx5 maximum, inferred
# from the mlx5 driver's max_mtu for ConnectX-6/7 Ethernet).
MTU_RANGE = (68, 9978)
FIRMWARE_DCBX = "firmware"


class QosError(Exception):
    """State that cannot be read or written; the message names the netdev."""


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _as_int(value):
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


def validate(interfaces):
    """Check every entry before reading anything -> ``(normalized list, errors)``.

    Each error names the entry (``interfaces[2]``), its netdev and the field. Normalized entries
    hold only the fields given (others are left alone); priority lists come back sorted.
    """
    normalized = []
    errors = []
    seen = set()
    for index, item in enumerate(interfaces or []):
        if not isinstance(item, dict):
            errors.append(f"interfaces[{index}]: expected a dict, got {item!r}")
            continue
        netdev = item.get("netdev")
        where = f"interfaces[{index}] (netdev {netdev})"
        if not isinstance(netdev, str) or not netdev or "/" in netdev or netdev in (".", ".."):
            errors.append(f"interfaces[{index}].netdev: expected an interface name, got {netdev!r}")
            continue
        if netdev in seen:
            errors.append(f"{where}: listed twice")
            continue
        seen.add(netdev)
        entry = {"netdev": netdev, "rdma_device": item.get("rdma_device")}
        for field in FIELDS:
            value = item.get(field)
            if value is None:
                continue
            problem = _field_problem(field, value)
            if problem:
                errors.append(f"{where}.{field}: {problem}")
                continue
            if field == "pfc":
                value = [int(v) for v in value]
            elif field in ECN_POINTS:
                value = sorted({int(v) for v in value})
            elif field != "trust":
                value = int(_as_int(value))
            entry[field] = value
        if "roce_tos" in entry and not (isinstance(entry["rdma_device"], str) and entry["rdma_device"]):
            errors.append(f"{where}.rdma_device: required with roce_tos (the RDMA device of the netdev, e.g. mlx5_0)")
        normalized.append(entry)
    return normalized, errors


def field_problem(field, value):
    """What is wrong with one value of ``field`` (one of FIELDS), or None."""
    return _field_problem(field, value)


def _field_problem(field, value):
    """What is wrong with one value, or None."""
    if field == "trust":
        return None if value in TRUST_MODES else f"expected one of {', '.join(TRUST_MODES)}, got {value!r}"
    if field == "pfc":
        if not isinstance(value, (list, tuple)) or len(value) != 8:
            count = f"{len(value)} entries" if isinstance(value, (list, tuple)) else repr(value)
            return f"expected a list of 8 entries (one per priority 0..7, each 0 or 1), got {count}"
        bad = [v for v in value if _as_int(v) not in (0, 1) or isinstance(v, bool)]
        return f"every entry must be 0 or 1, got {bad[0]!r}" if bad else None
    if field in ECN_POINTS:
        if not isinstance(value, (list, tuple)):
            return f"expected a list of priorities 0..7, got {value!r}"
        bad = [v for v in value if not _is_int(_as_int(v)) or not 0 <= _as_int(v) <= 7]
        return f"priority {bad[0]!r} is not in 0..7" if bad else None
    limits = {"cnp_dscp": (0, 63, "a DSCP"), "roce_tos": (0, 255, "a ToS byte"), "mtu": (*MTU_RANGE, "an MTU")}
    low, high, what = limits[field]
    value = _as_int(value)
    if not _is_int(value) or not low <= value <= high:
        return f"expected {what} {low}..{high}, got {value!r}"
    return None


# -------------------------------------------------------------------------------------------------
# state
# -------------------------------------------------------------------------------------------------


def paths(sysfs_root, netdev, rdma_device):
    """The sysfs files of one netdev (and its RDMA device)."""
    net = os.path.join(sysfs_root, "class", "net", netdev)
    result = {"netdev_dir": net, "mtu": os.path.join(net, "mtu"),
              "cnp_dscp": os.path.join(net, "ecn", "roce_np", "cnp_dscp")}
    for field, point in ECN_POINTS.items():
        result[field] = [os.path.join(net, "ecn", point, "enable", str(p)) for p in range(8)]
    if rdma_device:
        result["traffic_class"] = os.path.join(sysfs_root, "class", "infiniband", rdma_device, "tc", "1",
                                               "traffic_class")
    return result


def read_text(path):
    """A sysfs attribute's text, or None when the file is absent."""
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def read_state(run, sysfs_root, netdev, rdma_device):
    """One netdev's QoS state -> ``(state, files)``.

    ``run(argv)`` runs a tool and returns its stdout (it fails the caller on a non-zero exit);
    ParseError propagates. Shared by the ``roce_qos`` and ``host_state`` modules.
    """
    files = paths(sysfs_root, netdev, rdma_device)
    qos = parse_mlnx_qos(run(mlnx_qos_read_argv("mlnx_qos", netdev)))
    ecn = {field: (None if read_text(files[field][0]) is None else [read_text(p) or "" for p in files[field]])
           for field in ECN_POINTS}
    cma = parse_cma_roce_tos(run(cma_roce_tos_read_argv("cma_roce_tos", rdma_device))) if rdma_device else None
    state = state_from(qos, ecn, read_text(files["cnp_dscp"]),
                       read_text(files["traffic_class"]) if rdma_device else None, cma, read_text(files["mtu"]))
    return state, files


def dcbx_kind(dcbx_mode):
    """``"OS controlled"`` -> ``"os"``, ``"Firmware controlled"`` -> ``"firmware"``, else the text lowered."""
    if not dcbx_mode:
        return None
    first = dcbx_mode.strip().split()[0].lower()
    return first if first in ("os", "firmware") else dcbx_mode.strip().lower()


def state_from(qos, ecn, cnp_dscp, traffic_class_text, cma_tos, mtu_text):
    """Pure: one netdev's current state from what was read.

    ``qos`` is ``rdma_tools.parse_mlnx_qos`` output; ``ecn`` is ``{"ecn_np": [8 x "0"/"1"], "ecn_rp": [...]}``
    (file contents, None when the ECN directory is absent); ``cnp_dscp``/``mtu_text`` file contents;
    ``traffic_class_text`` the content of ``tc/1/traffic_class`` (None when absent, empty when never set, a bare
    number on a simulated tree);
    ``cma_tos`` an int or None. Returns every field as read: ``trust``, ``pfc`` (8 x 0/1), ``ecn_np``/``ecn_rp``
    (priorities enabled), ``cnp_dscp``, ``roce_tos`` (traffic_class), ``cma_roce_tos``, ``mtu``, ``dcbx_mode``.
    """
    state = {"trust": qos.get("trust"), "pfc": (qos.get("pfc") or {}).get("enabled"),
             "dcbx_mode": qos.get("dcbx_mode")}
    for field in ECN_POINTS:
        flags = ecn.get(field)
        if flags is None:
            state[field] = None
            continue
        if any(f.strip() not in ("0", "1") for f in flags):
            raise ParseError("sysfs", f"0 or 1 in ecn enable files, got {flags!r}")
        state[field] = [p for p, f in enumerate(flags) if f.strip() == "1"]
    state["cnp_dscp"] = _sysfs_int(cnp_dscp, "cnp_dscp")
    # The kernel prints "Global tclass=106"; a simulated tree (a plain file) keeps the "106" written to it.
    state["roce_tos"] = read_traffic_class(traffic_class_text)
    state["cma_roce_tos"] = cma_tos
    state["mtu"] = _sysfs_int(mtu_text, "mtu")
    return state


def _sysfs_int(text, name):
    if text is None:
        return None
    text = text.strip()
    if not text.isdigit():
        raise ParseError("sysfs", f"a number in {name}, got {text!r}")
    return int(text)


# -------------------------------------------------------------------------------------------------
# diff and actions
# -------------------------------------------------------------------------------------------------


def diff(current, desired):
    """Pure: ``(changes {field: {"before", "after"}}, skipped {field: reason})`` for one netdev.

    ``roce_tos`` drives two settings, reported separately: ``roce_tos`` (``tc/1/traffic_class``) and
    ``cma_roce_tos``. With firmware-controlled DCBX the switch negotiates PFC, so ``pfc`` is skipped
    with the reason instead of being fought over.
    """
    changes = {}
    skipped = {}
    for field in FIELDS:
        if field not in desired:
            continue
        want = desired[field]
        if field == "pfc" and dcbx_kind(current.get("dcbx_mode")) == FIRMWARE_DCBX:
            if current.get("pfc") != want:
                skipped[field] = ("DCBX is firmware controlled: the switch negotiates PFC "
                                  f"(now {current.get('pfc')}); not overriding it")
            continue
        if field == "roce_tos":
            for key in ("roce_tos", "cma_roce_tos"):
                if current.get(key) != want:
                    changes[key] = {"before": current.get(key), "after": want}
            continue
        if current.get(field) != want:
            changes[field] = {"before": current.get(field), "after": want}
    return changes, skipped


def actions(netdev, rdma_device, changes, file_paths):
    """Pure: the steps that apply ``changes``, in order -> list of ``("run", argv)`` / ``("write", path, text)``.

    Trust comes before PFC (as in the real recipe), ECN enables are written only where they change.
    Writes go to files that must exist (sysfs attributes are never created).
    """
    steps = []
    if "trust" in changes:
        steps.append(("run", ["mlnx_qos", "-i", netdev, "--trust", changes["trust"]["after"]]))
    if "pfc" in changes:
        steps.append(("run", ["mlnx_qos", "-i", netdev, "--pfc", ",".join(str(v) for v in changes["pfc"]["after"])]))
    for field in ECN_POINTS:
        if field in changes:
            before = set(changes[field]["before"] or [])
            after = set(changes[field]["after"])
            for prio in range(8):
                if changes[field]["before"] is None or (prio in before) != (prio in after):
                    steps.append(("write", file_paths[field][prio], "1" if prio in after else "0"))
    if "cnp_dscp" in changes:
        steps.append(("write", file_paths["cnp_dscp"], str(changes["cnp_dscp"]["after"])))
    # cma_roce_tos before traffic_class: on hosts where tc/1 appears only once a ToS was set (the
    # simulator's cma_roce_tos creates it), the write then finds the file.
    if "cma_roce_tos" in changes:
        steps.append(("run", ["cma_roce_tos", "-d", rdma_device, "-t", str(changes["cma_roce_tos"]["after"])]))
    if "roce_tos" in changes:
        steps.append(("write", file_paths["traffic_class"], str(changes["roce_tos"]["after"])))
    if "mtu" in changes:
        steps.append(("write", file_paths["mtu"], str(changes["mtu"]["after"])))
    return steps


def contradictions(entry, lossless=True):
    """Pure: what in one validated entry contradicts itself -> list of errors (the role's preflight rules).

    - ECN on a priority whose PFC is off (``lossless``, ``pfc`` given): the marked traffic is dropped anyway;
    - PFC not on the priority the RoCE ToS's DSCP maps to (``lossless``, trust dscp, default dscp2prio map
      DSCP 8p..8p+7 -> priority p): RoCE traffic would not be lossless;
    - a CNP DSCP equal to the data DSCP (ToS >> 2): CNPs would queue behind the data they throttle.
    """
    errors = []
    where = f"netdev {entry['netdev']}"
    pfc = entry.get("pfc")
    tos = entry.get("roce_tos")
    if lossless and pfc is not None:
        ecn = sorted({p for field in ECN_POINTS for p in entry.get(field) or []})
        without = [p for p in ecn if not pfc[p]]
        if without:
            errors.append(f"{where}: ECN (ecn_np/ecn_rp) is enabled on priorities {without} that have no PFC "
                          f"(pfc {pfc}); lossless RoCE needs PFC on every ECN priority")
        if tos is not None and entry.get("trust") == "dscp":
            prio = (tos >> 2) >> 3
            if not pfc[prio]:
                errors.append(f"{where}: roce_tos {tos} is DSCP {tos >> 2}, which the default dscp2prio map puts on "
                              f"priority {prio}, but PFC is on {[p for p in range(8) if pfc[p]]}: RoCE traffic "
                              "would not be lossless")
    if tos is not None and entry.get("cnp_dscp") is not None and entry["cnp_dscp"] == tos >> 2:
        errors.append(f"{where}: cnp_dscp {entry['cnp_dscp']} equals the data DSCP of roce_tos {tos}; "
                      "CNPs need their own DSCP (48 by default) to reach the sender ahead of the data")
    return errors


def missing_files(netdev, steps):
    """The write targets of ``steps`` that are absent, with the real cause -> list of errors.

    ``tc/1/traffic_class`` is not checked when a ``cma_roce_tos`` step comes first (on some hosts the
    file appears only once a ToS is set).
    """
    errors = []
    cma_first = False
    for step in steps:
        if step[0] == "run":
            cma_first = cma_first or step[1][0] == "cma_roce_tos"
            continue
        path = step[1]
        if os.path.exists(path) or (cma_first and path.endswith(os.path.join("tc", "1", "traffic_class"))):
            continue
        errors.append(f"netdev {netdev}: {path} is absent ({absent_cause(path)})")
    return errors


def absent_cause(path):
    """Why a sysfs attribute a QoS write needs is absent (the real cause, for the error)."""
    if "traffic_class" in path:
        return "tc/1/traffic_class comes with the DOCA-OFED mlx5_ib driver"
    if f"{os.sep}ecn{os.sep}" in path:
        return "the ECN files come with mlx5_core on an Ethernet port"
    return f"the netdev has no {os.path.basename(path)} attribute; nothing can set it there"


def mismatches(after_state, changes):
    """Pure: ``[field: wanted X, reads Y]`` for every change the re-read does not show."""
    return [f"{field}: wanted {change['after']}, reads back {after_state.get(field)}"
            for field, change in changes.items() if after_state.get(field) != change["after"]]
