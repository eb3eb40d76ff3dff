"""Reading cluster snapshots from files: ``kubectl get nodes -o yaml`` output (a v1 List or
NodeList), multi-document Node YAML, and Namespaces, RuntimeClasses, DRA objects
(``resource.k8s.io``: DeviceClasses, ResourceSlices, ResourceClaims and templates) and the GPU
Operator's ClusterPolicy among them. Used by ``check``, ``doctor --cluster`` and the demo server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, NamedTuple

import yaml

from webhook.api.inventory import INVENTORY_ANNOTATION
from webhook.api.yamltext import LOADER, yaml_error
from webhook.engine import RESOURCE_KINDS, meta_of, runtime_classes_of

#: libyaml's loader when PyYAML was built with it: snapshots of thousands of nodes load ~10x
#: faster. Both are safe loaders.


class SnapshotError(ValueError):
    pass


def iter_objects(docs: Any) -> Iterator[dict[str, Any]]:
    """Flatten v1 List / *List documents into their items."""
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise SnapshotError(f"expected a Kubernetes object, got {type(doc).__name__}")
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
            item_kind = kind[: -len("List")]
            for item in doc["items"]:
                if isinstance(item, dict):
                    # NodeList items may omit their kind; a plain v1 List's must carry one.
                    if item_kind and "kind" not in item:
                        item = {**item, "kind": item_kind}
                    yield item
        else:
            yield doc


def load_yaml_objects(path: str, name: str | None = None) -> list[dict[str, Any]]:
    """``name``: what errors call the file, when ``path`` is a copy of it."""
    try:
        return _load_yaml_objects(path, json_text=(name or path).endswith(".json"))
    except SnapshotError as exc:
        if name is None:
            raise
        raise SnapshotError(str(exc).replace(path, name)) from exc


def _load_yaml_objects(path: str, json_text: bool) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as fh:
            if json_text:
                return list(iter_objects([json.load(fh)]))
            return list(iter_objects(yaml.load_all(fh, Loader=LOADER)))
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path}: not valid JSON: {exc}") from exc
    except OSError as exc:
        raise SnapshotError(f"{path}: {exc.strerror}") from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{path}: not valid YAML: {yaml_error(exc)}") from exc
    except SnapshotError as exc:
        raise SnapshotError(f"{path}: {exc}") from exc


def load_yaml_text(text: str, source: str) -> list[dict[str, Any]]:
    """Objects from YAML or JSON text read elsewhere (standard input)."""
    try:
        return list(iter_objects(yaml.load_all(text, Loader=LOADER)))
    except yaml.YAMLError as exc:
        raise SnapshotError(f"{source}: not valid YAML or JSON: {yaml_error(exc)}") from exc
    except SnapshotError as exc:
        raise SnapshotError(f"{source}: {exc}") from exc


class ClusterFile(NamedTuple):
    nodes: list[dict[str, Any]]
    namespaces: dict[str, dict[str, str]]
    #: RuntimeClass name -> handler; None when the file holds no RuntimeClass (unknown)
    runtime_classes: dict[str, str] | None
    #: DRA objects and the GPU Operator's ClusterPolicy (``webhook.engine.RESOURCE_KINDS``)
    resources: list[dict[str, Any]] = []
    #: the API server's ``/version`` document, where read from a live cluster
    version: dict[str, Any] | None = None


def load_cluster_file(path: str, name: str | None = None) -> ClusterFile:
    """Nodes, namespace labels, RuntimeClasses and DRA objects from one snapshot file; other
    kinds are ignored. ``name``: what errors call the file, when ``path`` is a copy of it."""
    return cluster_of(load_yaml_objects(path, name), name or path)


def cluster_of(objects: list[dict[str, Any]], path: str) -> ClusterFile:
    """A snapshot's objects sorted by what they mean; ``path`` names it in errors."""
    nodes: list[dict[str, Any]] = []
    namespaces: dict[str, dict[str, str]] = {}
    classes: list[dict[str, Any]] = []
    resources: list[dict[str, Any]] = []
    for obj in objects:
        kind = obj.get("kind")
        meta = meta_of(obj)
        if kind == "Node":
            if not meta.get("name"):
                raise SnapshotError(f"{path}: a Node has no metadata.name")
            nodes.append(obj)
        elif kind == "Namespace" and meta.get("name"):
            namespaces[meta["name"]] = dict(meta.get("labels") or {})
        elif kind == "RuntimeClass":
            classes.append(obj)
        elif kind in RESOURCE_KINDS:
            resources.append(obj)
    return ClusterFile(nodes, namespaces, runtime_classes_of(classes) or None, resources)


def restamp_inventories(nodes: list[dict[str, Any]], observed_at: str) -> None:
    """Mark every node's CDI inventory as observed at ``observed_at``: the bundled demo's
    inventories were recorded once, and a days-old observation would read like a broken
    agent on a freshly started demo."""
    for node in nodes:
        annotations = meta_of(node).get("annotations")
        if not isinstance(annotations, dict):
            continue
        raw = annotations.get(INVENTORY_ANNOTATION)
        if not isinstance(raw, str):
            continue
        try:
            inv = json.loads(raw)
        except ValueError:
            continue
        if isinstance(inv, dict):
            inv["observedAt"] = observed_at
            annotations[INVENTORY_ANNOTATION] = json.dumps(inv, sort_keys=True,
                                                           separators=(",", ":"))
