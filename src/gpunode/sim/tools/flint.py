"""Simulated ``flint -d <dev> q`` (MFT / mstflint): the firmware image of a NIC card.

Layout of ``flint q`` as MFT prints it (field names and column 23; no sample in real-outputs:
inferred from the public MFT documentation). FW version and PSID come from hw.json (the profile's
``fw_version``/``board_id``). A function with the ``mlxconfig_reject`` fault refuses flint too.
"""

from __future__ import annotations

import sys

from .state import HostState

IMAGE_TYPE = {"cx7": "FS4", "bf3": "FS4", "cx6dx": "FS4", "cx6lx": "FS4"}  # inferred


def run(argv: list[str], tool: str = "flint") -> int:
    dev = None
    rest = []
    i = 0
    while i < len(argv):
        if argv[i] in ("-d", "--device") and i + 1 < len(argv):
            dev = argv[i + 1]
            i += 2
            continue
        rest.append(argv[i])
        i += 1
    if not dev or rest not in (["q"], ["query"]):
        sys.stdout.write("-E- Usage: flint -d <device> q\n")
        return 1
    state = HostState()
    rec = state.resolve_nic(dev)
    if rec is None:
        sys.stdout.write(f"-E- Cannot open Device: {dev}. No such file or directory. MFE_CR_ERROR\n")
        return 1
    if state.has_fault("mlxconfig_reject", rec["address"]):
        sys.stdout.write(f"-E- Cannot open Device: {dev}. Operation not permitted (device locked)\n")
        return 1
    card = state.card_state(rec["slot"])
    base = rec["node_guid"].replace(":", "")
    mac = rec["mac"].replace(":", "")
    fields = [("Image type:", IMAGE_TYPE.get(card["model"], "FS4")), ("FW Version:", card["fw_version"]),
              ("Product Version:", card["fw_version"]),
              ("Rom Info:", "type=UEFI version=14.32.17 cpu=AMD64,AARCH64"),
              ("", "type=PXE version=3.7.300 cpu=AMD64"),
              ("Description:", "UID                GuidsNumber"),
              ("Base GUID:", f"{base}        {4 * card['ports']}"),
              ("Base MAC:", f"{mac}            {4 * card['ports']}"),
              ("Image VSD:", "N/A"), ("Device VSD:", "N/A"), ("PSID:", card["psid"]),
              ("Security Attributes:", "secure-fw")]
    sys.stdout.write("".join(f"{k:<23}{v}\n" for k, v in fields))
    return 0
