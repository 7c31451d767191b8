"""Cluster API write-back: annotate the Machine of a provisioned host in the management cluster.

The hook knows a host by name and cloud-init instance id. The Cluster API MAAS provider sets a
Machine's ``spec.providerID`` to ``maas:///<zone>/<system_id>``, and the system_id is the
instance id cloud-init reports, so the Machine is the one whose providerID ends in
``/<instance_id>``; failing that, the one whose ``status.nodeRef.name`` is the host. Annotations
are written with a JSON merge patch through the official Kubernetes client.
"""

from __future__ import annotations

from pathlib import Path

#: Annotations the hook writes on a Machine.
ANNOTATION_STATE = "gpunode.mlplatform.io/provisioning"
ANNOTATION_RUN = "gpunode.mlplatform.io/hook-run"
ANNOTATION_VALIDATION = "gpunode.mlplatform.io/validation"


class CapiError(RuntimeError):
    """The management cluster refused or the Machine was not found; the message says which."""


def find_machine(machines: list[dict], host: str, instance_id: str | None) -> dict | None:
    """The Machine object (dict) of a host, or None (a pure function over a Machine list)."""
    if instance_id:
        for m in machines:
            provider_id = (m.get("spec") or {}).get("providerID") or ""
            if provider_id.rstrip("/").rsplit("/", 1)[-1] == instance_id:
                return m
    for m in machines:
        if (((m.get("status") or {}).get("nodeRef")) or {}).get("name") == host:
            return m
    return None


def annotations_for(run_id: int, state: str, summary: dict) -> dict[str, str]:
    """The annotations for a host's finished run."""
    validation = summary.get("validation") or {}
    verdict = (validation.get("verdict") or "unknown") if validation.get("present") else "absent"
    return {ANNOTATION_STATE: state, ANNOTATION_RUN: str(run_id), ANNOTATION_VALIDATION: verdict}


class CapiClient:
    """Lists and annotates ``cluster.x-k8s.io`` Machines with a kubeconfig of the management cluster."""

    API_VERSION = "cluster.x-k8s.io/v1beta1"

    def __init__(self, kubeconfig: Path):
        import kubernetes  # imported here: only a hook with capi_annotate needs it
        from kubernetes.dynamic import DynamicClient

        self._errors = (kubernetes.client.exceptions.ApiException, kubernetes.dynamic.exceptions.DynamicApiError)
        try:
            client = DynamicClient(kubernetes.config.new_client_from_config(str(kubeconfig)))
            self._machines = client.resources.get(api_version=self.API_VERSION, kind="Machine")
        except Exception as exc:  # discovery, TLS, a kubeconfig that does not parse
            raise CapiError(f"management cluster ({kubeconfig}): {exc.__class__.__name__}: {exc}") from exc

    def annotate(self, host: str, instance_id: str | None, annotations: dict[str, str]) -> str:
        """Annotate the host's Machine; return ``namespace/name``."""
        try:
            machines = [m.to_dict() for m in self._machines.get().items]
            machine = find_machine(machines, host, instance_id)
            if machine is None:
                raise CapiError(f"no Machine has providerID .../{instance_id} or nodeRef {host}")
            meta = machine["metadata"]
            self._machines.patch(name=meta["name"], namespace=meta["namespace"],
                                 body={"metadata": {"annotations": annotations}},
                                 content_type="application/merge-patch+json")
        except self._errors as exc:
            raise CapiError(f"Machine of {host}: {exc.__class__.__name__}: {getattr(exc, 'reason', exc)}") from exc
        return f"{meta['namespace']}/{meta['name']}"
