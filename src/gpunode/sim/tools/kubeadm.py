"""Simulated ``kubeadm`` (join, token create, reset, version) against the Kubernetes API emulator.

Stdlib only: it runs inside a simulated host (Debian 12 ``python3``). It talks HTTPS to
``gpunode kapi`` the way the real kubeadm talks to an API server, for the steps our roles rely on:

``join --config FILE``
    Reads the JoinConfiguration (JSON, which is YAML; the role renders it that way), validates it
    as kubeadm v1.33 does for the fields we use (apiVersion v1beta3/v1beta4, discovery by bootstrap
    token with CA pins or by kubeconfig file, token format, taint effects, v1beta4
    ``kubeletExtraArgs`` as a name/value list), runs the preflight checks that matter here
    (``/etc/kubernetes/kubelet.conf`` must not exist, the CRI socket must exist), fetches
    ``kube-public/cluster-info`` and checks the CA's public-key pin, does the kubelet's TLS bootstrap
    (a CSR authenticated by the bootstrap token), refuses when a Ready Node of the same name exists
    (the real kubelet-start check), refuses ``--node-labels`` the kubelet refuses, registers the
    Node with its labels and ``--register-with-taints`` taints using the node credential (so the
    emulator's NodeRestriction applies) -- or, when a (NotReady) Node of that name exists already,
    does what the real kubelet does: it reconciles only its default labels (hostname, os, arch) on
    it and applies neither ``--node-labels`` nor ``--register-with-taints`` (kubernetes/kubernetes
    pkg/kubelet/kubelet_node_status.go, ``tryRegisterWithAPIServer``: on AlreadyExists it reconciles
    the attach-detach annotation, ``updateDefaultLabels`` and extended resources only; the labels and
    taints of the flags are in ``initialNode``, which only a Create sends) --, writes
    ``/var/lib/kubelet/kubeadm-flags.env`` and
    ``/etc/kubernetes/kubelet.conf``, and restarts the kubelet unit when systemd runs.
``token create [--ttl D] [--description S] [--print-join-command]``
    With ``/etc/kubernetes/admin.conf``: a ``bootstrap-token-<id>`` Secret, default TTL 24h.
``config validate --config FILE``
    The same checks as join's, without touching anything.
``reset -f``
    Removes what join wrote (the Node object stays, as with the real reset).
``version [-o short]``

``GPUNODE_SIM_ROOT`` (default ``/``) prefixes every file path, so unit tests run it on the controller.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import re
import secrets
import shutil
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

VERSION = "v1.33.4"
KUBELET_CONF = "etc/kubernetes/kubelet.conf"
ADMIN_CONF = "etc/kubernetes/admin.conf"
FLAGS_ENV = "var/lib/kubelet/kubeadm-flags.env"
PKI_CA = "etc/kubernetes/pki/ca.crt"
TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
HASH_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
FORBIDDEN_LABEL_DOMAINS = ("node-role.kubernetes.io", "node-restriction.kubernetes.io")
ALLOWED_KUBERNETES_IO = (
    "kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os", "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region", "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
)
JOIN_FIELDS = {"apiVersion", "kind", "caCertPath", "discovery", "nodeRegistration", "controlPlane",
               "skipPhases", "patches", "timeouts", "dryRun"}
NODE_REG_FIELDS = {"name", "criSocket", "taints", "kubeletExtraArgs", "ignorePreflightErrors", "imagePullPolicy",
                   "imagePullSerial"}


class KubeadmError(Exception):
    """An error kubeadm prints before exiting 1."""


def _root() -> str:
    return os.environ.get("GPUNODE_SIM_ROOT", "/")


def _path(rel: str) -> str:
    return os.path.join(_root(), rel)


def _write(rel: str, text: str, mode: int = 0o600) -> None:
    path = _path(rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


# --- DER / pins -----------------------------------------------------------------------------------
def _tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(data[pos:pos + n], "big")
        pos += n
    return tag, pos, pos + length


def ca_pin(pem: str) -> str:
    """``sha256:<hex>`` of the certificate's DER SubjectPublicKeyInfo (kubeadm's pin format)."""
    der = ssl.PEM_cert_to_DER_cert(pem)
    _, start, _ = _tlv(der, 0)
    _, pos, end = _tlv(der, start)
    fields = []
    while pos < end:
        tag, _, nxt = _tlv(der, pos)
        fields.append((tag, pos, nxt))
        pos = nxt
    if fields[0][0] == 0xA0:
        fields = fields[1:]
    _, a, b = fields[5]
    return "sha256:" + hashlib.sha256(der[a:b]).hexdigest()


# --- HTTP -----------------------------------------------------------------------------------------
class Client:
    """A minimal HTTPS JSON client for the API server."""

    def __init__(self, server: str, ca_pem: str | None, token: str | None) -> None:
        self.server = server.rstrip("/")
        self.token = token
        if ca_pem:
            self.ctx = ssl.create_default_context(cadata=ca_pem)
        else:  # the first, unverified cluster-info fetch of token discovery (verified by the pin next)
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            self.ctx.check_hostname = False
            self.ctx.verify_mode = ssl.CERT_NONE

    def request(self, method: str, path: str, body: dict | None = None,
                content_type: str = "application/json") -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)  # noqa: S310 https only
        req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as resp:  # noqa: S310 https only
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            try:
                return err.code, json.loads(err.read() or b"{}")
            except ValueError:
                return err.code, {"message": str(err)}
        except (urllib.error.URLError, OSError) as err:
            raise KubeadmError(f"couldn't reach the API server {self.server}: {err}") from err


def _kubeconfig(rel: str) -> tuple[str, str, str]:
    """(server, CA PEM, token) of a kubeconfig written as JSON."""
    try:
        with open(_path(rel), encoding="utf-8") as fh:
            conf = json.load(fh)
    except FileNotFoundError as err:
        raise KubeadmError(f"couldn't load {'/' + rel}: no such file or directory") from err
    except ValueError as err:
        raise KubeadmError(f"couldn't load {'/' + rel}: not a JSON kubeconfig: {err}") from err
    cluster = conf["clusters"][0]["cluster"]
    user = conf["users"][0]["user"]
    return cluster["server"], base64.b64decode(cluster["certificate-authority-data"]).decode(), user.get("token", "")


def _write_kubeconfig(rel: str, server: str, ca_pem: str, user: str, token: str) -> None:
    conf = {"apiVersion": "v1", "kind": "Config", "current-context": f"{user}@kubernetes",
            "clusters": [{"name": "kubernetes", "cluster": {
                "server": server, "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode()}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": f"{user}@kubernetes", "context": {"cluster": "kubernetes", "user": user}}]}
    _write(rel, json.dumps(conf, indent=2) + "\n")


# --- validation -----------------------------------------------------------------------------------
def kubelet_label_errors(labels: dict) -> list[str]:
    """Labels the kubelet refuses in --node-labels (the kubelet's own check at start)."""
    bad = []
    for key in labels:
        prefix = key.rpartition("/")[0]
        ns_kube = prefix.endswith("kubernetes.io") or prefix.endswith("k8s.io")
        allowed = key in ALLOWED_KUBERNETES_IO or any(
            prefix == d or prefix.endswith("." + d) for d in ("kubelet.kubernetes.io", "node.kubernetes.io"))
        if ns_kube and not allowed:
            bad.append(key)
    return sorted(bad)


def validate_join(conf: dict) -> tuple[list[str], list[str]]:
    """(errors, warnings) of a JoinConfiguration, in kubeadm's wording."""
    errors, warnings = [], []
    if conf.get("kind") != "JoinConfiguration":
        errors.append(f'no kind "JoinConfiguration" found in the config file (kind {conf.get("kind")!r})')
        return errors, warnings
    api = conf.get("apiVersion")
    if api not in ("kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta4"):
        errors.append(f'no kind "JoinConfiguration" is registered for version "{api}" in scheme')
        return errors, warnings
    for key in sorted(set(conf) - JOIN_FIELDS):
        warnings.append(f'strict decoding error: unknown field "{key}"')
    disc = conf.get("discovery") or {}
    token_disc, file_disc = disc.get("bootstrapToken"), disc.get("file")
    if bool(token_disc) == bool(file_disc):
        errors.append('discovery.bootstrapToken: Invalid value: "": bootstrapToken or file must be set'
                      if not token_disc else "discovery: Invalid value: both bootstrapToken and file are set")
    if token_disc:
        if not TOKEN_RE.match(token_disc.get("token") or ""):
            errors.append(f'discovery.bootstrapToken.token: Invalid value: "{token_disc.get("token", "")}": '
                          "the bootstrap token is invalid")
        if not token_disc.get("apiServerEndpoint"):
            errors.append('discovery.bootstrapToken.apiServerEndpoint: Invalid value: "": discovery.bootstrapToken.'
                          "apiServerEndpoint or discovery.file must be set")
        hashes = token_disc.get("caCertHashes") or []
        if not hashes and not token_disc.get("unsafeSkipCAVerification"):
            errors.append('discovery.bootstrapToken: Invalid value: "": using token-based discovery without '
                          "caCertHashes can be unsafe. Set unsafeSkipCAVerification as true in your kubeadm config "
                          "file or pass --discovery-token-unsafe-skip-ca-verification flag to continue")
        for h in hashes:
            if not HASH_RE.match(h):
                errors.append(f'discovery.bootstrapToken.caCertHashes: Invalid value: "{h}": invalid hash '
                              '"{h}", expected "sha256:<hex>"')
    if file_disc and not file_disc.get("kubeConfigPath"):
        errors.append('discovery.file.kubeConfigPath: Invalid value: "": kubeConfigPath must be set')
    reg = conf.get("nodeRegistration") or {}
    for key in sorted(set(reg) - NODE_REG_FIELDS):
        warnings.append(f'strict decoding error: unknown field "nodeRegistration.{key}"')
    for n, taint in enumerate(reg.get("taints") or []):
        if not taint.get("key"):
            errors.append(f"nodeRegistration.taints[{n}].key: Required value")
        if taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errors.append(f'nodeRegistration.taints[{n}].effect: Unsupported value: "{taint.get("effect")}": '
                          'supported values: "NoExecute", "NoSchedule", "PreferNoSchedule"')
    extra = reg.get("kubeletExtraArgs")
    if api.endswith("v1beta4") and extra is not None and not isinstance(extra, list):
        errors.append("nodeRegistration.kubeletExtraArgs: in v1beta4 this is a list of {name, value} "
                      "(json: cannot unmarshal object into Go struct field of type []v1beta4.Arg)")
    return errors, warnings


def _extra_args(reg: dict) -> dict:
    extra = reg.get("kubeletExtraArgs") or []
    if isinstance(extra, dict):
        return dict(extra)
    return {a["name"]: a.get("value", "") for a in extra}


def _parse_labels(text: str) -> dict:
    labels = {}
    for item in filter(None, (text or "").split(",")):
        key, _, value = item.partition("=")
        labels[key.strip()] = value.strip()
    return labels


def _ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


# --- commands -------------------------------------------------------------------------------------
def join(config_path: str, node_name_flag: str | None, out, err) -> int:
    try:
        with open(config_path, encoding="utf-8") as fh:
            conf = json.load(fh)
    except FileNotFoundError:
        print(f"unable to read config from {config_path!r}: open {config_path}: no such file or directory", file=err)
        return 1
    except ValueError as exc:
        print(f"unable to decode config from {config_path!r}: the simulated kubeadm reads the JSON form of YAML: "
              f"{exc}", file=err)
        return 1
    errors, warnings = validate_join(conf)
    for w in warnings:
        print(f"W1130 kubeadm join: {w}", file=err)
    if errors:
        print("\n".join(errors), file=err)
        return 1
    reg = conf.get("nodeRegistration") or {}
    node_name = node_name_flag or reg.get("name") or os.uname().nodename
    ignored = set(reg.get("ignorePreflightErrors") or [])
    print("[preflight] Running pre-flight checks", file=out)
    problems = []
    if os.path.exists(_path(KUBELET_CONF)) and "FileAvailable--etc-kubernetes-kubelet.conf" not in ignored:
        problems.append("[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf "
                        "already exists")
    sock = (reg.get("criSocket") or "unix:///run/containerd/containerd.sock").removeprefix("unix://")
    if not os.path.exists(_path(sock.lstrip("/"))) and "CRI" not in ignored:
        problems.append(f"[ERROR CRI]: container runtime is not running: validate service connection: "
                        f'dial unix {sock}: connect: no such file or directory')
    if not shutil.which("kubelet") and _root() == "/" and "KubeletVersion" not in ignored:
        problems.append('[ERROR FileExisting-kubelet]: kubelet not found in system path')
    if problems:
        print("error execution phase preflight: [preflight] Some fatal errors occurred:\n\t" + "\n\t".join(problems)
              + "\n[preflight] If you know what you are doing, you can make a check non-fatal with "
              "`--ignore-preflight-errors=...`", file=err)
        return 1
    disc = conf["discovery"]
    try:
        if disc.get("bootstrapToken"):
            bt = disc["bootstrapToken"]
            anon = Client("https://" + bt["apiServerEndpoint"], None, None)
            code, cm = anon.request("GET", "/api/v1/namespaces/kube-public/configmaps/cluster-info")
            if code != 200:
                raise KubeadmError(f"couldn't validate the identity of the API Server: cluster-info: "
                                   f"{cm.get('message', code)}")
            ci = json.loads(cm["data"]["kubeconfig"])
            cluster = ci["clusters"][0]["cluster"]
            ca_pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
            pin = ca_pin(ca_pem)
            if bt.get("caCertHashes") and pin not in bt["caCertHashes"]:
                raise KubeadmError(f"error execution phase preflight: couldn't validate the identity of the API "
                                   f'Server: cluster CA found in cluster-info ConfigMap is invalid: none of the '
                                   f'public keys "{pin}" are pinned')
            server, boot_token = cluster["server"], bt["token"]
        else:
            server, ca_pem, boot_token = _kubeconfig(disc["file"]["kubeConfigPath"].lstrip("/"))
        print("[kubelet-start] Writing kubelet configuration and starting the kubelet", file=out)
        extra = _extra_args(reg)
        labels = _parse_labels(extra.get("node-labels", ""))
        bad = kubelet_label_errors(labels)
        if bad:
            raise KubeadmError(
                "error execution phase kubelet-start: the kubelet refused to start: failed to validate kubelet "
                f"flags: unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: {bad}\n"
                "--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix "
                "(kubelet.kubernetes.io, node.kubernetes.io) or be in the specifically allowed set "
                f"({', '.join(sorted(ALLOWED_KUBERNETES_IO))})")
        boot = Client(server, ca_pem, boot_token)
        csr_name = f"node-csr-{node_name}-{secrets.token_hex(4)}"
        code, csr = boot.request("POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests", {
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": csr_name},
            "spec": {"signerName": "kubernetes.io/kube-apiserver-client-kubelet", "usages": ["client auth"],
                     "request": base64.b64encode(f"CN=system:node:{node_name}".encode()).decode(),
                     "extra": {"gpunode.sim/node-name": [node_name]}}})
        if code != 201 or not (csr.get("status") or {}).get("certificate"):
            raise KubeadmError(f"error execution phase kubelet-start: the TLS bootstrap failed: "
                               f"{csr.get('message', code)}")
        credential = csr["status"]["certificate"]
        node_client = Client(server, ca_pem, credential)
        code, existing = node_client.request("GET", f"/api/v1/nodes/{node_name}")
        if code == 200 and _ready(existing):
            raise KubeadmError(f'error execution phase kubelet-start: a Node with name "{node_name}" and status '
                               '"Ready" already exists in the cluster. You must delete the existing Node or change '
                               "the name of this new joining Node")
        taints = [{k: t[k] for k in ("key", "value", "effect") if t.get(k) is not None} for t in reg.get("taints")
                  or []]
        flags = [f"--node-labels={extra['node-labels']}"] if extra.get("node-labels") else []
        if taints:
            flags.append("--register-with-taints=" + ",".join(
                f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in taints))
        flags += [f"--{k}={v}" for k, v in sorted(extra.items()) if k != "node-labels"]
        flags.append(f"--container-runtime-endpoint={reg.get('criSocket') or 'unix:///run/containerd/containerd.sock'}")
        _write(FLAGS_ENV, f'KUBELET_KUBEADM_ARGS="{" ".join(flags)}"\n', 0o644)
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node_name, "labels": {
                    "kubernetes.io/hostname": node_name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                    **labels}},
                "spec": {"taints": taints} if taints else {}}
        if code == 200:
            # A NotReady Node of that name (a re-install): the kubelet takes it over as the real one does, setting
            # only its default labels; --node-labels and --register-with-taints are not applied to it.
            defaults = {k: v for k, v in node["metadata"]["labels"].items() if k in DEFAULT_LABELS}
            code, result = node_client.request("PATCH", f"/api/v1/nodes/{node_name}", {
                "metadata": {"labels": defaults}}, "application/strategic-merge-patch+json")
        else:
            code, result = node_client.request("POST", "/api/v1/nodes", node)
        if code not in (200, 201):
            raise KubeadmError(f"error execution phase kubelet-start: unable to register node {node_name!r} with "
                               f"API server: {result.get('message', code)}")
        _write(PKI_CA, ca_pem, 0o644)
        _write_kubeconfig(KUBELET_CONF, server, ca_pem, f"system:node:{node_name}", credential)
    except KubeadmError as exc:
        print(str(exc), file=err)
        return 1
    if _root() == "/" and os.path.isdir("/run/systemd/system"):
        subprocess.run(["systemctl", "restart", "kubelet"], check=False)
    print("\nThis node has joined the cluster:\n* Certificate signing request was sent to apiserver and a response "
          "was received.\n* The Kubelet was informed of the new secure connection details.\n\nRun 'kubectl get "
          "nodes' on the control-plane to see this node join the cluster.", file=out)
    return 0


