"""Simulated ``kubectl``: ``version --client``, ``get nodes``, ``get node NAME -o json``, ``delete node NAME``.

Stdlib only (runs inside a simulated host). Reads the kubeconfig from ``--kubeconfig``,
``$KUBECONFIG`` or ``/etc/kubernetes/admin.conf`` (JSON kubeconfigs, as the emulator writes them)
and prints what the real kubectl prints for these commands.
"""

from __future__ import annotations

import json
import os
import sys

from . import kubeadm


def main(argv: list[str], out=None, err=None) -> int:
    """``kubectl`` with ``argv``; returns the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    kubeconfig = os.environ.get("KUBECONFIG", "/etc/kubernetes/admin.conf")
    args, output = [], ""
    it = iter(argv)
    for arg in it:
        if arg.startswith("--kubeconfig"):
            kubeconfig = arg.split("=", 1)[1] if "=" in arg else next(it, "")
        elif arg in ("-o", "--output"):
            output = next(it, "")
        elif arg.startswith("--output=") or arg.startswith("-o="):
            output = arg.split("=", 1)[1]
        else:
            args.append(arg)
    if args[:1] == ["version"] and "--client" in args:
        info = {"clientVersion": {"major": "1", "minor": "33", "gitVersion": kubeadm.VERSION,
                                  "platform": "linux/amd64"}}
        print(json.dumps(info, indent=2) if output == "json" else f"Client Version: {kubeadm.VERSION}", file=out)
        return 0
    if args[:1] == ["delete"] and len(args) == 3 and args[1] in ("node", "nodes", "no"):
        try:
            server, ca_pem, token = kubeadm._kubeconfig(kubeconfig.lstrip("/"))
            code, result = kubeadm.Client(server, ca_pem, token).request("DELETE", f"/api/v1/nodes/{args[2]}")
        except kubeadm.KubeadmError as exc:
            print(f"error: {exc}", file=err)
            return 1
        if code != 200:
            print(f"Error from server ({result.get('reason', code)}): {result.get('message', '')}", file=err)
            return 1
        print(f'node "{args[2]}" deleted', file=out)
        return 0
    if args[:1] != ["get"] or len(args) < 2 or args[1] not in ("node", "nodes", "no"):
        print(f"the simulated kubectl supports version --client and get nodes; not {' '.join(argv)!r}", file=err)
        return 1
    try:
        server, ca_pem, token = kubeadm._kubeconfig(kubeconfig.lstrip("/"))
        client = kubeadm.Client(server, ca_pem, token)
        path = "/api/v1/nodes" + (f"/{args[2]}" if len(args) > 2 else "")
        code, result = client.request("GET", path)
    except kubeadm.KubeadmError as exc:
        print(f"error: {exc}", file=err)
        return 1
    if code != 200:
        print(f"Error from server ({result.get('reason', code)}): {result.get('message', '')}", file=err)
        return 1
    if output == "json":
        print(json.dumps(result, indent=4), file=out)
        return 0
    items = result.get("items", [result])
    print(f"{'NAME':<16} {'STATUS':<10} ROLES    VERSION", file=out)
    for node in items:
        ready = kubeadm._ready(node)
        status = ("Ready" if ready else "NotReady") + (",SchedulingDisabled" if node.get("spec", {}).get(
            "unschedulable") else "")
        version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
        print(f"{node['metadata']['name']:<16} {status:<10} <none>   {version}", file=out)
    return 0


def run(argv: list[str], tool: str = "kubectl") -> int:
    """Entry point of the simulated tools' dispatch (``main.main("kubectl", argv)``)."""
    return main(argv)
