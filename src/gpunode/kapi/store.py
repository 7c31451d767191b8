"""The object store of the Kubernetes API emulator: resources, objects, patches, selectors.

Pure Python, no HTTP: ``server.py`` maps requests onto these methods, tests call them directly.
Errors are :class:`ApiError` carrying the HTTP code and the ``reason`` of a Kubernetes ``Status``.

What it does as the real API server does (the subset kubernetes.core, kubeadm and kubelet use):
resourceVersion on every write and optimistic concurrency on PUT; uid, creationTimestamp,
generation (bumped when anything but metadata/status changes); namespaced objects need an
existing Namespace; the ``status`` subresource (writes to the main resource keep the old status,
writes to ``/status`` change only the status); JSON patch (RFC 6902, the ``jsonpatch`` library; a
failed ``test`` is 422), JSON merge patch (RFC 7386) and strategic merge
patch (maps merge, ``null`` deletes, lists with a patch merge key — taints, conditions,
addresses — merge by that key) on built-in kinds, and ``415 UnsupportedMediaType`` for strategic
merge on custom resources, as the real server answers; CRDs make their group/versions
discoverable and their objects are validated against the version's ``openAPIV3Schema``;
``labelSelector`` (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``) and
``fieldSelector`` on ``metadata.name``/``metadata.namespace`` (and ``spec.nodeName`` for Pods, as
``kubectl drain`` and ``kubernetes.core.k8s_drain`` list a node's pods); ``dryRun=All``; Pods with the
``eviction`` subresource (the pod is deleted at once: no PodDisruptionBudget, no kubelet).

Not emulated: watches, server-side apply, JSON patch, admission webhooks, pruning of unknown
fields, CEL validation rules, garbage collection by owner references.
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
import os
import re
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import jsonschema


class ApiError(Exception):
    """A request the API server refuses: HTTP ``code`` and the Status ``reason``."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def status(self) -> dict[str, Any]:
        """The ``Status`` object the real API server returns for this error."""
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