# The labels a kubelet sets on a Node that exists already (updateDefaultLabels; the zone, region and instance-type
# labels come from a cloud provider, which the simulated hosts have none of).
DEFAULT_LABELS = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os",
                  "beta.kubernetes.io/arch")


def _duration(text: str) -> datetime.timedelta:
    total = 0.0
    for value, unit in re.findall(r"(\d+(?:\.\d+)?)(h|m|s)", text or ""):
        total += float(value) * {"h": 3600, "m": 60, "s": 1}[unit]
    if not re.fullmatch(r"(\d+(\.\d+)?(h|m|s))+", text or ""):
        raise KubeadmError(f'invalid argument "{text}" for "--ttl" flag: time: invalid duration "{text}"')
    return datetime.timedelta(seconds=total)


def token_create(args: list[str], out, err) -> int:
    ttl, description, print_join = "24h0m0s", "", False
    it = iter(args)
    for arg in it:
        if arg.startswith("--ttl"):
            ttl = arg.split("=", 1)[1] if "=" in arg else next(it, "")
        elif arg.startswith("--description"):
            description = arg.split("=", 1)[1] if "=" in arg else next(it, "")
        elif arg == "--print-join-command":
            print_join = True
        elif arg.startswith("--kubeconfig"):
            pass
        else:
            print(f"unknown flag: {arg}", file=err)
            return 1
    try:
        server, ca_pem, token = _kubeconfig(ADMIN_CONF)
        delta = _duration(ttl)
        tid, tsecret = secrets.token_hex(3), secrets.token_hex(8)
        data = {"token-id": tid, "token-secret": tsecret, "usage-bootstrap-authentication": "true",
                "usage-bootstrap-signing": "true",
                "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}
        if delta.total_seconds() > 0:
            expires = datetime.datetime.now(tz=datetime.UTC) + delta
            data["expiration"] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
        if description:
            data["description"] = description
        client = Client(server, ca_pem, token)
        code, result = client.request("POST", "/api/v1/namespaces/kube-system/secrets", {
            "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": f"bootstrap-token-{tid}", "namespace": "kube-system"}, "stringData": data})
        if code != 201:
            raise KubeadmError(f"failed to create or update bootstrap token with name bootstrap-token-{tid}: "
                               f"{result.get('message', code)}")
    except KubeadmError as exc:
        print(str(exc), file=err)
        return 1
    full = f"{tid}.{tsecret}"
    if print_join:
        endpoint = server.removeprefix("https://")
        print(f"kubeadm join {endpoint} --token {full} --discovery-token-ca-cert-hash {ca_pin(ca_pem)} ", file=out)
    else:
        print(full, file=out)
    return 0


