# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read-backs that the read-only node modules (``node_validation``, ``node_health``) share.

Each function takes the running AnsibleModule (for ``get_bin_path`` and ``run_command``, argv
lists, ``LC_ALL=C``) and returns plain values, or ``{"error": "<one sentence>"}`` when the tool is
missing, fails or prints something the parser does not accept. Nothing here writes.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.mlplatform.gpunode.plugins.module_utils import mlxreg, rdma_tools
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError

# The attribute of the AnsibleModule under which prefetch() keeps its answers, by argv.
_PREFETCHED = "_gpunode_prefetched"


# The attribute of the AnsibleModule under which set_timeout() keeps the seconds each read may take.
_TIMEOUT = "_gpunode_read_timeout"
READ_TIMEOUT = 60
# timeout(1)'s exit status when it ended the command (124), or killed it after the grace period (128 + 9).
TIMED_OUT = (124, 137)


def set_timeout(module, seconds):
    """Every tool run() and prefetch() start for ``module`` from now on is ended after ``seconds``."""
    setattr(module, _TIMEOUT, int(seconds))


def apply_timeout_option(module, name):
    """The module's ``timeout`` option (seconds, 1 to 3600) checked, failing the module ``name`` otherwise, then set
    for every tool run() and prefetch() of ``module`` (set_timeout)."""
    seconds = module.params["timeout"]
    if not 1 <= seconds <= 3600:
        module.fail_json(msg=f"{name}: timeout {seconds} must be 1 to 3600 seconds")
    set_timeout(module, seconds)


def timeout_of(module):
    return getattr(module, _TIMEOUT, None)


def timed_argv(module, argv):
    """``argv`` under timeout(1) (``timeout -k 5 <seconds> argv...``, an argv list: no shell) once set_timeout()
    was called for ``module``, so that a tool that hangs (an ``nvidia-smi`` stuck in the driver) ends with exit
    status 124 instead of blocking the read."""
    binary = module.get_bin_path("timeout") if timeout_of(module) else None
    if not binary:
        return list(argv)
    return [binary, "-k", "5", str(timeout_of(module)), *argv]


def timed_out(module, argv, answer):
    """``(rc, stdout, stderr)`` with stderr saying the tool timed out when timeout(1) ended it."""
    rc, out, err = answer
    if rc in TIMED_OUT and timeout_of(module) and module.get_bin_path("timeout"):
        name = os.path.basename(str(argv[0])) if argv else "the command"
        err = f"{name} timed out after {timeout_of(module)} s (no answer; ended by timeout(1))"
    return rc, out, err


def is_timeout(rc, err):
    """Whether an answer is that of a command ended for taking too long (by timeout(1) through run(), or by a
    caller's own runner that says so)."""
    return rc in TIMED_OUT and any(text in (err or "") for text in ("timed out after", "did not answer within"))


def run(module, argv):
    """``(rc, stdout, stderr)`` of ``argv`` under the C locale and timeout(1) (set_timeout): the answer prefetch()
    already has for this exact argv (taken once), else the command run now. A command timeout(1) ended answers
    exit status 124 (or 137) and a stderr saying so."""
    answer = getattr(module, _PREFETCHED, {}).pop(tuple(argv), None)
    if answer is None:
        answer = module.run_command(timed_argv(module, argv), environ_update={"LC_ALL": "C"})
    return timed_out(module, argv, answer)


# A PCI address as the vendor tools take it (``-d 0000:18:00.1``): its card is all but the function.
_PCI_FUNCTION = re.compile(r"^([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\.[0-7]$")


def card_of(argv):
    """The card a command touches: the PCI address after ``-d`` without its function (both ports of a dual-port
    card share the card's firmware semaphore), else the command itself (``mlnx_qos -i <netdev>``)."""
    argv = list(argv)
    if "-d" in argv[:-1]:
        match = _PCI_FUNCTION.match(argv[argv.index("-d") + 1])
        if match:
            return match.group(1).lower()
    return tuple(argv)


def _quietly(module, argv):
    """``run_command`` without its own error handling (which would call ``fail_json`` from a thread); None when
    the command cannot be started, so that the caller's own run() of it later reports the error as before.

    None too for an answer of exit status 0 with no output at all: every read prefetched prints something when it
    succeeds, and ansible-core's run_command can lose a child's output. It stops reading the pipes when a select()
    times out (1 s) and the child has exited by the poll() after it, and a child that writes and exits between
    the two is never read (ansible/ansible#51393). Threads that share the module's interpreter lock make that
    window wide; on the simulated fleet at 8 hosts it emptied one ``mlnx_qos -i`` answer of a host read. Such a
    command runs again in run(), alone."""
    try:
        answer = module.run_command(timed_argv(module, argv), environ_update={"LC_ALL": "C"},
                                    handle_exceptions=False)
    except Exception:  # noqa: BLE001 - any start failure: run() runs the command again and handles it
        return None
    rc, out, err = answer
    return None if rc == 0 and not out and not err else answer