@dataclass(frozen=True)
class Resource:
    """One REST resource of one group/version."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    custom: bool = False

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def discovery(self) -> list[dict[str, Any]]:
        """The APIResource entries (the resource and its subresources) for discovery."""
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        entry = {"name": self.plural, "singularName": self.singular or self.kind.lower(),
                 "namespaced": self.namespaced, "kind": self.kind, "verbs": verbs}
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        out = [entry]
        if self.status_subresource:
            out.append({"name": f"{self.plural}/status", "singularName": "", "namespaced": self.namespaced,
                        "kind": self.kind, "verbs": ["get", "patch", "update"]})
        return out


BUILTIN_RESOURCES = (
    Resource("", "v1", "namespaces", "Namespace", False, "namespace", ("ns",), status_subresource=True),
    Resource("", "v1", "nodes", "Node", False, "node", ("no",), status_subresource=True),
    Resource("", "v1", "pods", "Pod", True, "pod", ("po",), status_subresource=True),
    Resource("", "v1", "configmaps", "ConfigMap", True, "configmap", ("cm",)),
    Resource("", "v1", "secrets", "Secret", True, "secret"),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True, "serviceaccount", ("sa",)),
    Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
             "customresourcedefinition", ("crd", "crds"), status_subresource=True),
    Resource("certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest", False,
             "certificatesigningrequest", ("csr",), status_subresource=True),
)

INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

# Strategic merge patch: list fields that merge by a key instead of being replaced
# (patchStrategy=merge, patchMergeKey=… in k8s.io/api), for the kinds the emulator serves.
_MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("spec", "taints"): "key",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("metadata", "ownerReferences"): "uid",
}

_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge_patch(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Strategic merge patch for the built-in kinds served here (see ``_MERGE_KEYS``)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        sub = (*path, key)
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and sub in _MERGE_KEYS and isinstance(out.get(key), list):
            mkey = _MERGE_KEYS[sub]
            merged = [copy.deepcopy(i) for i in out[key]]
            for item in value:
                if not isinstance(item, dict) or mkey not in item:
                    raise ApiError(422, "Invalid", f"{'.'.join(sub)}: every item needs the merge key {mkey!r}")
                idx = next((n for n, old in enumerate(merged) if old.get(mkey) == item[mkey]), None)
                if item.get("$patch") == "delete":
                    if idx is not None:
                        merged.pop(idx)
                elif idx is None:
                    merged.append(copy.deepcopy(item))
                else:
                    merged[idx] = strategic_merge_patch(merged[idx], item, sub)
            out[key] = merged
        else:
            out[key] = strategic_merge_patch(out.get(key), value, sub)
    return out


def parse_label_selector(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """Parse a labelSelector string into (key, op, values) requirements; raise ApiError if bad."""
    reqs: list[tuple[str, str, tuple[str, ...]]] = []
    for part in re.findall(r"(?:[^,(]|\([^)]*\))+", text or ""):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\S+?)\s+(in|notin)\s+\(([^)]*)\)", part)
        if m:
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append((m.group(1), m.group(2), values))
            continue
        m = re.fullmatch(r"(\S+?)\s*(==|!=|=)\s*(\S*)", part)
        if m:
            reqs.append((m.group(1), "!=" if m.group(2) == "!=" else "=", (m.group(3),)))
        elif part.startswith("!"):
            reqs.append((part[1:].strip(), "!", ()))
        elif _LABEL_KEY.match(part):
            reqs.append((part, "exists", ()))
        else:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {part!r}")
    return reqs


def selector_matches(reqs: list[tuple[str, str, tuple[str, ...]]], labels: dict[str, str]) -> bool:
    """Whether labels satisfy every requirement."""
    for key, op, values in reqs:
        present = key in labels
        if (op == "=" and labels.get(key) != values[0]) or (op == "!=" and present and labels[key] == values[0]):
            return False
        if (op == "in" and labels.get(key) not in values) or (op == "notin" and present and labels[key] in values):
            return False
        if (op == "exists" and not present) or (op == "!" and present):
            return False
    return True


def _validate_metadata(obj: dict[str, Any]) -> None:
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name or not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        raise ApiError(422, "Invalid", f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain "
                       "is required")
    for what in ("labels", "annotations"):
        for key, value in (meta.get(what) or {}).items():
            if not _LABEL_KEY.match(key) or len(key.split("/")[-1]) > 63:
                raise ApiError(422, "Invalid", f"metadata.{what}: Invalid value: {key!r}: name part must consist "
                               "of alphanumeric characters, '-', '_' or '.'")
            if not isinstance(value, str):
                raise ApiError(400, "BadRequest", f"metadata.{what}.{key}: must be a string")
            if what == "labels" and (len(value) > 63 or not _LABEL_VALUE.match(value)):
                raise ApiError(422, "Invalid", f"metadata.labels: Invalid value: {value!r}: a valid label value "
                               "must be 63 characters or less and alphanumeric with '-', '_' or '.' inside")


class Store:
    """Resources and objects of one emulated cluster, optionally persisted to ``<state_dir>/objects.json``."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir = state_dir
        self._lock = threading.RLock()
        self._rv = 0
        self._objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self._resources: list[Resource] = list(BUILTIN_RESOURCES)
        if state_dir and (state_dir / "objects.json").exists():
            data = json.loads((state_dir / "objects.json").read_text())
            self._rv = data["resourceVersion"]
            for obj in data["objects"]:
                res = self.resource_for(obj["apiVersion"], obj["kind"])
                self._objects[self._key(res, obj)] = obj
                if res.plural == "customresourcedefinitions":
                    self._register_crd(obj)
        for ns in INITIAL_NAMESPACES:
            if ("", "namespaces", "", ns) not in self._objects:
                self.create(self.resource("", "v1", "namespaces"), None,
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # --- resources -------------------------------------------------------------------------------
    def resources(self) -> list[Resource]:
        with self._lock:
            return list(self._resources)

    def resource(self, group: str, version: str, plural: str) -> Resource:
        for res in self.resources():
            if (res.group, res.version, res.plural) == (group, version, plural):
                return res
        gv = f"{group}/{version}" if group else version
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural}.{gv})")

    def resource_for(self, api_version: str, kind: str) -> Resource:
        group, _, version = api_version.rpartition("/")
        for res in self.resources():
            if (res.group, res.version, res.kind) == (group, version, kind):
                return res
        raise ApiError(404, "NotFound", f"no matches for kind {kind!r} in version {api_version!r}")

    def _register_crd(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        names = spec["names"]
        self._resources = [r for r in self._resources
                           if not (r.custom and r.group == spec["group"] and r.plural == names["plural"])]
        for ver in spec.get("versions", []):
            if not ver.get("served", True):
                continue
            self._resources.append(Resource(
                spec["group"], ver["name"], names["plural"], names["kind"], spec.get("scope") == "Namespaced",
                names.get("singular", names["kind"].lower()), tuple(names.get("shortNames", [])),
                status_subresource="status" in (ver.get("subresources") or {}),
                schema=(ver.get("schema") or {}).get("openAPIV3Schema"), custom=True))

    # --- objects ---------------------------------------------------------------------------------
    @staticmethod
    def _key(res: Resource, obj: dict[str, Any]) -> tuple[str, str, str, str]:
        meta = obj.get("metadata") or {}
        return (res.group, res.plural, meta.get("namespace", "") if res.namespaced else "", meta.get("name", ""))

    def _check_namespace(self, res: Resource, namespace: str | None) -> None:
        if res.namespaced:
            if not namespace:
                raise ApiError(400, "BadRequest", f"{res.plural} is namespaced: a namespace is required")
            if ("", "namespaces", "", namespace) not in self._objects:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')

    def _validate(self, res: Resource, obj: dict[str, Any]) -> None:
        if obj.get("kind") != res.kind or obj.get("apiVersion") != res.group_version:
            raise ApiError(400, "BadRequest", f"the object is {obj.get('apiVersion')}/{obj.get('kind')}, "
                           f"the URL is {res.group_version}/{res.kind}")
        _validate_metadata(obj)
        if res.schema:
            body = {k: v for k, v in obj.items() if k not in ("metadata",)}
            schema = {k: v for k, v in res.schema.items() if k != "properties"}
            schema["properties"] = {k: v for k, v in res.schema.get("properties", {}).items() if k != "metadata"}
            errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(body), key=lambda e: list(e.path))
            if errors:
                detail = "; ".join(f"{'.'.join(str(p) for p in e.path) or '<root>'}: {e.message}" for e in errors[:5])
                raise ApiError(422, "Invalid", f'{res.kind}.{res.group} "{obj["metadata"]["name"]}" is invalid: '
                               f"{detail}")
        if res.plural == "customresourcedefinitions":
            spec = obj.get("spec") or {}
            names = spec.get("names") or {}
            if obj["metadata"]["name"] != f"{names.get('plural')}.{spec.get('group')}":
                raise ApiError(422, "Invalid", "metadata.name must be spec.names.plural+'.'+spec.group")

    @staticmethod
    def _normalize(res: Resource, obj: dict[str, Any]) -> None:
        """What the real server does on write: Secret ``stringData`` is folded into base64 ``data``."""
        if res.plural == "secrets" and obj.get("stringData"):
            data = obj.setdefault("data", {})
            for key, value in obj.pop("stringData").items():
                data[key] = base64.b64encode(str(value).encode()).decode()

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _save(self) -> None:
        if not self.state_dir:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        data = {"resourceVersion": self._rv, "objects": list(self._objects.values())}
        fd, tmp = tempfile.mkstemp(dir=self.state_dir, prefix=".objects.")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, self.state_dir / "objects.json")

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        with self._lock:
            obj = self._objects.get((res.group, res.plural, namespace or "" if res.namespaced else "", name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{res.plural}{"." + res.group if res.group else ""} "{name}" '
                               "not found")
            return copy.deepcopy(obj)

    def list(self, res: Resource, namespace: str | None, label_selector: str = "",
             field_selector: str = "") -> dict[str, Any]:
        reqs = parse_label_selector(label_selector)
        fields = {}
        supported = ("metadata.name", "metadata.namespace") + (("spec.nodeName",) if res.plural == "pods" else ())
        for part in filter(None, (field_selector or "").split(",")):
            key, _, value = part.partition("=")
            key = key.rstrip("=")
            if key not in supported:
                raise ApiError(400, "BadRequest", f'field label not supported: {key}')
            fields[key] = value.lstrip("=")
        with self._lock:
            items = []
            for (group, plural, ns, name), obj in sorted(self._objects.items()):
                if (group, plural) != (res.group, res.plural) or (namespace and ns != namespace):
                    continue
                if fields.get("metadata.name", name) != name or fields.get("metadata.namespace", ns) != ns:
                    continue
                if "spec.nodeName" in fields and (obj.get("spec") or {}).get("nodeName", "") != fields["spec.nodeName"]:
                    continue
                if selector_matches(reqs, (obj.get("metadata") or {}).get("labels") or {}):
                    items.append(copy.deepcopy(obj))
            return {"kind": f"{res.kind}List", "apiVersion": res.group_version,
                    "metadata": {"resourceVersion": str(self._rv)}, "items": items}

    def create(self, res: Resource, namespace: str | None, obj: dict[str, Any], dry_run: bool = False
               ) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise ApiError(400, "BadRequest", "the namespace of the object does not match the URL")
            meta["namespace"] = namespace or meta.get("namespace")
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        self._normalize(res, obj)
        with self._lock:
            self._check_namespace(res, meta.get("namespace"))
            self._validate(res, obj)
            key = self._key(res, obj)
            if key in self._objects:
                raise ApiError(409, "AlreadyExists",
                               f'{res.plural}{"." + res.group if res.group else ""} "{meta["name"]}" already exists')
            if res.plural == "namespaces":
                obj.setdefault("status", {"phase": "Active"})
                obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now())
            meta.setdefault("generation", 1)
            if dry_run:
                meta["resourceVersion"] = str(self._rv)
                return obj
            meta["resourceVersion"] = self._next_rv()
            self._objects[key] = obj
            if res.plural == "customresourcedefinitions":
                self._register_crd(obj)
                obj["status"] = {"acceptedNames": obj["spec"]["names"],
                                 "conditions": [{"type": "Established", "status": "True",
                                                 "lastTransitionTime": _now(), "reason": "InitialNamesAccepted",
                                                 "message": "the initial names have been accepted"}]}
            if res.plural == "certificatesigningrequests":
                self._on_csr(obj)
            self._save()
            return copy.deepcopy(obj)

    def _store_update(self, res: Resource, namespace: str | None, name: str, new: dict[str, Any],
                      subresource: str | None, dry_run: bool, check_rv: bool) -> dict[str, Any]:
        with self._lock:
            old = self.get(res, namespace, name)
            new = copy.deepcopy(new)
            new.setdefault("apiVersion", old["apiVersion"])
            new.setdefault("kind", old["kind"])
            meta = new.setdefault("metadata", {})
            if meta.get("name", name) != name:
                raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
            rv = meta.get("resourceVersion")
            if check_rv and rv and rv != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.plural} "{name}": the object '
                               "has been modified; please apply your changes to the latest version and try again")
            if subresource == "status":
                new = {**old, "status": new.get("status")}
                if new["status"] is None:
                    new.pop("status")
            elif res.status_subresource:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            for fixed in ("uid", "creationTimestamp", "generation", "resourceVersion", "namespace"):
                if fixed in old["metadata"]:
                    new["metadata"][fixed] = old["metadata"][fixed]
            self._normalize(res, new)
            self._validate(res, new)
            strip = ("metadata", "status")
            if {k: v for k, v in new.items() if k not in strip} != {k: v for k, v in old.items() if k not in strip}:
                new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            if new == old or dry_run:
                return new
            new["metadata"]["resourceVersion"] = self._next_rv()
            self._objects[self._key(res, new)] = new
            if res.plural == "customresourcedefinitions":
                self._register_crd(new)
            self._save()
            return copy.deepcopy(new)

    def replace(self, res: Resource, namespace: str | None, name: str, obj: dict[str, Any],
                subresource: str | None = None, dry_run: bool = False) -> dict[str, Any]:
        return self._store_update(res, namespace, name, obj, subresource, dry_run, check_rv=True)

    def patch(self, res: Resource, namespace: str | None, name: str, patch: Any, content_type: str,
              subresource: str | None = None, dry_run: bool = False) -> dict[str, Any]:
        ctype = content_type.split(";")[0].strip()
        if ctype == "application/json-patch+json":
            if not isinstance(patch, list):
                raise ApiError(400, "BadRequest", "a JSON patch (RFC 6902) must be a list of operations")
        elif not isinstance(patch, dict):
            raise ApiError(400, "BadRequest", "the patch must be a JSON object")
        with self._lock:
            old = self.get(res, namespace, name)
            if ctype == "application/json-patch+json":
                try:
                    new = jsonpatch.apply_patch(old, patch)
                except jsonpatch.JsonPatchTestFailed as exc:
                    raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                                   f"request: {exc}") from None
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                    raise ApiError(422, "Invalid", f"the JSON patch cannot be applied: {exc}") from None
            elif ctype == "application/merge-patch+json":
                new = merge_patch(old, patch)
            elif ctype == "application/strategic-merge-patch+json":
                if res.custom:
                    raise ApiError(415, "UnsupportedMediaType",
                                   f"the body of the request was in an unknown format - accepted media types "
                                   f"include: application/json-patch+json, application/merge-patch+json, "
                                   f"application/apply-patch+yaml (strategic merge patch is not supported for "
                                   f"custom resource {res.plural}.{res.group})")
                new = strategic_merge_patch(old, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType", f"patch type {ctype!r} is not emulated; use "
                               "application/json-patch+json, application/merge-patch+json or "
                               "application/strategic-merge-patch+json")
            return self._store_update(res, namespace, name, new, subresource, dry_run, check_rv=False)

    def delete(self, res: Resource, namespace: str | None, name: str, dry_run: bool = False) -> dict[str, Any]:
        with self._lock:
            obj = self.get(res, namespace, name)
            if dry_run:
                return obj
            del self._objects[self._key(res, obj)]
            if res.plural == "namespaces":
                for key in [k for k in self._objects if k[2] == name and k[1] != "namespaces"]:
                    del self._objects[key]
            if res.plural == "customresourcedefinitions":
                spec = obj["spec"]
                self._resources = [r for r in self._resources if not (r.custom and r.group == spec["group"]
                                                                      and r.plural == spec["names"]["plural"])]
                for key in [k for k in self._objects if (k[0], k[1]) == (spec["group"], spec["names"]["plural"])]:
                    del self._objects[key]
            self._save()
            return obj

    def evict(self, res: Resource, namespace: str | None, name: str, eviction: Any, dry_run: bool = False
              ) -> dict[str, Any]:
        """``POST pods/<name>/eviction`` (policy/v1 Eviction): the pod is deleted at once. No PodDisruptionBudget
        is emulated, and no kubelet: the pod does not linger in Terminating."""
        if res.plural != "pods":
            raise ApiError(404, "NotFound", f"{res.plural} have no eviction subresource")
        # The Python client sends an Eviction without apiVersion/kind, which the real server defaults.
        if not isinstance(eviction, dict) or eviction.get("kind", "Eviction") != "Eviction":
            raise ApiError(400, "BadRequest", "the body must be a policy/v1 Eviction")
        meta = eviction.get("metadata") or {}
        if meta.get("name", name) != name or meta.get("namespace", namespace) != namespace:
            raise ApiError(400, "BadRequest", "the name or namespace of the Eviction does not match the pod")
        self.delete(res, namespace, name, dry_run=dry_run)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}

    # --- the TLS-bootstrap stand-in ----------------------------------------------------------------
    def _on_csr(self, csr: dict[str, Any]) -> None:
        """Approve a kubelet client CSR at once (what kube-controller-manager's csrapprover does for
        bootstrap tokens) and issue a node credential: the emulator's stand-in for a client cert."""
        spec = csr.get("spec") or {}
        if spec.get("signerName") != "kubernetes.io/kube-apiserver-client-kubelet":
            return
        node = spec.get("extra", {}).get("gpunode.sim/node-name", [""])[0] or csr["metadata"]["name"]
        token = f"node:{node}:{uuid.uuid4().hex}"
        csr["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved",
                                         "message": "Auto approving kubelet client certificate after "
                                                    "SubjectAccessReview.", "lastUpdateTime": _now()}],
                         "certificate": token}

    def node_for_credential(self, credential: str) -> str | None:
        """The Node name a credential issued through a CSR belongs to, or None."""
        with self._lock:
            for (group, plural, _, _), obj in self._objects.items():
                if (group, plural) == ("certificates.k8s.io", "certificatesigningrequests") and \
                        (obj.get("status") or {}).get("certificate") == credential:
                    return credential.split(":")[1]
        return None

    def bootstrap_token_valid(self, token: str) -> bool:
        """Whether ``<id>.<secret>`` matches an unexpired bootstrap-token Secret in kube-system."""
        m = re.fullmatch(r"([a-z0-9]{6})\.([a-z0-9]{16})", token or "")
        if not m:
            return False
        with self._lock:
            secret = self._objects.get(("", "secrets", "kube-system", f"bootstrap-token-{m.group(1)}"))
        if not secret or secret.get("type") != "bootstrap.kubernetes.io/token":
            return False
        data = {k: base64.b64decode(v).decode(errors="replace") for k, v in (secret.get("data") or {}).items()}
        if data.get("token-secret") != m.group(2) or data.get("usage-bootstrap-authentication") != "true":
            return False
        expiration = data.get("expiration")
        if expiration:
            when = datetime.datetime.fromisoformat(expiration.replace("Z", "+00:00"))
            if when <= datetime.datetime.now(tz=datetime.UTC):
                return False
        return True
