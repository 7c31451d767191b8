#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

DOCUMENTATION = r"""
module: ib_write_bw
short_description: Run perftest ib_write_bw servers or clients for every rail of a host in one call
version_added: 0.1.0
description:
  - >-
    O(servers) starts one C(ib_write_bw) server per entry in the background (each serves one client, and is bounded
    by O(timeout) through C(timeout(1))) and returns at once.
  - >-
    O(clients) runs one C(ib_write_bw) client per entry, one after the other, retrying a refused connection while
    the peer's server starts, and returns the measured average bandwidth in Gb/s (C(--report_gbits)).
  - >-
    Both in one call start the servers first, then run the clients: the validation role does so in a phase whose
    hosts all run at once, where each host serves one peer and is the client of another.
  - A test measures and changes nothing on the host, so the module never reports changed. In check mode nothing runs.
  - Without perftest on the host every client result carries the error instead of failing the task.
author: mlplatform.gpunode developers (@mlplatform)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Nothing runs in check mode; results are empty.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  servers:
    description: Servers to start.
    type: list
    elements: dict
    default: []
    suboptions:
      id:
        description: Test id (echoed back).
        type: str
        required: true
      device:
        description: RDMA device of the rail (C(mlx5_0)).
        type: str
        required: true
      port:
        description: TCP port of the test's connection exchange.
        type: int
        required: true
      lifetime:
        description:
          - Seconds this server waits for its client before C(timeout(1)) ends it; O(timeout) when not given.
          - The validation role takes it from the bandwidth schedule (the latest moment its client can run).
        type: int
  clients:
    description: Clients to run, in order.
    type: list
    elements: dict
    default: []
    suboptions:
      id:
        description: Test id (echoed back).
        type: str
        required: true
      device:
        description: RDMA device of the rail.
        type: str
        required: true
      port:
        description: TCP port the server listens on.
        type: int
        required: true
      server:
        description: Address of the server host.
        type: str
        required: true
  extra_args:
    description: Extra perftest arguments for both sides (for example C([-x, "3"]) for a RoCE GID index).
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds a server waits for its client, and a client for its run.
    type: int
    default: 60
  connect_retries:
    description:
      - How often a client retries a refused connection. The first retry comes after 0.05 s, each later one after
        twice the wait before it, up to a quarter of a second (32 retries wait 7.6 s in all). A peer's server that
        starts while the client waits is found within 0.25 s.
    type: int
    default: 32
  server_check_s:
    description:
      - At most this many seconds to wait after starting the servers for each to listen on its TCP port (read from
        C(/proc/net/tcp) and C(/proc/net/tcp6)) or to exit. One that exited did not start; one still running
        then is taken as started.
      - A port that something else already listens on is refused before any server starts on it.
    type: float
    default: 1.0
seealso:
  - module: mlplatform.gpunode.node_validation
"""

EXAMPLES = r"""
- name: Start the servers of this host's tests
  mlplatform.gpunode.ib_write_bw:
    servers: [{id: "dgx01:0-hgx01:0", device: mlx5_0, port: 18515}]

- name: Run the clients of this host's tests
  mlplatform.gpunode.ib_write_bw:
    clients: [{id: "dgx01:0-hgx01:0", device: mlx5_0, port: 18515, server: 10.0.0.11}]
  register: bw
"""

RETURN = r"""
started:
  description: Test id -> process id of the started server.
  returned: always
  type: dict
  sample: {"dgx01:0-hgx01:0": 4242}
server_errors:
  description:
    - Test id -> why its server is not running (it exited before its client connected), read from its log.
    - The validation gate then blames the server host, not the client; unless it is a failure of the harness (the
      port taken by another process, a bind that failed, perftest or C(timeout(1)) missing), which is a harness
      error blamed on no host.
  returned: always
  type: dict
  sample: {"dgx01:0-hgx01:0": "exit status 1: Couldn't listen to port 18515"}
tests:
  description: Test id -> result of the client run (C(results) is reserved by Ansible).
  returned: always
  type: dict
  contains:
    gbps:
      description: Average bandwidth in Gb/s, null on failure.
      type: float
    peak_gbps:
      description: Peak bandwidth in Gb/s, null on failure.
      type: float
    error:
      description: Why the run failed (the tool's messages or exit status), null on success.
      type: str
    rc:
      description: Exit status of the client.
      type: int
  sample: {"dgx01:0-hgx01:0": {"gbps": 371.2, "peak_gbps": 380.1, "error": null, "rc": 0}}
"""

