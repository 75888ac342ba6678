"""The shipped CRDs: what the API server accepts, stores, defaults and rejects.

These read the real files under packaging/helm/dra-driver-nvidia-gpu/crds, so a typo in a field
name, enum, default or list-map key shows up here rather than as a confusing admission error
on a cluster.
Admission goes through `sim.apiserver.crd_schema`, the emulator's copy of what kube-apiserver
does with a CRD schema (prune, default, validate, transition rules).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from sim.apiserver.crd_info import crd_resource_info
from sim.apiserver.crd_schema import CRDSchema
from sim.apiserver.crd_validation import validate_crd
from sim.apiserver.errors import ApiError
from sim.cluster import manifests

CRD_DIR = manifests.CRD_DIR
GROUP = "resource.nvidia.com"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
# The cause kube-apiserver adds when schema errors keep it from evaluating CEL rules.
RULES_SKIPPED = "<nil>"

Schema = dict[str, Any]


def load_crd(plural: str) -> dict[str, Any]:
    """Parse a shipped CRD file with the same safe loader kubectl-equivalent tooling uses."""
    with (CRD_DIR / f"{GROUP}_{plural}.yaml").open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    assert isinstance(data, dict)
    return data


def served_version(crd: dict[str, Any], name: str = VERSION) -> dict[str, Any]:
    for version in crd["spec"]["versions"]:
        if version["name"] == name:
            return version
    raise KeyError(name)


def schema_of(crd: dict[str, Any], name: str = VERSION) -> Schema:
    return served_version(crd, name)["schema"]["openAPIV3Schema"]


def walk(schema: Schema, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Schema]]:
    """Yield every sub-schema with its path (``[]`` marks array items)."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from walk(sub, (*path, name))
    if "items" in schema:
        yield from walk(schema["items"], (*path, "[]"))


def admit(crd: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a create stores it, or ApiError (422) like the real server."""
    return CRDSchema.from_crd(crd).admit_create(obj)


def admit_update(crd: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    return CRDSchema.from_crd(crd).admit_update(new, old)


def fields(err: ApiError) -> list[str]:
    """The fields the 422 names, without the "rules not checked" marker."""
    assert err.code == 422 and err.reason == "Invalid"
    return [c.field for c in err.causes if c.field != RULES_SKIPPED]


CD = "computedomains"
CLIQUE = "computedomaincliques"
NAMES = {
    CD: {
        "kind": "ComputeDomain",
        "listKind": "ComputeDomainList",
        "plural": "computedomains",
        "singular": "computedomain",
    },
    CLIQUE: {
        "kind": "ComputeDomainClique",
        "listKind": "ComputeDomainCliqueList",
        "plural": "computedomaincliques",
        "singular": "computedomainclique",
    },
}
BOTH = pytest.mark.parametrize("plural", [CD, CLIQUE])


@pytest.fixture(scope="module")
def cd_crd() -> dict[str, Any]:
    return load_crd(CD)


@pytest.fixture(scope="module")
def clique_crd() -> dict[str, Any]:
    return load_crd(CLIQUE)


def cd(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ComputeDomain shaped like the reference's examples."""
    obj: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "ComputeDomain",
        "metadata": {"name": "imex-channel-injection", "namespace": "default"},
        "spec": spec
        if spec is not None
        else {
            "numNodes": 1,
            "channel": {
                "resourceClaimTemplate": {"name": "imex-channel-0"},
                "allocationMode": "Single",
            },
        },
    }
    if status is not None:
        obj["status"] = status
    return obj


def clique(daemons: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ComputeDomainClique",
        "metadata": {
            "name": "3f1c9a52-6a5e-4c2b-9d7e-0a1b2c3d4e5f.a1b2c3d4-0000-1111-2222-333344445555.7",
            "namespace": "drv",
        },
        "daemons": daemons,
    }


def node(name: str, ip: str, clique_id: str, index: int, status: str = "Ready") -> dict[str, Any]:
    return {"name": name, "ipAddress": ip, "cliqueID": clique_id, "index": index, "status": status}


def daemon(node_name: str, ip: str, index: int, **extra: Any) -> dict[str, Any]:
    return {"nodeName": node_name, "ipAddress": ip, "cliqueID": "c1", "index": index, **extra}


# --- structure: what `kubectl apply` of the CRD needs -----------------------------------


