"""The ``gpunode`` command line.

``gpunode sim …`` drives the simulated fleet (design.md §5); ``gpunode hook …`` is the
post-provision hook (serve / run / revalidate / status / sign / forget); ``gpunode report`` writes the fleet report.
Errors print one line naming what is wrong and exit 2; nothing prints a traceback. With ``--json``
errors are a JSON object ``{"error": "..."}`` on standard output instead.

Exit codes: 0 success; 1 the command ran but the answer is "no" (``hook run``: a host did not end
ok; ``hook status``: no database, or the host or run is not recorded); 2 a usage error or bad input
(configuration, profile, results directory) or a failing tool (podman, image or repository build).
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from gpunode.hook.config import ConfigError, load_config
from gpunode.report.model import ReportInputError
from gpunode.sim import fleet, hwstate, image, repo
from gpunode.sim.podman import PodmanError
from gpunode.sim.profile import ProfileError, list_profiles, load_profile
from gpunode.sim.sysfs import materialize


def _sim_parser(sub: argparse._SubParsersAction) -> None:
    sim = sub.add_parser("sim", help="the simulated DGX/HGX fleet (podman systemd hosts)")
    sim.add_argument("--state-dir", type=Path, default=None,
                     help="where host state lives (default: $GPUNODE_SIM_DIR or ./.sim)")
    cmds = sim.add_subparsers(dest="sim_cmd", required=True)

    img = cmds.add_parser("image", help="build the Debian 12 + systemd test-host image (cached by recipe)")
    img.add_argument("--force", action="store_true", help="rebuild even if the recipe is unchanged")
    cmds.add_parser("image-ref", help="print the image reference for the current recipe")

    up = cmds.add_parser("up", help="start hosts: gpunode sim up dgx01=dgx-h100 hgx01=hgx-h100")
    up.add_argument("hosts", nargs="+", metavar="NAME=PROFILE", help="host name and hardware profile")
    up.add_argument("--replace", action="store_true", help="recreate hosts that already exist")

    down = cmds.add_parser("down", help="remove hosts (all simulated hosts when none is named)")
    down.add_argument("hosts", nargs="*", metavar="NAME", help="hosts to remove (default: every simulated host)")
    down.add_argument("--missing-ok", action="store_true", help="do not fail on hosts that do not exist")

    reboot = cmds.add_parser("reboot", help="reboot a host: volatile hardware state is reset")
    reboot.add_argument("host", metavar="NAME", help="the simulated host to reboot")

    flt = cmds.add_parser("fault", help="set or clear a fault flag: gpunode sim fault dgx01 link_down 0000:18:00.0")
    flt.add_argument("host", help="the simulated host")
    flt.add_argument("kind", choices=[*hwstate.FAULT_KINDS, *hwstate.HEALTH_FAULTS, *hwstate.RUNTIME_FAULTS,
                                      *hwstate.CABLING_FAULTS],
                     help="the fault (day two: xid, retired_page_pending, rail_rate, pcie_width are flags; "
                          "adaptive_routing, vf_reset, dstate, hang change volatile state once; "
                          "cable_swap <pci> <pci>, foreign_leaf <pci> <switch> [port], lldp_off - change the cabling)")
    flt.add_argument("address", help="the NIC function's or GPU's PCI address; dstate: the stuck command; "
                                      "hang: the tool that hangs (nvidia-smi)")
    flt.add_argument("params", nargs="*",
                     help="not_sticky: the NV config parameters that do not stick; xid: Xid numbers (48, 63, 79, "
                          "94); rail_rate: Gb/s; pcie_width: lanes; adaptive_routing: 0 or 1 (default: flip); "
                          "dstate: seconds in D state (default 600)")
    flt.add_argument("--clear", action="store_true", help="clear the flag instead of setting it")
    cable = cmds.add_parser("cable", help="re-cable a host's rails: --unit su2 (rail k to su2-leaf<k>), --leaf tor1 "
                                          "(every rail to one switch), or --link <pci> <switch> <port>")
    cable.add_argument("host", help="the simulated host")
    how = cable.add_mutually_exclusive_group(required=True)
    how.add_argument("--unit", help="rail-optimized scalable unit: rail k to <unit>-leaf<k>")
    how.add_argument("--leaf", help="top of rack: every rail to this switch")
    how.add_argument("--link", nargs=3, metavar=("PCI", "SWITCH", "PORT"), help="one NIC function's cable")
    inv = cmds.add_parser("inventory", help="write an Ansible inventory of the running hosts")
    inv.add_argument("--output", "-o", type=Path, default=Path("inventories/sim/hosts.yml"),
                     help="inventory file to write (default: inventories/sim/hosts.yml)")
    inv.add_argument("hosts", nargs="*", metavar="NAME", help="only these hosts (default: every running host)")

    rep = cmds.add_parser("repo", help="the simulated vendor apt repositories (doca, cuda, kubernetes)")
    rep_cmds = rep.add_subparsers(dest="repo_cmd", required=True)
    rb = rep_cmds.add_parser("build", help="build the signed repositories (skipped when the inputs are unchanged)")
    rb.add_argument("--force", action="store_true", help="rebuild even if the inputs are unchanged")
    rb.add_argument("--output", type=Path, default=None, help="where to build (default: .cache/sim-repo)")
    rep_cmds.add_parser("path", help="print where the repositories are built")

    cmds.add_parser("status", help="list the simulated hosts")
    cmds.add_parser("profiles", help="list the hardware profiles")

    mat = cmds.add_parser("materialize", help="write a profile's sysfs tree into a directory")
    mat.add_argument("profile", help="profile name or path to a profile YAML")
    mat.add_argument("dest", type=Path, help="directory to write the tree into (the sysfs root)")


def _hook_parser(sub: argparse._SubParsersAction) -> None:
    hook = sub.add_parser("hook", help="the post-provision hook (cloud-init phone_home / Cluster API → pipeline)")
    hook.add_argument("--config", "-c", type=Path, default=None, help="settings YAML (see examples/hook)")
    hook.add_argument("--state-dir", type=Path, default=None, help="database, results, artifacts, known_hosts")
    hook.add_argument("--playbook", default=None,
                      help="playbook to run, relative to --project-dir (default playbooks/site.yml)")
    hook.add_argument("--inventory", "-i", default=None, help="inventory file, directory or plugin config")
    hook.add_argument("--project-dir", type=Path, default=None, help="the collection checkout the playbook lives in")
    hook.add_argument("--secret-file", type=Path, default=None,
                      help="file holding the site secret (else $GPUNODE_HOOK_SECRET)")
    cmds = hook.add_subparsers(dest="hook_cmd", required=True)
    serve = cmds.add_parser("serve", help="run the HTTP service and its worker")
    serve.add_argument("--listen", default=None, metavar="HOST:PORT", help="default 127.0.0.1:18080")
    run = cmds.add_parser("run", help="run the pipeline for hosts now, from this shell")
    run.add_argument("--host", dest="hosts", action="append", required=True, metavar="NAME",
                     help="inventory name of a host to run (repeat for several)")
    cmds.add_parser("revalidate", help="one scheduled revalidation now, from this shell (the `revalidate:` settings)")
    st = cmds.add_parser("status", help="hosts, runs and revalidations recorded by the hook")
    st.add_argument("--host", default=None, help="only this host")
    st.add_argument("--run", dest="run_id", type=int, default=None, help="one run by its id")
    st.add_argument("--json", action="store_true", help="machine-readable output; errors as {\"error\": ...}")
    sign = cmds.add_parser("sign", help="print the per-machine phone_home ?sig= (auth: hmac)")
    sign.add_argument("--instance-id", required=True, help="the machine's instance id (MAAS system_id)")
    sign.add_argument("--hostname", required=True, help="the host name the machine posts (short name)")
    forget = cmds.add_parser("forget", help="drop hosts' bound identity (instance id, host keys) to re-key them")
    forget.add_argument("--host", dest="hosts", action="append", required=True, metavar="NAME",
                        help="a host to forget (repeat for several)")


def _run_hook(args: argparse.Namespace) -> int:
    from gpunode.hook import service
    from gpunode.hook.requests import phone_home_signature

    overrides = {"state_dir": args.state_dir, "playbook": args.playbook, "inventory": args.inventory,
                 "project_dir": args.project_dir, "secret_file": args.secret_file}
    if getattr(args, "listen", None):
        host, _, port = args.listen.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--listen: {args.listen!r} is not HOST:PORT")
        overrides.update(listen_host=host, listen_port=int(port))
    config = load_config(args.config, **overrides)
    if args.hook_cmd == "status":
        return service.status(config, host=args.host, run_id=args.run_id, as_json=args.json)
    config.validate()
    if args.hook_cmd == "serve":
        return service.serve(config)
    if args.hook_cmd == "run":
        return service.run_hosts(config, args.hosts)
    if args.hook_cmd == "forget":
        return service.forget(config, args.hosts)
    if args.hook_cmd == "revalidate":
        return service.revalidate_now(config)
    print(phone_home_signature(config.secret(), args.instance_id, args.hostname))
    return 0


def _kapi_parser(sub: argparse._SubParsersAction) -> None:
    kapi = sub.add_parser("kapi", help="the Kubernetes API emulator (loopback HTTPS, for tests)")
    cmds = kapi.add_subparsers(dest="kapi_cmd", required=True)
    serve = cmds.add_parser("serve", help="serve the emulator in the foreground")
    serve.add_argument("--port", type=int, default=16443, help="TCP port on 127.0.0.1 (default 16443)")
    serve.add_argument("--state", type=Path, required=True,
                       help="state directory: CA, admin.conf, admin.token, objects.json (created if missing)")
    start = cmds.add_parser("start", help="serve in the background (pid in <state>/kapi.pid, log in <state>/kapi.log) "
                            "and wait until it answers")
    start.add_argument("--port", type=int, default=16443, help="TCP port on 127.0.0.1 (default 16443)")
    start.add_argument("--state", type=Path, required=True, help="state directory (as for serve)")
    stop = cmds.add_parser("stop", help="stop the emulator started with 'start' for this state directory")
    stop.add_argument("--state", type=Path, required=True, help="state directory of the emulator to stop")
    creds = cmds.add_parser("credentials", help="create the CA, admin token and admin.conf without serving; "
                            "print server, kubeconfig and the CA cert hash pin as JSON")
    creds.add_argument("--port", type=int, default=16443, help="port the kubeconfig names (default 16443)")
    creds.add_argument("--state", type=Path, required=True, help="state directory (as for serve)")


def _run_kapi(args: argparse.Namespace) -> int:
    try:
        from gpunode.kapi import server  # aiohttp is only imported when the emulator is used
    except ImportError as exc:
        raise ConfigError(f"gpunode kapi needs the emulator's packages: pip install 'gpunode[sim]' ({exc})") from exc

    if args.kapi_cmd == "serve":
        server.serve(args.state.resolve(), args.port)
    elif args.kapi_cmd == "start":
        pid = server.start_background(args.state.resolve(), args.port)
        print(f"gpunode kapi: serving https://127.0.0.1:{args.port} (pid {pid}, state {args.state.resolve()})")
    elif args.kapi_cmd == "stop":
        print("gpunode kapi: " + ("stopped" if server.stop_background(args.state.resolve()) else "was not running"))
    else:
        creds = server.ensure_credentials(args.state.resolve(), args.port)
        print(json.dumps({k: creds[k] for k in ("server", "kubeconfig", "ca_cert_hash")}))
    return 0


def _report_parser(sub: argparse._SubParsersAction) -> None:
    rep = sub.add_parser("report", help="write the fleet report (HTML + Markdown) from machine-readable results")
    rep.add_argument("--input", "-i", type=Path, required=True,
                     help="results directory: fleet.json, hosts/<host>/*.json, kueue/ "
                     "(ansible-doc mlplatform.gpunode.fleet_report)")
    rep.add_argument("--output", "-o", type=Path, default=None, help="where to write report.{html,md,json} "
                     "(default: the input directory)")


def _version() -> str:
    try:
        return version("gpunode")
    except PackageNotFoundError:  # run from a checkout without installing
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``gpunode`` command."""
    parser = argparse.ArgumentParser(prog="gpunode", description=__doc__.splitlines()[0],
                                     epilog="exit codes: 0 success, 1 the answer is no (a host not ok, "
                                            "nothing recorded), 2 usage error or bad input")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    _sim_parser(sub)
    _hook_parser(sub)
    _kapi_parser(sub)
    _report_parser(sub)
    return parser