import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils import perftest
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError


def _listening_ports():
    """TCP ports in LISTEN state in this network namespace (``/proc/net/tcp`` and ``tcp6``, state ``0A``),
    or None when neither file can be read."""
    ports, readable = set(), False
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path, encoding="ascii") as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A" and ":" in fields[1]:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports if readable else None


def _exit_status(pid, log):
    """``(ended, reason)``: whether ``pid`` has ended (it is then reaped: ask once), and why it did not start, from
    its log; the reason is None while it runs, and for a server that had its client. In a phase run at once a
    peer's client can connect and finish while this host's servers are still being checked: such a server ends
    well, or fails with its test (the client reports that failure), after perftest printed the exchanged
    ``remote address:`` line."""
    done, status = os.waitpid(pid, os.WNOHANG)
    if not done:
        return False, None
    rc = os.waitstatus_to_exitcode(status)
    if rc == 0:
        return True, None
    with open(log, "rb") as handle:
        text = handle.read(65536).decode("utf-8", "replace")
    if "remote address:" in text:
        return True, None
    return True, f"exit status {rc}: {perftest.failure_reason(text[:4096], '', rc)}"


def _start_servers(module, binary, servers, extra, timeout, check_s=0.0):
    """Start every server in the background -> ``(started {id: pid}, server_errors {id: reason})``.

    A server is up once its TCP port (where perftest exchanges the connection data) is in LISTEN; one that
    exited within ``check_s`` seconds did not start (wrong device, port taken). The module polls, so it
    waits ``check_s`` only for a server that neither listens nor exits. A port something else already
    listens on is refused before any server starts on it."""
    timeout_bin = module.get_bin_path("timeout", required=True)
    logdir = tempfile.mkdtemp(prefix="gpunode-ib_write_bw-")
    taken = _listening_ports() or set()
    started, procs, errors = {}, {}, {}
    for server in servers:
        if server["port"] in taken:
            errors[server["id"]] = (f"port {server['port']} is already in use (another process listens on it): "
                                    "not started")
            continue
        lifetime = server.get("lifetime") or timeout
        argv = [timeout_bin, str(lifetime), *perftest.server_argv(binary, server["device"], server["port"], extra)]
        log = os.path.join(logdir, f"{server['port']}.log")
        started[server["id"]] = pid = _spawn_detached(argv, log)
        procs[server["id"]] = (pid, log, server["port"])
    if check_s and procs:
        deadline = time.monotonic() + check_s
        waiting = dict(procs)
        while waiting and time.monotonic() < deadline:
            time.sleep(0.05)
            listening = _listening_ports()
            for test_id, (pid, log, port) in list(waiting.items()):
                ended, error = _exit_status(pid, log)
                if error:
                    errors[test_id] = error
                if ended or (listening is not None and port in listening):
                    del waiting[test_id]
        for test_id, (pid, log, _port) in waiting.items():
            _ended, error = _exit_status(pid, log)
            if error:
                errors[test_id] = error
    return started, errors


