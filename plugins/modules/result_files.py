#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: result_files
short_description: Read a host's machine-readable result files in one call
version_added: 0.2.0
description:
  - Returns the text and SHA-256 digest of every regular file in O(path) whose name matches one of O(patterns),
    in one host round trip (C(ansible.builtin.find) and one C(ansible.builtin.fetch) a file cost one each).
  - The M(mlplatform.gpunode.fleet_report) action writes them on the controller
    (O(mlplatform.gpunode.fleet_report#module:host_files)), as C(hosts/<host>/<name>).
  - Fails naming the file when one is larger than O(max_bytes) or is not UTF-8 text; a missing O(path) returns no
    files. Read-only.
author:
  - mlplatform.gpunode developers (@mlplatform)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  path:
    description: The directory the roles write their results to.
    type: path
    default: /var/lib/gpunode
  patterns:
    description: Shell-style patterns (C(fnmatch)) of the file names to read; subdirectories are not read.
    type: list
    elements: str
    default: ["*.json"]
  max_bytes:
    description: The largest file read, in bytes.
    type: int
    default: 4194304
attributes:
  check_mode:
    support: full
    details: Read-only; the same result in check mode.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Read the result files
  mlplatform.gpunode.result_files:
  register: __results
"""

RETURN = r"""
files:
  description: File name -> C({content (UTF-8 text), sha256 (hex), size (bytes)}), in name order.
  returned: always
  type: dict
  sample: {"validation.json": {"content": "{\"passed\": true}\n", "sha256": "5c1d...", "size": 17}}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host
from ansible_collections.mlplatform.gpunode.plugins.module_utils.result_files import (
    DEFAULT_MAX_BYTES,
    DEFAULT_PATH,
    DEFAULT_PATTERNS,
    ResultFilesError,
    read_result_files,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": DEFAULT_PATH},
            "patterns": {"type": "list", "elements": "str", "default": list(DEFAULT_PATTERNS)},
            "max_bytes": {"type": "int", "default": DEFAULT_MAX_BYTES},
        },
        supports_check_mode=True,
    )
    name_the_host(module, "result_files")
    try:
        files = read_result_files(module.params["path"], module.params["patterns"], module.params["max_bytes"])
    except ResultFilesError as exc:
        module.fail_json(msg=f"result_files: {exc}")
    module.exit_json(changed=False, files=files)


if __name__ == "__main__":
    main()