def _run_report(args: argparse.Namespace) -> int:
    from gpunode.report.render import write_report

    written = write_report(args.input, args.output or args.input)
    for name in ("report.html", "report.md", "report.json"):
        path, changed = written[name]
        print(f"{name}: {path.resolve()} ({'written' if changed else 'unchanged'})")
    return 0


def _run_sim(args: argparse.Namespace) -> int:
    state_dir = (args.state_dir or fleet.default_state_dir()).resolve()
    cmd = args.sim_cmd
    if cmd == "image":
        image.ensure_image(force=args.force)
    elif cmd == "image-ref":
        print(image.image_ref())
    elif cmd == "up":
        fleet.up([fleet.HostSpec.parse(h) for h in args.hosts], state_dir, replace=args.replace)
    elif cmd == "down":
        fleet.down(args.hosts, missing_ok=args.missing_ok)
    elif cmd == "reboot":
        fleet.reboot(args.host)
    elif cmd == "fault":
        fleet.fault(args.host, args.kind, args.address, params=args.params, clear=args.clear)
    elif cmd == "cable":
        fleet.cable(args.host, unit=args.unit, leaf=args.leaf, link=tuple(args.link) if args.link else None)
    elif cmd == "inventory":
        fleet.inventory(args.output, args.hosts)
    elif cmd == "repo" and args.repo_cmd == "build":
        repo.build(args.output, force=args.force)
    elif cmd == "repo":
        print(repo.default_output())
    elif cmd == "status":
        for h in fleet.hosts():
            print(f"{h['name']:<16} {h['profile']:<16} {h['status']:<10} {h['container']}")
    elif cmd == "profiles":
        for name in list_profiles():
            print(name)
    elif cmd == "materialize":
        materialize(load_profile(args.profile), args.dest)
        print(f"materialized {args.profile} into {args.dest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``gpunode`` console script."""
    args = build_parser().parse_args(argv)
    try:
        if args.cmd == "sim":
            return _run_sim(args)
        if args.cmd == "hook":
            return _run_hook(args)
        if args.cmd == "kapi":
            return _run_kapi(args)
        if args.cmd == "report":
            return _run_report(args)
    except (ConfigError, ProfileError, fleet.FleetError, PodmanError, image.ImageError, repo.RepoError,
            ReportInputError) as exc:
        if getattr(args, "json", False):
            print(json.dumps({"error": str(exc)}))
        else:
            print(f"gpunode: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