def reset(args: list[str], out, err) -> int:
    if "-f" not in args and "--force" not in args:
        print("[reset] Are you sure you want to proceed? [y/N]: error: no input (use -f)", file=err)
        return 1
    for rel in (KUBELET_CONF, FLAGS_ENV, "etc/kubernetes/bootstrap-kubelet.conf", PKI_CA):
        if os.path.exists(_path(rel)):
            os.remove(_path(rel))
    if _root() == "/" and os.path.isdir("/run/systemd/system"):
        subprocess.run(["systemctl", "stop", "kubelet"], check=False)
    print("[reset] Deleted contents of: [/etc/kubernetes/manifests /var/lib/kubelet]", file=out)
    return 0


def main(argv: list[str], out=None, err=None) -> int:
    """``kubeadm`` with ``argv``; prints to out/err (default sys.stdout/sys.stderr), returns the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    if not argv:
        print("Usage:\n  kubeadm [command]\n\nAvailable Commands:\n  join\n  reset\n  token\n  version", file=out)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "version":
        if "-o" in rest and rest[rest.index("-o") + 1:][:1] == ["short"] or "--output=short" in rest:
            print(VERSION, file=out)
        else:
            print(f'kubeadm version: &version.Info{{Major:"1", Minor:"33", GitVersion:"{VERSION}", '
                  'GitTreeState:"clean", GoVersion:"go1.24.5", Compiler:"gc", Platform:"linux/amd64"}', file=out)
        return 0
    if cmd == "join":
        config, name = None, None
        it = iter(rest)
        for arg in it:
            if arg.startswith("--config"):
                config = arg.split("=", 1)[1] if "=" in arg else next(it, None)
            elif arg.startswith("--node-name"):
                name = arg.split("=", 1)[1] if "=" in arg else next(it, None)
            elif arg.startswith("-v") or arg.startswith("--v="):
                continue
            else:
                print(f"the simulated kubeadm joins from --config only; unsupported argument {arg!r}", file=err)
                return 1
        if not config:
            print("the simulated kubeadm joins from --config only", file=err)
            return 1
        return join(config, name, out, err)
    if cmd == "config" and rest[:1] == ["validate"]:
        path = None
        for i, arg in enumerate(rest[1:], start=1):
            if arg.startswith("--config="):
                path = arg.split("=", 1)[1]
            elif arg == "--config" and i + 1 < len(rest):
                path = rest[i + 1]
        if not path:
            print("required flag(s) \"config\" not set", file=err)
            return 1
        try:
            with open(path, encoding="utf-8") as fh:
                conf = json.load(fh)
        except (OSError, ValueError) as exc:
            print(f"unable to read config from {path!r}: {exc}", file=err)
            return 1
        errors, warnings = validate_join(conf)
        for w in warnings:
            print(f"W1130 {w}", file=err)
        extra = _extra_args(conf.get("nodeRegistration") or {}) if not errors else {}
        bad = kubelet_label_errors(_parse_labels(extra.get("node-labels", "")))
        if bad:
            errors.append(f"nodeRegistration.kubeletExtraArgs: node-labels the kubelet refuses: {bad}")
        if errors:
            print("\n".join(errors), file=err)
            return 1
        print("ok", file=out)
        return 0
    if cmd == "token" and rest[:1] == ["create"]:
        return token_create(rest[1:], out, err)
    if cmd == "reset":
        return reset(rest, out, err)
    print(f'unknown command "{" ".join(argv)}" for "kubeadm"', file=err)
    return 1


def run(argv: list[str], tool: str = "kubeadm") -> int:
    """Entry point of the simulated tools' dispatch (``main.main("kubeadm", argv)``)."""
    return main(argv)
