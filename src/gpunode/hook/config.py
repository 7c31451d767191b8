"""Settings of the hook service, from a YAML file and command-line overrides.

The shared secret is never a setting value: the settings name the file (``secret_file``) or the
environment variable (``secret_env``) it is read from, so a settings file can be shown or logged.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from pathlib import Path

import yaml

#: Environment variable the secret is read from when no secret file is given.
DEFAULT_SECRET_ENV = "GPUNODE_HOOK_SECRET"  # noqa: S105 - the variable's name, not a secret
#: Environment variable the operator's secret is read from when no operator secret file is given.
DEFAULT_OPERATOR_SECRET_ENV = "GPUNODE_HOOK_OPERATOR_SECRET"  # noqa: S105 - a name, not a secret


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names it."""


@dataclasses.dataclass
class HookConfig:
    """Everything the service, the worker and ``gpunode hook run``/``status`` need."""

    state_dir: Path = Path("/var/lib/gpunode-hook")
    listen_host: str = "127.0.0.1"
    listen_port: int = 18080
    #: ``bearer``: ``Authorization: Bearer <secret>`` (or ``?token=`` for phone_home, which
    #: cannot send headers); ``hmac``: ``X-Gpunode-Signature: sha256=<hex>`` over
    #: ``<X-Gpunode-Timestamp>.<X-Gpunode-Nonce>.<body>`` (or, for phone_home, ``?sig=`` = the
    #: per-machine HMAC of instance id and host name, ``gpunode hook sign``).
    auth: str = "bearer"
    secret_file: Path | None = None
    secret_env: str = DEFAULT_SECRET_ENV
    #: ``hmac``: seconds a signed request's timestamp may be off; its nonce is kept twice as long.
    hmac_max_skew: int = 300
    #: TLS: a PEM certificate (chain) and its private key, served by uvicorn. Without them the
    #: service speaks plain HTTP, and warns at start unless it listens on loopback only.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    #: The operator's credential (``Authorization: Bearer <operator secret>``): needed to force a
    #: re-run, to post as ``X-Gpunode-Source: operator`` or to change a bound host's FQDN. Like the
    #: site secret it is never a setting value: a file, or an environment variable. Unset: nobody
    #: can do those over HTTP (``gpunode hook run``/``forget`` on the service's machine still can).
    operator_secret_file: Path | None = None
    operator_secret_env: str = DEFAULT_OPERATOR_SECRET_ENV
    #: Requests handled at once (headers received, answer not yet sent); 503 beyond it.
    max_concurrent_requests: int = 64
    #: Open connections in all; a connection beyond it is answered 503 and closed.
    max_connections: int = 512
    #: Open connections from one peer address; a connection beyond it is answered 429 and closed.
    max_connections_per_peer: int = 16
    #: Seconds a client has to send a request's headers (from connecting, or from the previous
    #: answer on a kept-alive connection); then 408 and the connection is closed.
    header_timeout: float = 10.0
    #: Seconds a client has to send a request's body once its headers arrived; then 408.
    body_timeout: float = 30.0
    #: Proxies whose ``X-Forwarded-For``/``X-Forwarded-Proto`` are believed (addresses or
    #: networks); empty: forwarded headers are ignored and the peer is the socket's address.
    trusted_proxies: list[str] = dataclasses.field(default_factory=list)
    # The pipeline.
    project_dir: Path = Path(".")
    playbook: str = "playbooks/site.yml"
    inventory: str = "inventories/example/hosts.yml"
    #: A vars file with the run's own secrets (join tokens, ...), passed as ``-e @file``: only its
    #: path reaches ansible-runner's artifacts, never its content.
    run_secrets_file: Path | None = None
    #: Which name a host has in the inventory: ``hostname`` as posted, or its ``fqdn`` (the
    #: maas.maas.inventory plugin names machines by FQDN).
    limit_by: str = "hostname"
    #: argv run before every run, with the service's full environment (e.g. MAAS_* credentials
    #: for ``ansible-inventory -i maas.yml --list --yaml --output <inventory>``), so that
    #: credentials never enter a run's environment (ansible-runner writes it into artifacts).
    inventory_refresh_command: list[str] | None = None
    #: Plain (non-secret) environment for the runs, e.g. ANSIBLE_CONFIG.
    run_env: dict[str, str] = dataclasses.field(default_factory=dict)
    # The worker.
    workers: int = 1
    batch_window: float = 2.0
    max_batch: int = 32
    run_timeout: int = 7200
    idle_timeout: int = 1800
    max_attempts: int = 3
    retry_delay: float = 60.0
    keep_artifacts: int = 20
    validation_path: str = "/var/lib/gpunode/validation.json"
    # MAAS.
    maas_url: str | None = None
    maas_api_key_file: Path | None = None
    maas_check: bool = False
    maas_tag: str | None = None
    # Cluster API: annotate each host's Machine in the management cluster once its run finished.
    capi_annotate: bool = False
    capi_kubeconfig: Path | None = None
    #: Day two: revalidate (and with ``remediate: true`` repair) the provisioned hosts on a schedule:
    #: ``{interval, remediate, playbook, batch, max_unavailable, max_attempts, hosts, extra_vars}``
    #: (gpunode/hook/revalidate.py). None: no schedule.
    revalidate: dict | None = None

    def secret(self) -> bytes:
        """The shared secret (file first, then the environment); raise when there is none."""
        if self.secret_file is not None:
            try:
                value = Path(self.secret_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(f"secret_file {self.secret_file}: {exc.strerror}") from exc
        else:
            value = os.environ.get(self.secret_env, "").strip()
        if len(value) < 16:
            where = f"secret_file {self.secret_file}" if self.secret_file else f"${self.secret_env}"
            raise ConfigError(f"{where}: the hook secret must be at least 16 characters")
        return value.encode()

    def operator_secret(self) -> bytes | None:
        """The operator's secret (file first, then the environment), or None when none is set."""
        if self.operator_secret_file is not None:
            try:
                value = Path(self.operator_secret_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(f"operator_secret_file {self.operator_secret_file}: {exc.strerror}") from exc
            where = f"operator_secret_file {self.operator_secret_file}"
        else:
            value = os.environ.get(self.operator_secret_env, "").strip()
            where = f"${self.operator_secret_env}"
            if not value:
                return None
        if len(value) < 16:
            raise ConfigError(f"{where}: the operator secret must be at least 16 characters")
        if value.encode() == self.secret():
            raise ConfigError(f"{where}: the operator secret must differ from the hook secret the machines hold")
        return value.encode()

    def maas_api_key(self) -> str:
        """The MAAS API key ``consumer:token:secret`` from ``maas_api_key_file``."""
        if self.maas_api_key_file is None:
            raise ConfigError("maas_api_key_file: required when maas_check or maas_tag is set")
        value = Path(self.maas_api_key_file).read_text().strip()
        if value.count(":") != 2:
            raise ConfigError(f"maas_api_key_file {self.maas_api_key_file}: expected consumer:token:secret")
        return value

    def validate(self) -> HookConfig:
        """Check the settings that have no safe default; return self."""
        if self.auth not in ("bearer", "hmac"):
            raise ConfigError(f"auth: {self.auth!r} is not one of bearer, hmac")
        if self.limit_by not in ("hostname", "fqdn"):
            raise ConfigError(f"limit_by: {self.limit_by!r} is not one of hostname, fqdn")
        if (self.maas_check or self.maas_tag) and not self.maas_url:
            raise ConfigError("maas_url: required when maas_check or maas_tag is set")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError("tls_cert_file, tls_key_file: give both (a PEM certificate and its key) or neither")
        for name in ("tls_cert_file", "tls_key_file"):
            value = getattr(self, name)
            if value is not None and not Path(value).is_file():
                raise ConfigError(f"{name} {value}: no such file")
        if self.capi_annotate and not self.capi_kubeconfig:
            raise ConfigError("capi_kubeconfig: required when capi_annotate is set")
        for name in ("workers", "max_batch", "max_attempts", "run_timeout", "idle_timeout", "keep_artifacts",
                     "max_concurrent_requests", "hmac_max_skew", "max_connections", "max_connections_per_peer"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name}: must be at least 1")
        for name in ("header_timeout", "body_timeout"):
            if not 0 < float(getattr(self, name)) <= 600:
                raise ConfigError(f"{name}: must be more than 0 and at most 600 seconds")
        if not isinstance(self.trusted_proxies, list):
            raise ConfigError("trusted_proxies: expected a list of addresses or networks")
        for entry in self.trusted_proxies:
            try:
                ipaddress.ip_network(str(entry), strict=False)
            except ValueError:
                raise ConfigError(f"trusted_proxies: {entry!r} is not an address or network") from None
        from gpunode.hook.revalidate import settings  # noqa: PLC0415 - revalidate.py imports this module

        settings(self)
        self.secret()
        self.operator_secret()
        return self

    @property
    def db_path(self) -> Path:
        return Path(self.state_dir) / "hook.db"

    @property
    def known_hosts(self) -> Path:
        return Path(self.state_dir) / "known_hosts"

    @property
    def results_dir(self) -> Path:
        return Path(self.state_dir) / "results"

    @property
    def artifacts_dir(self) -> Path:
        return Path(self.state_dir) / "artifacts"


_PATHS = {"state_dir", "secret_file", "operator_secret_file", "project_dir",
          "run_secrets_file", "maas_api_key_file", "capi_kubeconfig",
          "tls_cert_file", "tls_key_file"}


def load_config(path: Path | None = None, **overrides) -> HookConfig:
    """Read a YAML settings file (keys = HookConfig fields) and apply non-None overrides."""
    data: dict = {}
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"{path}: {exc.strerror}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of settings")
    data.update({k: v for k, v in overrides.items() if v is not None})
    fields = {f.name for f in dataclasses.fields(HookConfig)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ConfigError(f"unknown settings: {', '.join(unknown)}")
    for key in _PATHS & set(data):
        if data[key] is not None:
            data[key] = Path(data[key])
    return HookConfig(**data)