@BOTH
def test_crd_identity(plural: str) -> None:
    """Name, group, scope and names must match exactly or clients built for the Go driver break."""
    crd = load_crd(plural)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.{GROUP}"
    assert crd["metadata"]["annotations"] == {"controller-gen.kubebuilder.io/version": "v0.17.1"}
    spec = crd["spec"]
    assert spec["group"] == GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == NAMES[plural]  # no shortNames, no categories
    assert "conversion" not in spec


@BOTH
def test_single_served_storage_version(plural: str) -> None:
    versions = load_crd(plural)["spec"]["versions"]
    assert len(versions) == 1
    (version,) = versions
    assert version["name"] == VERSION
    assert version["served"] is True
    assert version["storage"] is True
    assert version["schema"]["openAPIV3Schema"]["type"] == "object"


@BOTH
def test_schema_is_structural(plural: str) -> None:
    """The API server refuses v1 CRDs whose schema nodes lack a type, or that constrain metadata."""
    schema = schema_of(load_crd(plural))
    for path, sub in walk(schema):
        assert "type" in sub, path
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert schema["properties"]["apiVersion"]["type"] == "string"
    assert schema["properties"]["kind"]["type"] == "string"


@BOTH
def test_every_field_is_described(plural: str) -> None:
    """`kubectl explain` shows these; metadata is documented by Kubernetes itself."""
    schema = schema_of(load_crd(plural))
    for path, sub in walk(schema):
        if path == ("metadata",):
            continue
        assert sub.get("description", "").strip(), path


@BOTH
def test_list_map_keys_are_required_scalars(plural: str) -> None:
    """A list-map key that is optional or non-scalar makes the API server reject the CRD."""
    schema = schema_of(load_crd(plural))
    maps = [(p, s) for p, s in walk(schema) if s.get("x-kubernetes-list-type") == "map"]
    assert maps
    for path, sub in maps:
        assert sub["type"] == "array", path
        items = sub["items"]
        assert items["type"] == "object", path
        assert sub["x-kubernetes-list-map-keys"], path
        for key in sub["x-kubernetes-list-map-keys"]:
            assert key in items["properties"], (path, key)
            assert key in items["required"], (path, key)
            assert items["properties"][key]["type"] in {"string", "integer", "boolean"}


@BOTH
def test_required_fields_are_declared(plural: str) -> None:
    schema = schema_of(load_crd(plural))
    for path, sub in walk(schema):
        for name in sub.get("required", []):
            assert name in sub["properties"], (path, name)


@BOTH
def test_defaults_validate_against_their_own_schema(plural: str) -> None:
    """The API server rejects a CRD whose default would itself fail validation."""
    schema = schema_of(load_crd(plural))
    defaults = [(p, s) for p, s in walk(schema) if "default" in s]
    assert defaults
    for path, sub in defaults:
        holder = CRDSchema({"type": "object", "properties": {"value": sub}})
        assert holder.validate({"value": copy.deepcopy(sub["default"])}) == [], path


@BOTH
def test_api_server_accepts_the_crd(plural: str) -> None:
    """Creating the CRD succeeds, and serves the resource under the names clients expect."""
    crd = load_crd(plural)
    assert validate_crd(crd) == []
    info = crd_resource_info(crd)
    assert (info.group, info.plural, info.kind, info.list_kind, info.singular) == (
        GROUP,
        plural,
        NAMES[plural]["kind"],
        NAMES[plural]["listKind"],
        NAMES[plural]["singular"],
    )
    assert info.namespaced
    assert info.storage_version == VERSION
    assert info.served_versions == (VERSION,)


@BOTH
def test_integers_are_plain(plural: str) -> None:
    """Go `int` fields come out of controller-gen as bare `type: integer`, no format.

    The standard `metav1.Condition` (our addition, status.conditions) keeps its int64.
    """
    schema = schema_of(load_crd(plural))
    ints = [s for path, s in walk(schema)
            if s.get("type") == "integer" and "conditions" not in str(path)]
    assert ints
    for sub in ints:
        assert "format" not in sub
        assert "maximum" not in sub


# --- ComputeDomain schema details -------------------------------------------------------


