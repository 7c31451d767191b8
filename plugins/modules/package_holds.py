#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: package_holds
short_description: Put many installed Debian packages on hold in one call
version_added: 0.2.0
description:
  - Reads the selection state of every package in O(names) with one C(dpkg-query), sets the C(hold) selection of
    those that do not have it with one C(dpkg --set-selections), and reads them back. One host round trip for a
    role's whole package set, where C(ansible.builtin.dpkg_selections) takes one package a call.
  - Every name is checked before any selection is written. A name that is not an installed package fails the call
    naming it, and nothing is held (C(dpkg --set-selections) would only warn and ignore it). In check mode a
    package that is not installed yet is reported as one that would be held, since the install task before this
    one did not run.
  - Fails naming the package when a hold did not stick.
  - "Sources: dpkg(1) (C(--set-selections), the C(hold) selection state) U(https://manpages.debian.org/bookworm/dpkg/dpkg.1.en.html);
    dpkg-query(1) (C(-W -f), C(db:Status-Want)) U(https://manpages.debian.org/bookworm/dpkg/dpkg-query.1.en.html)."
author:
  - mlplatform.gpunode developers (@mlplatform)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  names:
    description: The packages to hold. Packages not listed are left as they are.
    type: list
    elements: str
    required: true
attributes:
  check_mode:
    support: full
    details: Reads the selections and reports what would be held; writes nothing.
  diff_mode:
    support: full
    details: Before and after selection of each package that changes.
  platform:
    support: full
    platforms: debian
notes:
  - Unholding is not supported; the roles only add holds.
"""

EXAMPLES = r"""
- name: Hold the driver packages
  mlplatform.gpunode.package_holds:
    names: [nvidia-driver-570-server-open, nvidia-dkms-570-server-open]
"""

RETURN = r"""
holds:
  description: Package -> C({before, after}) selection (C(install), C(hold), C(deinstall), C(purge); C(null) for a
    package dpkg does not know) of every package of O(names).
  returned: always
  type: dict
  sample: {"nvidia-driver-570-server-open": {"before": "install", "after": "hold"}}
held:
  description: The packages this call put on hold (or would in check mode), sorted.
  returned: always
  type: list
  elements: str
  sample: [nvidia-driver-570-server-open]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_state import DPKG_FORMAT, parse_dpkg_records
from ansible_collections.mlplatform.gpunode.plugins.module_utils.package_holds import plan_holds
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError


def _query(module, dpkg_query, names):
    # dpkg-query exits 1 when a name matches no package; the packages it knows are still printed.
    rc, out, err = module.run_command([dpkg_query, "-W", "-f", DPKG_FORMAT, "--", *names],
                                      environ_update={"LC_ALL": "C"})
    if rc not in (0, 1):
        module.fail_json(msg=f"package_holds: dpkg-query failed (rc {rc}): {err.strip()}", rc=rc, stderr=err)
    try:
        return parse_dpkg_records(out)
    except ParseError as exc:
        module.fail_json(msg=f"package_holds: cannot read the selections: {exc}", stdout=out)
    return {}


def main():
    module = AnsibleModule(argument_spec={"names": {"type": "list", "elements": "str", "required": True}},
                           supports_check_mode=True)
    name_the_host(module, "package_holds")
    names = [n.strip() for n in module.params["names"]]
    bad = [n for n in names if not n or any(c.isspace() for c in n)]
    if bad:
        module.fail_json(msg=f"package_holds: names holds an empty or blank-containing package name: {bad!r}")
    dpkg_query = module.get_bin_path("dpkg-query", required=True)
    dpkg = module.get_bin_path("dpkg", required=True)
    before = _query(module, dpkg_query, names) if names else {}
    to_hold, errors = plan_holds(names, before, module.check_mode)
    if errors:
        module.fail_json(msg="package_holds: " + "; ".join(errors) + ". Nothing was held.", errors=errors)
    want = {n: (before.get(n) or {}).get("want") for n in names}
    holds = {n: {"before": want[n], "after": "hold" if n in to_hold else want[n]} for n in names}
    diff = {"before": "".join(f"{n}\t{want[n]}\n" for n in to_hold if n in before),
            "after": "".join(f"{n}\thold\n" for n in to_hold)}
    result = {"holds": holds, "held": to_hold}
    if not to_hold or module.check_mode:
        module.exit_json(changed=bool(to_hold), diff=diff, **result)
    rc, out, err = module.run_command([dpkg, "--set-selections"], data="".join(f"{n} hold\n" for n in to_hold),
                                      environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg=f"package_holds: dpkg --set-selections failed (rc {rc}): {err.strip()}", rc=rc,
                         stderr=err, **result)
    after = _query(module, dpkg_query, to_hold)
    lost = [n for n in to_hold if (after.get(n) or {}).get("want") != "hold"]
    if lost:
        module.fail_json(msg=f"package_holds: the hold did not stick for {', '.join(lost)}", **result)
    module.exit_json(changed=True, diff=diff, **result)


if __name__ == "__main__":
    main()
