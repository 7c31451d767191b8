"""Test helpers: a simulated host's state directory on the controller, and running a simulated tool in it."""

from __future__ import annotations

import io
import os
import sys
import threading
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from gpunode.sim import hwstate
from gpunode.sim.profile import load_profile
from gpunode.sim.tools.main import main
from gpunode.sim.tools.state import ENV_DPKG_STATUS, ENV_NVIDIA_USERSPACE, ENV_ROOT, HostState


@dataclass
class Result:
    rc: int
    out: str
    err: str


def make_host(path: Path, profile: str = "dgx-h100", faults: dict | None = None) -> Path:
    """A fresh host state directory (profile.json, devices.json, hw.json, sys/) for ``profile``."""
    data = load_profile(profile)
    if faults:
        data["faults"] = faults
    hwstate.write_state(path, data)
    return path


def run_tool(root: Path, tool: str, *argv: str, stdin: str = "", userspace: Path | None = None,
             dpkg_status: Path | None = None) -> Result:
    """Run simulated ``tool`` against host state ``root`` the way a wrapper script would.

    In this process, with its stdout, stdin and environment swapped: one tool at a time (a lock), since
    the modules run their device reads from a thread pool (node_reads.prefetch)."""
    with _TOOL_LOCK:
        return _run_tool(root, tool, *argv, stdin=stdin, userspace=userspace, dpkg_status=dpkg_status)


_TOOL_LOCK = threading.Lock()


def _run_tool(root, tool, *argv, stdin, userspace, dpkg_status):
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (ENV_ROOT, ENV_NVIDIA_USERSPACE, ENV_DPKG_STATUS)}
    saved_stdin = sys.stdin
    os.environ[ENV_ROOT] = str(root)
    os.environ[ENV_NVIDIA_USERSPACE] = str(userspace or root / "no-userspace-file")
    os.environ[ENV_DPKG_STATUS] = str(dpkg_status or root / "no-dpkg-status")
    sys.stdin = io.StringIO(stdin)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            rc = main(tool, list(argv))
    finally:
        sys.stdin = saved_stdin
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return Result(rc, out.getvalue(), err.getvalue())


def state(root: Path) -> HostState:
    return HostState(root)


def tool_bin(bindir: Path, tools) -> Path:
    """Wrapper scripts in ``bindir`` that run the simulated ``tools`` as executables, as the wrappers
    inside a simulated host do, for code that finds its tools on PATH; returns ``bindir``.
    ``GPUNODE_SIM_STATE`` in the caller's environment selects the host."""
    src = Path(__file__).resolve().parents[2] / "src"
    bindir.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        script = bindir / tool
        script.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(src)!r})\n"
                          f"from gpunode.sim.tools.main import main\nsys.exit(main({tool!r}, sys.argv[1:]))\n")
        script.chmod(0o755)
    return bindir


def day_two_host(path: Path, profile: str = "hgx-h100", driver: str = "570.172.08", num_vfs: int = 8,
                 pfc: list[int] | None = None, intent: dict | None = None) -> tuple[Path, dict]:
    """A host as the pipeline leaves it, for the day-two checks: the NVIDIA driver loaded, persistence
    on, fabric Completed, ``num_vfs`` VFs and adaptive routing on every rail (with ``pfc``: DSCP trust
    and that PFC), an empty simulated process table. With ``intent`` (one fabric's resolved intent), the
    rails are as that fabric declares them instead: its NV config set and in effect after a reboot, its VFs,
    adaptive routing and QoS profile. Returns ``(state dir, discovery result)``."""
    from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify  # noqa: PLC0415 - only the day-two tests need it
    from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import read_sysfs  # noqa: PLC0415 - as above

    hdir = make_host(path, profile)
    hw = classify(read_sysfs(hdir / "sys"))
    if intent is not None:
        compute = intent["nics"]["compute"]
        num_vfs = compute["num_vfs"]
        from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxconfig import parse_query  # noqa: PLC0415 - as above

        for rail in hw["rails"]:
            query = run_tool(hdir, "mlxconfig", "-d", rail["pci_address"], "q")
            assert query.rc == 0, query.err
            names = set(parse_query(query.out)["devices"][0]["params"])
            # A parameter without _P<n> is the rail's own port (port 1 of a single-port rail), as the module says.
            settings = [f"{k if k in names else k + '_P1'}={int(v) if isinstance(v, bool) else v}"
                        for k, v in compute["nv_config"].items()]
            done = run_tool(hdir, "mlxconfig", "-d", rail["pci_address"], "-y", "set", *settings)
            assert done.rc == 0, done.out + done.err
        hwstate.reboot_state(hdir)
    hw["fabric_manager_required"] = bool(hw["nvswitches"])
    host_state = state(hdir)
    host_state.load_module("nvidia", driver)
    host_state.set_gpu_runtime(fabric_state="Completed", fabric_status="Success", persistence_mode=True)
    for rail in hw["rails"]:
        (hdir / "sys" / "bus" / "pci" / "devices" / rail["pci_address"] / "sriov_numvfs").write_text(f"{num_vfs}\n")
        done = run_tool(hdir, "mlxreg", "-d", rail["pci_address"], "--reg_name", "ROCE_ACCL", "--set",
                        "adaptive_routing_forced_en=1", "--yes")
        assert done.rc == 0, done.err
        if pfc is not None:
            done = run_tool(hdir, "mlnx_qos", "-i", rail["netdev"], "--trust", "dscp", "--pfc", ",".join(map(str, pfc)))
            assert done.rc == 0, done.err
        qos = (intent or {}).get("qos")
        if qos:
            flags = [int(p in qos["pfc_priorities"]) for p in range(8)]
            done = run_tool(hdir, "mlnx_qos", "-i", rail["netdev"], "--trust", qos["trust"],
                            "--pfc", ",".join(map(str, flags)))
            assert done.rc == 0, done.err
            net = hdir / "sys" / "class" / "net" / rail["netdev"]
            for point, enabled in (("roce_np", qos["ecn_np_priorities"]), ("roce_rp", qos["ecn_rp_priorities"])):
                for prio in range(8):
                    (net / "ecn" / point / "enable" / str(prio)).write_text(f"{int(prio in enabled)}\n")
            (net / "ecn" / "roce_np" / "cnp_dscp").write_text(f"{qos['cnp_dscp']}\n")
            (net / "mtu").write_text(f"{qos['mtu']}\n")
            tc = hdir / "sys" / "class" / "infiniband" / rail["rdma_device"] / "tc" / "1"
            tc.mkdir(parents=True, exist_ok=True)
            (tc / "traffic_class").write_text(f"{qos['roce_tos']}\n")
            done = run_tool(hdir, "cma_roce_tos", "-d", rail["rdma_device"], "-t", str(qos["roce_tos"]))
            assert done.rc == 0, done.out + done.err
    hwstate.proc_table(hdir)
    return hdir, hw