def test_cd_field_contract(cd_crd: dict[str, Any]) -> None:
    schema = schema_of(cd_crd)
    assert "required" not in schema
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["channel"]
    assert set(spec["properties"]) == {"channel", "numNodes"}
    num = spec["properties"]["numNodes"]
    assert (num["type"], num["default"], num["minimum"]) == ("integer", 0, 0)
    assert "deprecated" in num["description"].lower()
    channel = spec["properties"]["channel"]
    assert channel["required"] == ["resourceClaimTemplate"]
    mode = channel["properties"]["allocationMode"]
    assert (mode["enum"], mode["default"]) == (["All", "Single"], "Single")
    rct = channel["properties"]["resourceClaimTemplate"]
    assert rct["required"] == ["name"]
    assert rct["properties"] == {"name": rct["properties"]["name"]}
    assert rct["properties"]["name"]["type"] == "string"

    status = schema["properties"]["status"]
    assert status["required"] == ["status"]
    assert status["properties"]["status"]["enum"] == ["Ready", "NotReady"]
    assert status["properties"]["status"]["default"] == "NotReady"
    assert "must not" in status["description"]
    nodes = status["properties"]["nodes"]
    assert nodes["x-kubernetes-list-map-keys"] == ["name"]
    items = nodes["items"]
    assert sorted(items["required"]) == ["cliqueID", "ipAddress", "name"]
    assert set(items["properties"]) == {"name", "ipAddress", "cliqueID", "index", "status"}
    assert items["properties"]["index"] == {
        "type": "integer",
        "description": items["properties"]["index"]["description"],
    }
    assert items["properties"]["status"]["enum"] == ["Ready", "NotReady"]
    assert items["properties"]["status"]["default"] == "NotReady"


def test_cd_spec_is_immutable_by_cel(cd_crd: dict[str, Any]) -> None:
    spec = schema_of(cd_crd)["properties"]["spec"]
    assert spec["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}
    ]
    others = [p for p, s in walk(schema_of(cd_crd)) if "x-kubernetes-validations" in s]
    assert others == [("spec",)]


def test_cd_has_status_subresource(cd_crd: dict[str, Any]) -> None:
    """Without it the controller's UpdateStatus calls would 404."""
    assert served_version(cd_crd)["subresources"] == {"status": {}}


def test_cd_printer_columns(cd_crd: dict[str, Any]) -> None:
    cols = {c["name"]: c for c in served_version(cd_crd)["additionalPrinterColumns"]}
    assert list(cols) == ["Status", "Age"]
    assert (cols["Status"]["jsonPath"], cols["Status"]["type"]) == (".status.status", "string")
    assert (cols["Age"]["jsonPath"], cols["Age"]["type"]) == (".metadata.creationTimestamp", "date")


# --- ComputeDomain admission ------------------------------------------------------------


@pytest.mark.parametrize("num_nodes", [0, 1, 2, None])
@pytest.mark.parametrize("mode", ["Single", "All", None])
def test_reference_examples_are_accepted(
    cd_crd: dict[str, Any], num_nodes: int | None, mode: str | None
) -> None:
    channel: dict[str, Any] = {"resourceClaimTemplate": {"name": "imex-channel-0"}}
    spec: dict[str, Any] = {"channel": channel}
    if mode is not None:
        channel["allocationMode"] = mode
    if num_nodes is not None:
        spec["numNodes"] = num_nodes
    stored = admit(cd_crd, cd(spec))
    assert stored["spec"]["numNodes"] == (num_nodes or 0)
    assert stored["spec"]["channel"]["allocationMode"] == (mode or "Single")
    assert "status" not in stored  # defaults never conjure up a status


def test_minimal_spec_gets_defaults(cd_crd: dict[str, Any]) -> None:
    """What `kubectl get -o yaml` shows right after creating the smallest possible CD."""
    stored = admit(cd_crd, cd({"channel": {"resourceClaimTemplate": {"name": "rct"}}}))
    assert stored["spec"] == {
        "numNodes": 0,
        "channel": {"resourceClaimTemplate": {"name": "rct"}, "allocationMode": "Single"},
    }
    assert stored["metadata"] == {"name": "imex-channel-injection", "namespace": "default"}


def test_cd_without_spec_is_accepted(cd_crd: dict[str, Any]) -> None:
    """spec is optional at the top level (Go omitempty); only its contents are constrained."""
    obj = cd()
    del obj["spec"]
    assert "spec" not in admit(cd_crd, obj)


