"""Simulated ``kubelet``: once ``--kubeconfig`` exists, post the Node's Ready status and keep it fresh.

Stdlib only (runs inside a simulated host). Started by ``kubelet.service`` with kubeadm's drop-in,
like the real one: ``kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_KUBEADM_ARGS``. Without the
kubeconfig it exits 1 with the real kubelet's message (systemd restarts it, which is the known
"kubelet restarts until kubeadm join" state of a fresh node). It refuses the ``--node-labels`` the
real kubelet refuses. With the kubeconfig it reads the Node name from the credential, patches
``/status`` with a ``Ready`` condition, capacity (CPU, memory from /proc/meminfo, pods) and
nodeInfo, then repeats the heartbeat every ``--heartbeat`` seconds (default 40) until stopped;
``--once`` posts once and exits (tests).
"""

from __future__ import annotations

import datetime
import os
import sys
import time

from . import kubeadm


def _meminfo_kib() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def status_patch(now: str) -> dict:
    """The status a healthy kubelet posts."""
    cpu = str(os.cpu_count() or 1)
    mem = f"{_meminfo_kib()}Ki"
    return {"status": {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
             "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
             "message": "kubelet has sufficient memory available", "lastHeartbeatTime": now,
             "lastTransitionTime": now},
        ],
        "capacity": {"cpu": cpu, "memory": mem, "pods": "110"},
        "allocatable": {"cpu": cpu, "memory": mem, "pods": "110"},
        "nodeInfo": {"kubeletVersion": kubeadm.VERSION, "containerRuntimeVersion": "containerd://1.6.20",
                     "operatingSystem": "linux", "architecture": "amd64", "osImage": "Debian GNU/Linux 12 (bookworm)",
                     "kernelVersion": os.uname().release, "machineID": "", "systemUUID": "", "bootID": "",
                     "kubeProxyVersion": ""},
    }}


def main(argv: list[str], out=None, err=None) -> int:
    """``kubelet`` with ``argv``; returns the exit status (runs until killed unless ``--once``)."""
    out, err = out or sys.stdout, err or sys.stderr
    opts: dict[str, str] = {}
    once = "--once" in argv
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            key, _, value = arg[2:].partition("=")
            opts[key] = value
    if "--version" in argv:
        print(f"Kubernetes {kubeadm.VERSION}", file=out)
        return 0
    bad = kubeadm.kubelet_label_errors(kubeadm._parse_labels(opts.get("node-labels", "")))
    if bad:
        print(f"E1130 run.go:72] \"command failed\" err=\"failed to validate kubelet flags: unknown 'kubernetes.io' "
              f"or 'k8s.io' labels specified with --node-labels: {bad}\"", file=err)
        return 1
    conf = opts.get("kubeconfig", "/etc/kubernetes/kubelet.conf").lstrip("/")
    if not os.path.exists(kubeadm._path(conf)):
        boot = opts.get("bootstrap-kubeconfig", "/etc/kubernetes/bootstrap-kubelet.conf")
        print(f'E1130 run.go:72] "command failed" err="failed to run Kubelet: unable to load bootstrap kubeconfig: '
              f'stat {boot}: no such file or directory"', file=err)
        return 1
    try:
        server, ca_pem, credential = kubeadm._kubeconfig(conf)
    except (kubeadm.KubeadmError, KeyError, IndexError) as exc:
        print(f'E1130 run.go:72] "command failed" err="invalid kubeconfig: {exc}"', file=err)
        return 1
    node = credential.split(":")[1] if credential.count(":") >= 2 else ""
    client = kubeadm.Client(server, ca_pem, credential)
    period = float(opts.get("heartbeat", "40"))
    while True:
        now = datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            code, result = client.request("PATCH", f"/api/v1/nodes/{node}/status", status_patch(now),
                                          "application/strategic-merge-patch+json")
        except kubeadm.KubeadmError as exc:
            code, result = 0, {"message": str(exc)}
        if code == 200:
            print(f'I1130 kubelet_node_status.go:75] "Successfully updated node status" node="{node}"', file=out,
                  flush=True)
        else:
            message = result.get("message", code)
            print(f'E1130 kubelet_node_status.go:585] "Error updating node status, will retry" err="{message}" '
                  f'node="{node}"', file=err, flush=True)
            if once:
                return 1
        if once:
            return 0
        time.sleep(period)


def run(argv: list[str], tool: str = "kubelet") -> int:
    """Entry point of the simulated tools' dispatch (``main.main("kubelet", argv)``)."""
    return main(argv)
