"""Authentication and validation of hook requests: pure functions, no I/O.

Two request kinds arrive:

- cloud-init ``phone_home`` (cloud-init 22.4 ``cc_phone_home``): a form-encoded POST whose fields
  are ``instance_id``, ``hostname``, ``fqdn`` and ``pub_key_rsa``, ``pub_key_ecdsa``,
  ``pub_key_ed25519`` (``pub_key_dsa`` on old images); cloud-init sends no custom header, so the
  credential travels in the URL (``?token=`` or, with HMAC, ``?sig=``);
- JSON from Cluster API ``preKubeadmCommands``/``postKubeadmCommands`` or an operator:
  ``{"host": ..., "instance_id": ..., "fqdn": ..., "host_keys": {...}, "force": false}``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

#: phone_home form fields holding host keys, and the key type each must carry.
PHONE_HOME_KEYS = {
    "pub_key_rsa": ("ssh-rsa",),
    "pub_key_ecdsa": ("ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521"),
    "pub_key_ed25519": ("ssh-ed25519",),
    "pub_key_dsa": ("ssh-dss",),
}
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
_INSTANCE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_KEY_BODY = re.compile(r"^[A-Za-z0-9+/]+={0,3}$")


class RequestError(ValueError):
    """A request is refused; ``status`` is the HTTP status, the message the reason sent back."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def phone_home_signature(secret: bytes, instance_id: str) -> str:
    """The ``?sig=`` value of a phone_home URL for one machine (HMAC-SHA256 of its instance id)."""
    return hmac.new(secret, b"phone_home:" + instance_id.encode(), hashlib.sha256).hexdigest()


