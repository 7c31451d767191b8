"""mlplatform.gpunode.template: the builtin template lookup's output, without deep-copying the host's variables."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
ENV = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
       "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_NOCOLOR": "1"}


def test_handed_variables_deep_copy_is_shallow_and_search_path_is_its_own():
    from ansible_collections.mlplatform.gpunode.plugins.lookup.template import handed_variables

    state = {"files": {"/etc/x": {"sha256": "0" * 64}}}
    search = ["/roles/sriov", "/playbooks"]
    variables = {"gpunode_host_state": state, "ansible_search_path": search, "sriov_config_dir": "/etc/gpunode"}
    handed = handed_variables(variables)
    copied = copy.deepcopy(handed)
    assert copied == variables
    assert copied["gpunode_host_state"] is state  # not copied
    copied["ansible_search_path"].insert(0, "/roles/sriov/templates")
    assert search == ["/roles/sriov", "/playbooks"]  # the host's own list is left alone
    assert handed_variables(None) == {}


def test_the_role_templates_render_as_with_the_builtin_lookup(tmp_path):
    """Every template of the roles, rendered by both lookups in one play with the variables a host would have
    (and a big nested host read alongside): the same text, ansible_managed included."""
    templates = sorted(REPO.glob("roles/*/templates/*.j2"))
    assert len(templates) >= 7
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    h1:\n      ansible_connection: local\n"
                                        f"      ansible_python_interpreter: {sys.executable}\n")
    extra = {
        "sriov_config_dir": "/etc/gpunode", "__sriov_script": "/usr/local/libexec/gpunode-sriov-apply",
        "roce_qos_config_dir": "/etc/gpunode", "__roce_qos_script": "/usr/local/libexec/gpunode-roce-qos",
        "nic_firmware_config_dir": "/etc/gpunode", "__nic_firmware_fabric": "roce",
        "nic_firmware_boot_unit_after": "openibd.service", "nic_firmware_boot_unit_before": "kubelet.service",
        "__nic_firmware_accl": [{"device": "0000:18:00.0", "fields": {"adaptive_routing_forced_en": 1}},
                                {"device": "0000:29:00.0", "fields": {"adaptive_routing_forced_en": 1}}],
        "__nic_firmware_roce_accl": {"skipped_devices": {"0000:29:00.0": "refused"}},
        "kubernetes_node_nvidia_runtime": True, "__kubernetes_node_modules": ["overlay", "br_netfilter"],
        "__kubernetes_node_keyring": "/etc/apt/keyrings/kubernetes.gpg",
        "__kubernetes_node_repo_url": "https://pkgs.k8s.io/core:/stable:/v1.31/deb/",
        "gpunode_host_state": {"nv_config": {f"0000:{i:02x}:00.0": "x" * 2000 for i in range(24)}},
    }
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    tasks = "".join(textwrap.dedent(f"""\
        - name: Render {path.parent.parent.name}/{path.name} with both lookups
          ansible.builtin.set_fact:
            rendered: >-
              {{{{ rendered | default({{}}) | combine({{'{path.name}': [
                     lookup('mlplatform.gpunode.template', '{path}'),
                     lookup('ansible.builtin.template', '{path}')]}}) }}}}
        """) for path in templates)
    tasks += "- name: Show them\n  ansible.builtin.debug:\n    msg: \"RENDERED={{ rendered | to_json }}\"\n"
    (tmp_path / "play.yml").write_text(
        f"- name: Render\n  hosts: all\n  gather_facts: false\n  vars_files: [{tmp_path / 'vars.json'}]\n"
        f"  tasks:\n{textwrap.indent(tasks, '    ')}")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, check=False, timeout=600,
                          env={**ENV, "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    msg = json.loads(proc.stdout)["plays"][0]["tasks"][-1]["hosts"]["h1"]["msg"]
    rendered = json.loads(msg.split("RENDERED=", 1)[1])
    assert sorted(rendered) == sorted(path.name for path in templates)
    for name, (mine, builtin) in rendered.items():
        assert mine == builtin, name
        assert "Ansible managed" in mine, name
    assert "0000:18:00.0" in rendered["roce-accl.conf.j2"][0]
    assert "0000:29:00.0" not in rendered["roce-accl.conf.j2"][0]  # skipped: the template's own filter ran


def test_a_missing_template_is_the_builtin_error(tmp_path):
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    h1:\n      ansible_connection: local\n"
                                        f"      ansible_python_interpreter: {sys.executable}\n")
    (tmp_path / "play.yml").write_text(textwrap.dedent("""\
        - name: Render
          hosts: all
          gather_facts: false
          tasks:
            - name: Render a template that is not there
              ansible.builtin.debug:
                msg: "{{ lookup('mlplatform.gpunode.template', 'no-such.j2') }}"
        """))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=ENV, check=False, timeout=300)
    assert proc.returncode != 0
    assert "the template file no-such.j2 could not be found for the lookup" in proc.stdout + proc.stderr