def _mutate(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Set (or, with value ``...``, delete) a dotted path in a copy of obj."""
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    target = obj
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return obj


_STATUS = {"status": "Ready", "nodes": [node("n1", "10.0.0.1", "c1", 0)]}


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("spec.numNodes", -1, "spec.numNodes"),
        ("spec.numNodes", "2", "spec.numNodes"),
        ("spec.numNodes", 1.5, "spec.numNodes"),
        ("spec.channel.allocationMode", "Many", "spec.channel.allocationMode"),
        ("spec.channel", ..., "spec.channel"),
        ("spec.channel.resourceClaimTemplate", ..., "spec.channel.resourceClaimTemplate"),
        ("spec.channel.resourceClaimTemplate.name", ..., "spec.channel.resourceClaimTemplate.name"),
        ("spec.channel.resourceClaimTemplate.name", 7, "spec.channel.resourceClaimTemplate.name"),
        ("status.status", "Bogus", "status.status"),
        ("status.nodes.0.ipAddress", ..., "status.nodes[0].ipAddress"),
        ("status.nodes.0.name", ..., "status.nodes[0].name"),
        ("status.nodes.0.cliqueID", ..., "status.nodes[0].cliqueID"),
        ("status.nodes.0.status", "Unknown", "status.nodes[0].status"),
        ("status.nodes.0.index", "0", "status.nodes[0].index"),
        ("status.nodes", {"n1": {}}, "status.nodes"),
    ],
)
def test_invalid_cd_is_rejected_naming_the_field(
    cd_crd: dict[str, Any], path: str, value: Any, field: str
) -> None:
    bad = _mutate(cd(status=copy.deepcopy(_STATUS)), path, value)
    with pytest.raises(ApiError) as exc:
        admit(cd_crd, bad)
    assert fields(exc.value) == [field]


def test_status_with_fabric_and_non_fabric_nodes(cd_crd: dict[str, Any]) -> None:
    """The controller's own output: a non-fabric node has cliqueID "" and index -1."""
    nodes = [node("n1", "10.0.0.1", "c1", 0), node("n2", "10.0.0.2", "", -1)]
    stored = admit(cd_crd, cd(status={"status": "Ready", "nodes": nodes}))
    assert stored["status"]["nodes"] == nodes


def test_status_defaults(cd_crd: dict[str, Any]) -> None:
    """An empty status reads NotReady; a node without status is NotReady; index stays unset."""
    entry = {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c1"}
    stored = admit(cd_crd, cd(status={"nodes": [entry]}))
    assert stored["status"] == {"status": "NotReady", "nodes": [{**entry, "status": "NotReady"}]}


def test_duplicate_node_names_are_rejected(cd_crd: dict[str, Any]) -> None:
    nodes = [node("n1", "10.0.0.1", "c1", 0), node("n1", "10.0.0.9", "c1", 1)]
    with pytest.raises(ApiError) as exc:
        admit(cd_crd, cd(status={"status": "Ready", "nodes": nodes}))
    assert fields(exc.value) == ["status.nodes[1]"]


def test_unknown_fields_are_pruned(cd_crd: dict[str, Any]) -> None:
    """Typos such as `numnodes` silently vanish on a real cluster (kubectl only warns)."""
    obj = cd()
    obj["spec"]["numnodes"] = 4
    obj["spec"]["channel"]["resourceClaimTemplate"]["namespace"] = "other"
    stored = admit(cd_crd, obj)
    assert "numnodes" not in stored["spec"]
    assert stored["spec"]["channel"]["resourceClaimTemplate"] == {"name": "imex-channel-0"}


def test_spec_update_is_rejected(cd_crd: dict[str, Any]) -> None:
    old = cd()
    new = _mutate(old, "spec.numNodes", 2)
    with pytest.raises(ApiError) as exc:
        admit_update(cd_crd, old, new)
    assert fields(exc.value) == ["spec"]
    assert exc.value.causes[0].message == (
        'Invalid value: A computeDomain.spec is immutable'
    )


def test_reapplying_manifest_is_not_a_spec_change(cd_crd: dict[str, Any]) -> None:
    """Defaults are applied to both sides, so re-applying a manifest that omits them is fine."""
    manifest = cd({"channel": {"resourceClaimTemplate": {"name": "rct"}}})
    stored = admit(cd_crd, manifest)
    admit_update(cd_crd, stored, manifest)
    admit_update(cd_crd, stored, cd(stored["spec"], status={"status": "Ready"}))


# --- ComputeDomainClique ----------------------------------------------------------------


def test_clique_field_contract(clique_crd: dict[str, Any]) -> None:
    schema = schema_of(clique_crd)
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "daemons"}
    daemons = schema["properties"]["daemons"]
    assert daemons["x-kubernetes-list-type"] == "map"
    assert daemons["x-kubernetes-list-map-keys"] == ["nodeName"]
    items = daemons["items"]
    assert sorted(items["required"]) == ["cliqueID", "ipAddress", "nodeName"]
    assert set(items["properties"]) == {"nodeName", "ipAddress", "cliqueID", "index", "status"}
    assert items["properties"]["index"]["type"] == "integer"
    assert "minimum" not in items["properties"]["index"]
    assert items["properties"]["status"]["enum"] == ["Ready", "NotReady"]
    assert items["properties"]["status"]["default"] == "NotReady"
    assert not [p for p, s in walk(schema) if "x-kubernetes-validations" in s]


def test_clique_has_no_subresources(clique_crd: dict[str, Any]) -> None:
    """The daemon writes `daemons` with a plain Update of the whole object; with a status
    subresource the server would still accept it, but the Go clients never call /status."""
    assert "subresources" not in served_version(clique_crd)


def test_clique_printer_columns(clique_crd: dict[str, Any]) -> None:
    cols = served_version(clique_crd)["additionalPrinterColumns"]
    assert cols == [{"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"}]


def test_clique_is_accepted_and_defaulted(clique_crd: dict[str, Any]) -> None:
    obj = clique([daemon("n1", "10.0.0.1", 0, status="Ready"), daemon("n2", "10.0.0.2", 1)])
    stored = admit(clique_crd, obj)
    assert [d["status"] for d in stored["daemons"]] == ["Ready", "NotReady"]
    assert stored["metadata"] == obj["metadata"]


def test_empty_clique_is_accepted(clique_crd: dict[str, Any]) -> None:
    """The daemon creates the clique before inserting itself."""
    obj = clique([])
    del obj["daemons"]
    assert "daemons" not in admit(clique_crd, obj)


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"ipAddress": "10.0.0.1", "cliqueID": "c1", "index": 0}, "daemons[0].nodeName"),
        ({"nodeName": "n1", "cliqueID": "c1", "index": 0}, "daemons[0].ipAddress"),
        ({"nodeName": "n1", "ipAddress": "10.0.0.1", "index": 0}, "daemons[0].cliqueID"),
        (daemon("n1", "10.0.0.1", 0, status="Bogus"), "daemons[0].status"),
        (daemon("n1", "10.0.0.1", "0"), "daemons[0].index"),  # type: ignore[arg-type]
    ],
)
def test_invalid_daemon_is_rejected(
    clique_crd: dict[str, Any], entry: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiError) as exc:
        admit(clique_crd, clique([entry]))
    assert fields(exc.value) == [field]