def _spawn_detached(argv, log):
    """Start argv in the background in its own session and return its pid, without waiting for it.

    A server must outlive this module run, which module.run_command cannot do: it waits for the command and
    for its output pipes to close. A fork and an exec of argv (no shell) start it with stdin from /dev/null,
    stdout and stderr to ``log``, and a new session (setsid), so the connection plugin's exec ending does not
    take it down; timeout(1) in argv bounds its life. The module starts no thread, so the fork copies no lock
    another thread holds; the child only rearranges its descriptors and execs.
    """
    env = {**os.environ, "LC_ALL": "C"}
    pid = os.fork()
    if pid:
        return pid
    try:  # the child
        os.setsid()
        stdin = os.open(os.devnull, os.O_RDONLY)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(stdin, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.execve(argv[0], argv, env)  # noqa: S606 - an argv list, never a shell (S606 flags any exec)
    finally:
        os._exit(127)  # exec failed: never return into the module


def retry_wait_s(attempt):
    """Seconds before retry ``attempt + 1`` of a refused connection: 0.05, 0.1, 0.2, then 0.25."""
    return min(0.25, 0.05 * 2 ** attempt)


def _run_client(module, binary, client, extra, timeout, retries):
    timeout_bin = module.get_bin_path("timeout", required=True)
    argv = [timeout_bin, str(timeout),
            *perftest.client_argv(binary, client["device"], client["port"], client["server"], extra)]
    for attempt in range(retries + 1):
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        if rc == 0:
            try:
                parsed = perftest.parse(out)
            except ParseError as exc:
                return {"gbps": None, "peak_gbps": None, "error": str(exc), "rc": rc}
            return {"gbps": parsed["bw_average_gbps"], "peak_gbps": parsed["bw_peak_gbps"], "error": None, "rc": rc}
        reason = perftest.failure_reason(out, err, rc)
        if "couldn't connect" not in reason.lower() or attempt == retries:
            return {"gbps": None, "peak_gbps": None, "error": reason, "rc": rc}
        time.sleep(retry_wait_s(attempt))
    return {"gbps": None, "peak_gbps": None, "error": "not run", "rc": None}


def main():
    test_spec = {"id": {"type": "str", "required": True}, "device": {"type": "str", "required": True},
                 "port": {"type": "int", "required": True}}
    module = AnsibleModule(
        argument_spec={
            "servers": {"type": "list", "elements": "dict", "default": [],
                        "options": {**test_spec, "lifetime": {"type": "int"}}},
            "clients": {"type": "list", "elements": "dict", "default": [],
                        "options": {**test_spec, "server": {"type": "str", "required": True}}},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "timeout": {"type": "int", "default": 60},
            "connect_retries": {"type": "int", "default": 32},
            "server_check_s": {"type": "float", "default": 1.0},
        },
        supports_check_mode=True,
    )
    host = name_the_host(module, "ib_write_bw")
    params = module.params
    bad = [f"{kind}[{index}] (id {test['id']}, device {test['device']}).port: expected a TCP port 1..65535, "
           f"got {test['port']}"
           for kind in ("servers", "clients") for index, test in enumerate(params[kind])
           if not 1 <= test["port"] <= 65535]
    bad += [f"{name}: expected at least 1, got {params[name]}" for name in ("timeout",) if params[name] < 1]
    if params["connect_retries"] < 0:
        bad.append(f"connect_retries: expected 0 or more, got {params['connect_retries']}")
    if bad:
        module.fail_json(msg=f"ib_write_bw on {host}: " + "; ".join(bad), errors=bad)
    ports = [t["port"] for t in params["servers"]]
    if len(set(ports)) != len(ports):
        module.fail_json(msg=f"ib_write_bw: two servers on one port: {sorted(ports)}")
    if module.check_mode or not (params["servers"] or params["clients"]):
        module.exit_json(changed=False, started={}, server_errors={}, tests={})
    binary = module.get_bin_path("ib_write_bw")
    missing = None
    if not binary:
        missing = "perftest is not installed on this host (no ib_write_bw on PATH)"
    elif not module.get_bin_path("timeout"):
        missing = "the harness's timeout(1) is missing on this host (coreutils)"
    if missing:
        # Reported per test, so the validation gate can say why each pair did not run (a harness error: perftest.
        # is_harness_failure), instead of failing the host.
        module.exit_json(changed=False, started={},
                         server_errors={s["id"]: missing for s in params["servers"]}, tests={
            c["id"]: {"gbps": None, "peak_gbps": None, "error": missing, "rc": None} for c in params["clients"]})
    started, server_errors = _start_servers(module, binary, params["servers"], params["extra_args"],
                                            params["timeout"], params["server_check_s"])
    tests = {c["id"]: _run_client(module, binary, c, params["extra_args"], params["timeout"], params["connect_retries"])
             for c in params["clients"]}
    module.exit_json(changed=False, started=started, server_errors=server_errors, tests=tests)


if __name__ == "__main__":
    main()