def prefetch(module, argvs, workers=8):
    """Run the read-only commands ``argvs`` side by side, and keep each answer for the run() of the same argv
    that follows.

    The per-device vendor reads (``mlxconfig -e q``, ``mlxreg --get``, ``mlnx_qos -i``,
    ``cma_roce_tos``) take from a fraction of a second to seconds each on real ConnectX hardware, so a
    host's 8-12 devices are read side by side instead of one after the other. At most ``workers`` cards
    are read at once, and the commands of one card (card_of: the functions of a dual-port card, mlxconfig
    and mlxreg on one function) one after the other, since the card's firmware serializes them. The
    callers keep their order and their handling of each answer (errors, parsing): only the waiting
    overlaps. ``workers`` 1 (or a single card) runs nothing ahead. Commands are argv lists run through
    ``module.run_command`` (no shell), which copies the environment per call; a command that cannot be
    started is not kept, and its run() starts it again and fails as it would have.
    """
    unique = list(dict.fromkeys(tuple(argv) for argv in argvs if argv))
    cards = {}
    for argv in unique:
        cards.setdefault(card_of(argv), []).append(argv)
    if workers <= 1 or len(cards) <= 1:
        return
    with ThreadPoolExecutor(max_workers=min(workers, len(cards))) as pool:
        answered = pool.map(lambda group: [(argv, _quietly(module, argv)) for argv in group], cards.values())
        answers = {argv: answer for group in answered for argv, answer in group if answer is not None}
    cache = getattr(module, _PREFETCHED, None)
    if cache is None:
        cache = {}
        setattr(module, _PREFETCHED, cache)
    cache.update(answers)


def read_text(path):
    """A sysfs/procfs file's text without surrounding blanks, or None when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def read_qos(module, root, netdev, rdma_device):
    """RoCE QoS of one netdev: trust and PFC from ``mlnx_qos -i`` (rdma_tools.parse_mlnx_qos), ECN
    enables, CNP DSCP and MTU from sysfs, the RoCE traffic class from the RDMA device's
    ``tc/1/traffic_class``. Returns ``{"trust", "pfc", "pfc_priorities", "ecn_np", "ecn_rp",
    "cnp_dscp", "mtu", "roce_tos"}`` or ``{"error"}``."""
    binary = module.get_bin_path("mlnx_qos")
    if not binary:
        return {"error": "mlnx_qos not installed"}
    rc, out, err = run(module, rdma_tools.mlnx_qos_read_argv(binary, netdev))
    if rc != 0:
        return {"error": f"mlnx_qos -i {netdev}: exit status {rc}: {(err or out).strip()}"}
    try:
        parsed = rdma_tools.parse_mlnx_qos(out)
    except ParseError as exc:
        return {"error": str(exc)}
    qos = {"trust": parsed["trust"], "pfc": (parsed["pfc"] or {}).get("enabled"),
           "pfc_priorities": parsed["pfc_priorities"]}
    base = os.path.join(root, "class", "net", netdev)
    for side, key in (("roce_np", "ecn_np"), ("roce_rp", "ecn_rp")):
        qos[key] = [p for p in range(8) if read_text(os.path.join(base, "ecn", side, "enable", str(p))) == "1"]
    cnp = read_text(os.path.join(base, "ecn", "roce_np", "cnp_dscp"))
    qos["cnp_dscp"] = int(cnp) if cnp and cnp.isdigit() else None
    mtu = read_text(os.path.join(base, "mtu"))
    qos["mtu"] = int(mtu) if mtu and mtu.isdigit() else None
    tclass = read_text(os.path.join(root, "class", "infiniband", rdma_device or "-", "tc", "1", "traffic_class"))
    try:
        qos["roce_tos"] = rdma_tools.read_traffic_class(tclass)
    except ParseError:
        qos["roce_tos"] = None
    return qos


def read_roce_accl(module, pci_address):
    """The ROCE_ACCL register of one PCI function (``mlxreg -d <pci> --reg_name ROCE_ACCL --get``):
    ``{"fields": {name: int}}`` or ``{"error"}``."""
    binary = module.get_bin_path("mlxreg")
    if not binary:
        return {"error": "mlxreg not installed"}
    rc, out, err = run(module, mlxreg.get_argv(binary, pci_address))
    try:
        parsed = mlxreg.parse_get(out)
    except ParseError as exc:
        parsed = {"fields": {}, "errors": [f"exit status {rc}: {(err or str(exc)).strip()}"]}
    return {"error": "; ".join(parsed["errors"])} if parsed["errors"] else {"fields": parsed["fields"]}
