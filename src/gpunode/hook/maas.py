"""The MAAS API (2.0) calls the hook makes: look a machine up, and tag it once provisioned.

MAAS authenticates API clients with OAuth 1.0 PLAINTEXT signatures built from the API key
``consumer_key:token_key:token_secret`` (MAAS API docs, "API authentication"). The instance id
cloud-init reports on a MAAS-deployed machine is the machine's ``system_id``.
"""

from __future__ import annotations

import secrets
import time

import httpx

#: MAAS states in which a phone_home post is expected (deploying: cloud-init runs before MAAS
#: marks the machine Deployed).
ACCEPTED_STATES = ("Deploying", "Deployed")


class MaasError(RuntimeError):
    """The MAAS API refused or failed; the message names the call."""


def oauth_header(api_key: str) -> str:
    """The ``Authorization`` header value for one request."""
    consumer, token, token_secret = api_key.split(":")
    return (
        'OAuth oauth_version="1.0", oauth_signature_method="PLAINTEXT", '
        f'oauth_consumer_key="{consumer}", oauth_token="{token}", oauth_signature="&{token_secret}", '
        f'oauth_nonce="{secrets.token_hex(8)}", oauth_timestamp="{int(time.time())}"'
    )


class MaasClient:
    """A small synchronous MAAS API client."""

    def __init__(self, url: str, api_key: str, *, timeout: float = 10.0, transport=None):
        self._base = url.rstrip("/") + "/api/2.0"
        self._key = api_key
        self._client = httpx.Client(timeout=timeout, transport=transport)

    def _call(self, method: str, path: str, **kwargs) -> httpx.Response:
        try:
            resp = self._client.request(method, self._base + path,
                                        headers={"Authorization": oauth_header(self._key)}, **kwargs)
        except httpx.HTTPError as exc:
            raise MaasError(f"MAAS {method} {path}: {exc.__class__.__name__}") from exc
        if resp.status_code >= 400:
            raise MaasError(f"MAAS {method} {path}: HTTP {resp.status_code}")
        return resp

    def machine(self, hostname: str) -> dict | None:
        """The machine named ``hostname``, or None."""
        found = self._call("GET", "/machines/", params={"hostname": hostname}).json()
        return found[0] if found else None

    def check(self, host: str, instance_id: str | None) -> dict:
        """Return the machine when MAAS knows ``host`` with this system_id in a deploy state.

        Raises MaasError with the reason otherwise.
        """
        machine = self.machine(host)
        if machine is None:
            raise MaasError(f"MAAS has no machine named {host}")
        if instance_id and machine.get("system_id") != instance_id:
            raise MaasError(f"MAAS machine {host} is {machine.get('system_id')}, not instance_id {instance_id}")
        if machine.get("status_name") not in ACCEPTED_STATES:
            raise MaasError(f"MAAS machine {host} is {machine.get('status_name')}, not Deploying/Deployed")
        return machine

    def tag(self, tag: str, system_ids: list[str]) -> None:
        """Add ``tag`` (created when missing) to the machines."""
        resp = self._client.request("GET", f"{self._base}/tags/{tag}/",
                                    headers={"Authorization": oauth_header(self._key)})
        if resp.status_code == 404:
            self._call("POST", "/tags/", data={"name": tag, "comment": "gpunode: provisioned and validated"})
        elif resp.status_code >= 400:
            raise MaasError(f"MAAS GET /tags/{tag}/: HTTP {resp.status_code}")
        self._call("POST", f"/tags/{tag}/", params={"op": "update_nodes"}, data={"add": system_ids})