def test_duplicate_daemon_node_is_rejected(clique_crd: dict[str, Any]) -> None:
    obj = clique([daemon("n1", "10.0.0.1", 0), daemon("n1", "10.0.0.2", 1)])
    with pytest.raises(ApiError) as exc:
        admit(clique_crd, obj)
    assert fields(exc.value) == ["daemons[1]"]


# --- the real Kubernetes API model ------------------------------------------------------


@BOTH
def test_kubernetes_client_round_trip(plural: str) -> None:
    """Every key must be a real apiextensions field: an unknown or misspelled key (e.g.
    `x-kubernetes-list-mapkeys`) would be dropped by the model and the round trip would differ."""
    data = load_crd(plural)
    with k8s.ApiClient() as api:
        model = api._ApiClient__deserialize(copy.deepcopy(data), "V1CustomResourceDefinition")  # type: ignore[attr-defined]
        assert isinstance(model, k8s.V1CustomResourceDefinition)
        assert api.sanitize_for_serialization(model) == data
    version = model.spec.versions[0]
    schema = version.schema.open_apiv3_schema
    assert isinstance(schema, k8s.V1JSONSchemaProps)
    if plural == CD:
        nodes = schema.properties["status"].properties["nodes"]
        assert nodes.x_kubernetes_list_map_keys == ["name"]
        assert nodes.x_kubernetes_list_type == "map"
        rules = schema.properties["spec"].x_kubernetes_validations
        assert [(r.rule, r.message) for r in rules] == [
            ("self == oldSelf", "A computeDomain.spec is immutable")
        ]
        assert version.subresources.status == {}
    else:
        assert schema.properties["daemons"].x_kubernetes_list_map_keys == ["nodeName"]
        assert version.subresources is None