def body_signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Gpunode-Signature`` value of a JSON request: ``sha256=`` HMAC of ``<ts>.<body>``."""
    return "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def authenticate(*, mode: str, secret: bytes, headers: dict[str, str], query: dict[str, str], body: bytes,
                 instance_id: str | None = None, max_skew: int = 300, now: float | None = None) -> None:
    """Raise RequestError(401) unless the request carries the site's credential.

    ``headers`` keys are lower case. ``bearer``: ``Authorization: Bearer <secret>`` or
    ``?token=<secret>``. ``hmac``: ``X-Gpunode-Timestamp`` within ``max_skew`` seconds and
    ``X-Gpunode-Signature`` over it and the body, or (phone_home) ``?sig=`` over the posted
    ``instance_id``. Comparisons are constant-time.
    """
    if mode == "bearer":
        auth = headers.get("authorization", "")
        offered = auth[7:].strip() if auth[:7].lower() == "bearer " else query.get("token", "")
        if not offered:
            raise RequestError(401, "missing credential: send Authorization: Bearer <secret>"
                                    " (or ?token= for phone_home)")
        if not hmac.compare_digest(offered.encode(), secret):
            raise RequestError(401, "invalid credential")
        return
    signature = headers.get("x-gpunode-signature")
    if signature is not None:
        timestamp = headers.get("x-gpunode-timestamp", "")
        try:
            skew = abs((time.time() if now is None else now) - float(timestamp))
        except ValueError:
            raise RequestError(401, "X-Gpunode-Timestamp: missing or not a number") from None
        if skew > max_skew:
            raise RequestError(401, f"X-Gpunode-Timestamp: more than {max_skew}s from the server's clock")
        if not hmac.compare_digest(signature.encode(), body_signature(secret, timestamp, body).encode()):
            raise RequestError(401, "X-Gpunode-Signature: does not match the body")
        return
    sig = query.get("sig")
    if sig is None:
        raise RequestError(401, "missing credential: send X-Gpunode-Signature (or ?sig= for phone_home)")
    if not instance_id:
        raise RequestError(401, "?sig= signs instance_id, which the request does not carry")
    if not hmac.compare_digest(sig.encode(), phone_home_signature(secret, instance_id).encode()):
        raise RequestError(401, "?sig=: does not match instance_id")


def _hostname(value: object, field: str) -> str:
    if not isinstance(value, str) or not _HOSTNAME.match(value.strip().lower()):
        raise RequestError(400, f"{field}: {value!r} is not a valid host name")
    return value.strip().lower()


def _instance_id(value: object) -> str | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str) or not _INSTANCE_ID.match(value):
        raise RequestError(400, f"instance_id: {value!r} is not a valid instance id")
    return value


def _host_key(field: str, value: object) -> str:
    """Validate one OpenSSH public key line; return ``<type> <base64>`` (comment dropped)."""
    parts = value.split() if isinstance(value, str) else []
    if len(parts) < 2 or not _KEY_BODY.match(parts[1]):
        raise RequestError(400, f"{field}: not an OpenSSH public key line")
    allowed = PHONE_HOME_KEYS.get(field)
    if allowed and parts[0] not in allowed:
        raise RequestError(400, f"{field}: key type {parts[0]} does not belong in this field")
    if not allowed and not parts[0].startswith(("ssh-", "ecdsa-sha2-")):
        raise RequestError(400, f"{field}: unknown key type {parts[0]}")
    return f"{parts[0]} {parts[1]}"


def parse_phone_home(form: dict[str, str]) -> dict:
    """Validate a cloud-init phone_home form; return ``{host, instance_id, fqdn, host_keys}``.

    cloud-init posts the literal string ``N/A`` for a field it could not read (a key file that
    does not exist); such fields are ignored.
    """
    fields = {k: v for k, v in form.items() if v not in ("", "N/A")}
    if "hostname" not in fields:
        raise RequestError(400, "hostname: missing (phone_home post: all, or list hostname)")
    host = _hostname(fields["hostname"], "hostname")
    fqdn = _hostname(fields["fqdn"], "fqdn") if "fqdn" in fields else None
    keys = {name: _host_key(name, fields[name]) for name in PHONE_HOME_KEYS if name in fields}
    return {"host": host, "instance_id": _instance_id(fields.get("instance_id")), "fqdn": fqdn,
            "host_keys": keys, "force": False}


def parse_json_request(data: object) -> dict:
    """Validate a JSON request; return the same shape as ``parse_phone_home`` (with ``force``)."""
    if not isinstance(data, dict):
        raise RequestError(400, "body: expected a JSON object")
    unknown = sorted(set(data) - {"host", "instance_id", "fqdn", "host_keys", "force"})
    if unknown:
        raise RequestError(400, f"unknown fields: {', '.join(unknown)}")
    if "host" not in data:
        raise RequestError(400, "host: missing")
    host = _hostname(data["host"], "host")
    fqdn = _hostname(data["fqdn"], "fqdn") if data.get("fqdn") else None
    raw_keys = data.get("host_keys") or {}
    if not isinstance(raw_keys, dict):
        raise RequestError(400, "host_keys: expected an object of name -> public key line")
    keys = {str(k): _host_key(f"host_keys.{k}", v) for k, v in raw_keys.items()}
    force = data.get("force", False)
    if not isinstance(force, bool):
        raise RequestError(400, "force: expected true or false")
    return {"host": host, "instance_id": _instance_id(data.get("instance_id")), "fqdn": fqdn,
            "host_keys": keys, "force": force}


def known_hosts_lines(host: str, fqdn: str | None, host_keys: dict[str, str]) -> list[str]:
    """known_hosts lines for a host's keys, under its short name and FQDN."""
    names = ",".join(dict.fromkeys(n for n in (host, fqdn) if n))
    return [f"{names} {key}" for key in sorted(set(host_keys.values()))]


def merge_known_hosts(existing: str, host: str, fqdn: str | None, host_keys: dict[str, str]) -> str:
    """Replace every line naming ``host`` or ``fqdn`` with the posted keys (a redeploy has new keys)."""
    names = {n for n in (host, fqdn) if n}
    kept = [line for line in existing.splitlines()
            if line.strip() and not (names & set(line.split(" ", 1)[0].split(",")))]
    return "\n".join(kept + known_hosts_lines(host, fqdn, host_keys)) + "\n"
