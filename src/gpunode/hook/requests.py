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
import json
import math
import re
import time
from urllib.parse import unquote_plus

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, rsa

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
_PRINTABLE = re.compile(r"^[\x20-\x7e]*$")

#: Limits on what a request may carry; each refusal names the limit it passed.
MAX_FORM_FIELDS = 16
MAX_FIELD_BYTES = 16 * 1024
MAX_JSON_DEPTH = 4
MAX_HOST_KEYS = 8
MAX_KEY_LINE = 16 * 1024
#: RSA host keys: smallest and largest modulus accepted, in bits.
RSA_BITS = (1024, 16384)
#: The key classes (cryptography) each OpenSSH key type name must parse to.
_KEY_CLASSES = {
    "ssh-rsa": rsa.RSAPublicKey,
    "ssh-dss": dsa.DSAPublicKey,
    "ecdsa-sha2-nistp256": ec.EllipticCurvePublicKey,
    "ecdsa-sha2-nistp384": ec.EllipticCurvePublicKey,
    "ecdsa-sha2-nistp521": ec.EllipticCurvePublicKey,
    "ssh-ed25519": ed25519.Ed25519PublicKey,
}


class RequestError(ValueError):
    """A request is refused; ``status`` is the HTTP status, the message the reason sent back."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


#: ``X-Gpunode-Timestamp``: Unix seconds, a plain decimal (``nan``, ``inf``, exponents refused).
_TIMESTAMP = re.compile(r"^[0-9]{1,12}(\.[0-9]{1,9})?$")
#: ``X-Gpunode-Nonce``: 16 to 128 URL-safe characters, e.g. ``openssl rand -hex 16``.
_NONCE = re.compile(r"^[A-Za-z0-9_-]{16,128}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def phone_home_signature(secret: bytes, instance_id: str, hostname: str) -> str:
    """The ``?sig=`` of one machine's phone_home URL: HMAC-SHA256 of its instance id and host name.

    A per-machine credential: it proves that whoever posts holds this machine's user data, and it
    signs the pair, so it cannot be used to speak for another host name or instance id.
    """
    message = b"phone_home:v2:" + instance_id.encode() + b"\n" + hostname.strip().lower().encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def body_signature(secret: bytes, timestamp: str, nonce: str, body: bytes) -> str:
    """The ``X-Gpunode-Signature`` value: ``sha256=`` HMAC of ``<timestamp>.<nonce>.<body>``.

    The body carries host, instance id and host keys, so the signature covers all of them.
    """
    message = timestamp.encode() + b"." + nonce.encode() + b"." + body
    return "sha256=" + hmac.new(secret, message, hashlib.sha256).hexdigest()


class Credential:
    """What a request's credential is, checked as far as it can be before the body is read.

    ``kind``: ``bearer`` (the site secret: proves nothing about which machine posts),
    ``body_signature`` (``X-Gpunode-Signature``: covers host, instance id and keys) or
    ``url_signature`` (phone_home ``?sig=``: covers instance id and host name) or ``operator``
    (``Authorization: Bearer <operator secret>``, a secret no machine holds).

    What a credential may do: every credential may post for a host (its first contact binds the
    host's identity; later posts of the same identity are duplicates). Only ``operator`` may force
    a re-run, post as ``X-Gpunode-Source: operator`` or change a bound host's FQDN; instance id and
    host keys change only with a credential that proves them (``proves``).
    """

    def __init__(self, kind: str, *, signature: str = "", timestamp: str = "", nonce: str = ""):
        self.kind = kind
        self.signature = signature
        self.timestamp = timestamp
        self.nonce = nonce

    @property
    def proves(self) -> frozenset[str]:
        """The identity fields this credential vouches for once verified."""
        return {"body_signature": frozenset({"instance_id", "host_keys"}),
                "url_signature": frozenset({"instance_id"}),
                "operator": frozenset({"instance_id", "host_keys", "fqdn", "force"})}.get(self.kind, frozenset())


def precheck(*, mode: str, secret: bytes, headers: dict[str, str], query: dict[str, str],
             allow_query: bool, max_skew: int = 300, now: float | None = None,
             operator_secret: bytes | None = None) -> Credential:
    """Check the credential before any of the body is read; raise RequestError(401) when it fails.

    ``headers`` keys are lower case. ``bearer``: ``Authorization: Bearer <secret>`` (or, when
    ``allow_query`` — phone_home only — ``?token=<secret>``), verified here in full. ``hmac``:
    ``X-Gpunode-Timestamp`` (finite, within ``max_skew`` seconds), ``X-Gpunode-Nonce`` and
    ``X-Gpunode-Signature`` are checked for shape and time here and verified against the body by
    ``verify``; phone_home may instead carry ``?sig=``. In either mode, ``Authorization: Bearer
    <operator secret>`` is the operator's credential. Comparisons are constant-time.
    """
    auth = headers.get("authorization", "")
    offered = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    if operator_secret and offered and hmac.compare_digest(offered.encode(), operator_secret):
        return Credential("operator")
    if mode == "bearer":
        if not offered and allow_query:
            offered = query.get("token", "")
        if not offered:
            raise RequestError(401, "missing credential: send Authorization: Bearer <secret>"
                                    + (" (or ?token= for phone_home)" if allow_query else ""))
        if not hmac.compare_digest(offered.encode(), secret):
            raise RequestError(401, "invalid credential")
        return Credential("bearer")
    signature = headers.get("x-gpunode-signature")
    if signature is not None:
        timestamp = headers.get("x-gpunode-timestamp", "").strip()
        if not _TIMESTAMP.match(timestamp):
            raise RequestError(401, "X-Gpunode-Timestamp: missing or not a finite number of Unix seconds")
        skew = abs((time.time() if now is None else now) - float(timestamp))
        if not math.isfinite(skew) or skew > max_skew:
            raise RequestError(401, f"X-Gpunode-Timestamp: more than {max_skew}s from the server's clock")
        nonce = headers.get("x-gpunode-nonce", "").strip()
        if not _NONCE.match(nonce):
            raise RequestError(401, "X-Gpunode-Nonce: missing or not 16-128 characters of [A-Za-z0-9_-]")
        if not signature.startswith("sha256=") or not _HEX64.match(signature[7:]):
            raise RequestError(401, "X-Gpunode-Signature: expected sha256=<64 hex digits>")
        return Credential("body_signature", signature=signature, timestamp=timestamp, nonce=nonce)
    sig = query.get("sig") if allow_query else None
    if sig is None:
        raise RequestError(401, "missing credential: send X-Gpunode-Signature"
                                + (" (or ?sig= for phone_home)" if allow_query else ""))
    if not _HEX64.match(sig):
        raise RequestError(401, "?sig=: expected 64 hex digits (gpunode hook sign)")
    return Credential("url_signature", signature=sig)


def verify(credential: Credential, *, secret: bytes, body: bytes, instance_id: str | None = None,
           hostname: str | None = None) -> None:
    """Verify a pre-checked signature against the body (or the posted instance id and host name)."""
    if credential.kind == "body_signature":
        expected = body_signature(secret, credential.timestamp, credential.nonce, body)
        if not hmac.compare_digest(credential.signature.encode(), expected.encode()):
            raise RequestError(401, "X-Gpunode-Signature: does not match timestamp, nonce and body")
    elif credential.kind == "url_signature":
        if not instance_id or not hostname:
            raise RequestError(401, "?sig= signs instance_id and hostname, which the request does not both carry")
        expected = phone_home_signature(secret, instance_id, hostname)
        if not hmac.compare_digest(credential.signature.encode(), expected.encode()):
            raise RequestError(401, "?sig=: does not match instance_id and hostname")


def host_name(value: object, field: str = "host") -> str:
    """The one validation of a host name, for every entry point (HTTP, CLI, scheduled runs).

    Returns the canonical name (stripped, lower case: DNS names are case-insensitive); raises
    RequestError(400) naming the field for anything that is not an RFC 1123 host name (no path
    separators, shell characters, spaces or control characters; at most 253 characters).
    """
    if not isinstance(value, str) or len(value) > 253 or not _HOSTNAME.match(value.strip().lower()):
        shown = value[:64] + "..." if isinstance(value, str) and len(value) > 64 else value
        raise RequestError(400, f"{field}: {shown!r} is not a valid host name")
    return value.strip().lower()



def _instance_id(value: object) -> str | None:
    if value in (None, ""):
        return None
    if isinstance(value, str) and len(value) > 128:
        raise RequestError(400, "instance_id: longer than 128 characters")
    if not isinstance(value, str) or not _INSTANCE_ID.match(value):
        raise RequestError(400, f"instance_id: {value!r} is not a valid instance id")
    return value


def _fqdn(value: object, host: str) -> str:
    """A host's FQDN: a valid name whose first label is the host name (a host speaks for its own names only)."""
    fqdn = host_name(value, "fqdn")
    if fqdn != host and not fqdn.startswith(host + "."):
        raise RequestError(400, f"fqdn: {fqdn} does not belong to host {host} (its first label must be the host name)")
    return fqdn


def _host_key(field: str, value: object) -> str:
    """Parse one OpenSSH public key line with a real SSH key parser; return ``<type> <base64>``.

    The line must be one line of printable ASCII (at most ``MAX_KEY_LINE`` characters); the blob
    must parse (``cryptography``'s ``load_ssh_public_key``) as the type the line names, carry no
    trailing data (it must re-serialize to itself), and an RSA modulus must be within ``RSA_BITS``.
    The comment is dropped.
    """
    if not isinstance(value, str):
        raise RequestError(400, f"{field}: not an OpenSSH public key line")
    if len(value) > MAX_KEY_LINE:
        raise RequestError(400, f"{field}: longer than {MAX_KEY_LINE} characters")
    if not _PRINTABLE.match(value):
        raise RequestError(400, f"{field}: a control character or line break in a public key line")
    parts = value.split()
    if len(parts) < 2 or not _KEY_BODY.match(parts[1]):
        raise RequestError(400, f"{field}: not an OpenSSH public key line")
    allowed = PHONE_HOME_KEYS.get(field)
    if allowed and parts[0] not in allowed:
        raise RequestError(400, f"{field}: key type {parts[0]} does not belong in this field")
    if parts[0] not in _KEY_CLASSES:
        raise RequestError(400, f"{field}: unknown key type {parts[0]}")
    line = f"{parts[0]} {parts[1]}"
    try:
        key = serialization.load_ssh_public_key(line.encode())
    except (ValueError, TypeError, UnicodeError) as exc:
        raise RequestError(400, f"{field}: does not parse as an {parts[0]} key ({exc})") from None
    except Exception as exc:  # cryptography's parser raises other types for some malformed blobs
        raise RequestError(400, f"{field}: does not parse as an {parts[0]} key ({exc.__class__.__name__})") from None
    if not isinstance(key, _KEY_CLASSES[parts[0]]):
        raise RequestError(400, f"{field}: the key is not an {parts[0]} key")
    if isinstance(key, ec.EllipticCurvePublicKey) and parts[0] != f"ecdsa-sha2-nistp{key.curve.key_size}":
        raise RequestError(400, f"{field}: the key's curve is not the one {parts[0]} names")
    if isinstance(key, rsa.RSAPublicKey) and not RSA_BITS[0] <= key.key_size <= RSA_BITS[1]:
        raise RequestError(400, f"{field}: an RSA key of {key.key_size} bits (accepted: {RSA_BITS[0]}-{RSA_BITS[1]})")
    canonical = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    if canonical != line:
        raise RequestError(400, f"{field}: the key blob carries data beyond the {parts[0]} key")
    return line


def parse_form(body: bytes) -> dict[str, str]:
    """A form-encoded body as ``{name: value}``; every field at most once, bounded in count and size.

    RequestError names the limit: more than ``MAX_FORM_FIELDS`` fields (413), a field name
    repeated, a value over ``MAX_FIELD_BYTES``, or a body that is not UTF-8 (400).
    """
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise RequestError(400, "phone_home: the form is not UTF-8") from None
    pairs = [p for p in text.split("&") if p] if text else []
    if len(pairs) > MAX_FORM_FIELDS:
        raise RequestError(413, f"phone_home: more than {MAX_FORM_FIELDS} form fields")
    form: dict[str, str] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            name, value = unquote_plus(name, errors="strict"), unquote_plus(value, errors="strict")
        except UnicodeDecodeError:
            raise RequestError(400, "phone_home: a form field is not UTF-8") from None
        if name in form:
            raise RequestError(400, f"phone_home: form field {name[:64]!r} repeated")
        if len(value) > MAX_FIELD_BYTES:
            raise RequestError(413, f"phone_home: form field {name[:64]!r} longer than {MAX_FIELD_BYTES} bytes")
        form[name] = value
    return form


def _json_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text (strings skipped), read in one pass."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise RequestError(400, f"body: JSON key {key[:64]!r} repeated")
        out[key] = value
    return out


def parse_json(body: bytes) -> object:
    """A JSON body, refused (4xx naming the limit) when nested deeper than ``MAX_JSON_DEPTH`` or a key repeats."""
    if _json_depth(body) > MAX_JSON_DEPTH:
        raise RequestError(400, f"body: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(body or b"null", object_pairs_hook=_no_duplicate_keys)
    except RequestError:
        raise
    except (ValueError, RecursionError):
        raise RequestError(400, "body: not valid JSON") from None


def parse_phone_home(form: dict[str, str]) -> dict:
    """Validate a cloud-init phone_home form; return ``{host, instance_id, fqdn, host_keys}``.

    cloud-init posts the literal string ``N/A`` for a field it could not read (a key file that
    does not exist); such fields are ignored.
    """
    fields = {k: v for k, v in form.items() if v not in ("", "N/A")}
    if "hostname" not in fields:
        raise RequestError(400, "hostname: missing (phone_home post: all, or list hostname)")
    host = host_name(fields["hostname"], "hostname")
    fqdn = _fqdn(fields["fqdn"], host) if "fqdn" in fields else None
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
    host = host_name(data["host"], "host")
    fqdn = _fqdn(data["fqdn"], host) if data.get("fqdn") else None
    raw_keys = data.get("host_keys") or {}
    if not isinstance(raw_keys, dict):
        raise RequestError(400, "host_keys: expected an object of name -> public key line")
    if len(raw_keys) > MAX_HOST_KEYS:
        raise RequestError(400, f"host_keys: more than {MAX_HOST_KEYS} keys")
    for name in raw_keys:
        if not re.match(r"^[a-z0-9_-]{1,32}$", name):
            raise RequestError(400, f"host_keys: key name {name[:40]!r} is not 1-32 characters of [a-z0-9_-]")
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
