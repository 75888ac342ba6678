"""The column descriptions kube-apiserver's table printers send: the API types' doc strings
(metav1.ObjectMeta{}.SwaggerDoc() and the like, as
https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/printers/internalversion/printers.go
names them). `kubectl get` never shows them; a client reading the Table gets the same text."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

NAME: Final = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
CREATION_TIMESTAMP: Final = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)

# resource -> column -> description
DESCRIPTIONS: Final[Mapping[str, Mapping[str, str]]] = MappingProxyType(
    {
        "pods": {
            "Ready": "The aggregate readiness state of this pod for accepting traffic.",
            "Status": "The aggregate status of the containers in this pod.",
            "Restarts": (
                "The number of times the containers in this pod have been restarted and when "
                "the last container in this pod has restarted."
            ),
            "IP": (
                "podIP address allocated to the pod. Routable at least within the cluster. "
                "Empty if not yet allocated."
            ),
            "Node": (
                "NodeName indicates in which node this pod is scheduled. If empty, this pod "
                "is a candidate for scheduling by the scheduler defined in schedulerName. "
                "Once this field is set, the kubelet for this node becomes responsible for "
                "the lifecycle of this pod. This field should not be used to express a "
                "desire for the pod to be scheduled on a specific node. "
                "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename"
            ),
            "Nominated Node": (
                "nominatedNodeName is set only when this pod preempts other pods on the "
                "node, but it cannot be scheduled right away as preemption victims receive "
                "their graceful termination periods. This field does not guarantee that the "
                "pod will be scheduled on this node. Scheduler may decide to place the pod "
                "elsewhere if other nodes become available sooner. Scheduler may also decide "
                "to give the resources on this node to a higher priority pod that is created "
                "after preemption. As a result, this field may be different than "
                "PodSpec.nodeName when the pod is scheduled."
            ),
            "Readiness Gates": (
                "If specified, all readiness gates will be evaluated for pod readiness. A "
                "pod is ready when all its containers are ready AND all conditions specified "
                'in the readiness gates have status equal to "True" More info: '
                "https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates"
            ),
        },
        "nodes": {
            "Status": "The status of the node",
            "Roles": "The roles of the node",
            "Version": "Kubelet Version reported by the node.",
            "Internal-IP": (
                "List of addresses reachable to the node. Queried from cloud provider, if "
                "available. More info: "
                "https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This "
                "field is declared as mergeable, but the merge key is not sufficiently "
                "unique, which can cause data corruption when it is merged. Callers should "
                "instead use a full-replacement patch. See https://pr.k8s.io/79391 for an "
                "example. Consumers should assume that addresses can change during the "
                "lifetime of a Node. However, there are some exceptions where this may not "
                "be possible, such as Pods that inherit a Node's address in its own status "
                "or consumers of the downward API (status.hostIP)."
            ),
            "External-IP": (
                "List of addresses reachable to the node. Queried from cloud provider, if "
                "available. More info: "
                "https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This "
                "field is declared as mergeable, but the merge key is not sufficiently "
                "unique, which can cause data corruption when it is merged. Callers should "
                "instead use a full-replacement patch. See https://pr.k8s.io/79391 for an "
                "example. Consumers should assume that addresses can change during the "
                "lifetime of a Node. However, there are some exceptions where this may not "
                "be possible, such as Pods that inherit a Node's address in its own status "
                "or consumers of the downward API (status.hostIP)."
            ),
            "OS-Image": (
                "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 "
                "(wheezy))."
            ),
            "Kernel-Version": (
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."
            ),
            "Container-Runtime": (
                "ContainerRuntime Version reported by the node through runtime remote API "
                "(e.g. containerd://1.4.2)."
            ),
        },
        "events": {
            "Last Seen": (
                "The time at which the most recent occurrence of this event was recorded."
            ),
            "Type": (
                "Type of this event (Normal, Warning), new types could be added in the future"
            ),
            "Reason": (
                "This should be a short, machine understandable string that gives the reason "
                "for the transition into the object's current status."
            ),
            "Object": "The object that this event is about.",
            "Subobject": (
                "If referring to a piece of an object instead of an entire object, this "
                "string should contain a valid JSON/Go field access statement, such as "
                "desiredState.manifest.containers[2]. For example, if the object reference "
                "is to a container within a pod, this would take on a value like: "
                '"spec.containers{name}" (where "name" refers to the name of the container '
                "that triggered the event) or if no container name is specified "
                '"spec.containers[2]" (container with index 2 in this pod). This syntax is '
                "chosen only to have some well-defined way of referencing a part of an "
                "object."
            ),
            "Source": (
                "The component reporting this event. Should be a short machine "
                "understandable string."
            ),
            "Message": "A human-readable description of the status of this operation.",
            "First Seen": (
                "The time at which the event was first recorded. (Time of server receipt is "
                "in TypeMeta.)"
            ),
            "Count": "The number of times this event has occurred.",
        },
        "resourceclaims": {
            "State": "A summary of the current state (allocated, pending, reserved, etc.).",
        },
        "resourceslices": {
            "Node": (
                "NodeName identifies the node which provides the resources in this pool. A "
                "field selector can be used to list only ResourceSlice objects belonging to "
                "a certain node.\n\nThis field can be used to limit access from nodes to "
                "ResourceSlices with the same node name. It also indicates to autoscalers "
                "that adding new nodes of the same type as some old node might also make new "
                "resources available.\n\nExactly one of NodeName, NodeSelector, AllNodes, "
                "and PerDeviceNodeSelection must be set. This field is immutable."
            ),
            "Driver": (
                "Driver identifies the DRA driver providing the capacity information. A "
                "field selector can be used to list only ResourceSlice objects with a "
                "certain driver name.\n\nMust be a DNS subdomain and should end with a DNS "
                "domain owned by the vendor of the driver. It should use only lower case "
                "characters. This field is immutable."
            ),
            "Pool": (
                "Name is used to identify the pool. For node-local devices, this is often "
                "the node name, but this is not required. A field selector can be used to "
                "list only ResourceSlice objects belonging to a certain pool.\n\nIt must not "
                "be longer than 253 characters and must consist of one or more DNS "
                "sub-domains separated by slashes. This field is immutable."
            ),
        },
        "daemonsets": {
            "Desired": (
                "The total number of nodes that should be running the daemon pod (including "
                "nodes correctly running the daemon pod). More info: "
                "https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/"
            ),
            "Current": (
                "The number of nodes that are running at least 1 daemon pod and are supposed "
                "to run the daemon pod. More info: "
                "https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/"
            ),
            "Ready": (
                "numberReady is the number of nodes that should be running the daemon pod "
                "and have one or more of the daemon pod running with a Ready Condition."
            ),
            "Up-to-date": "The total number of nodes that are running updated daemon pod",
            "Available": (
                "The number of nodes that should be running the daemon pod and have one or "
                "more of the daemon pod running and available (ready for at least "
                "spec.minReadySeconds)"
            ),
            "Node Selector": (
                "NodeSelector is a selector which must be true for the pod to fit on a node. "
                "Selector which must match a node's labels for the pod to be scheduled on "
                "that node. More info: "
                "https://kubernetes.io/docs/concepts/configuration/assign-pod-node/"
            ),
            "Containers": "Names of each container in the template.",
            "Images": "Images referenced by each container in the template.",
            "Selector": (
                "A label query over pods that are managed by the daemon set. Must match in "
                "order to be controlled. It must match the pod template's labels. More info: "
                "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"
            ),
        },
        "deployments": {
            "Ready": "Number of the pod with ready state",
            "Up-to-date": (
                "Total number of non-terminating pods targeted by this deployment that have "
                "the desired template spec."
            ),
            "Available": (
                "Total number of available non-terminating pods (ready for at least "
                "minReadySeconds) targeted by this deployment."
            ),
            "Containers": "Names of each container in the template.",
            "Images": "Images referenced by each container in the template.",
            "Selector": (
                "Label selector for pods. Existing ReplicaSets whose pods are selected by "
                "this will be the ones affected by this deployment. It must match the pod "
                "template's labels."
            ),
        },
        "jobs": {
            "Status": "Status of the job.",
            "Completions": (
                "The number of pods which reached phase Succeeded. The value increases "
                "monotonically for a given spec. However, it may decrease in reaction to "
                "scale down of elastic indexed jobs."
            ),
            "Duration": "Time required to complete the job.",
            "Containers": "Names of each container in the template.",
            "Images": "Images referenced by each container in the template.",
            "Selector": (
                "A label query over pods that should match the pod count. Normally, the "
                "system sets this field for you. More info: "
                "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"
            ),
        },
        "leases": {
            "Holder": (
                "holderIdentity contains the identity of the holder of a current lease. If "
                "Coordinated Leader Election is used, the holder identity must be equal to "
                "the elected LeaseCandidate.metadata.name field."
            ),
        },
        "configmaps": {
            "Data": (
                "Data contains the configuration data. Each key must consist of alphanumeric "
                "characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use "
                "the BinaryData field. The keys stored in Data must not overlap with the "
                "keys in the BinaryData field, this is enforced during validation process."
            ),
        },
        "secrets": {
            "Type": (
                "Used to facilitate programmatic handling of secret data. More info: "
                "https://kubernetes.io/docs/concepts/configuration/secret/#secret-types"
            ),
            "Data": (
                "Data contains the secret data. Each key must consist of alphanumeric "
                "characters, '-', '_' or '.'. The serialized form of the secret data is a "
                "base64 encoded string, representing the arbitrary (possibly non-string) "
                "data value here. Described in https://tools.ietf.org/html/rfc4648#section-4"
            ),
        },
        "namespaces": {
            "Status": "The status of the namespace",
        },
        "priorityclasses": {
            "Value": (
                "value represents the integer value of this priority class. This is the "
                "actual priority that pods receive when they have the name of this class in "
                "their pod spec."
            ),
            "Global-Default": (
                "globalDefault specifies whether this PriorityClass should be considered as "
                "the default priority for pods that do not have any priority class. Only one "
                "PriorityClass can be marked as `globalDefault`. However, if more than one "
                "PriorityClasses exists with their `globalDefault` field set to true, the "
                "smallest value of such global default PriorityClasses will be used as the "
                "default priority."
            ),
            "PreemptionPolicy": (
                "preemptionPolicy is the Policy for preempting pods with lower priority. One "
                "of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset."
            ),
        },
        "rolebindings": {
            "Role": (
                "roleRef can reference a Role in the current namespace or a ClusterRole in "
                "the global namespace. If the RoleRef cannot be resolved, the Authorizer "
                "must return an error."
            ),
            "Users": "Users in the roleBinding",
            "Groups": "Groups in the roleBinding",
            "ServiceAccounts": "ServiceAccounts in the roleBinding",
        },
        "clusterrolebindings": {
            "Role": (
                "roleRef can only reference a ClusterRole in the global namespace. If the "
                "RoleRef cannot be resolved, the Authorizer must return an error."
            ),
            "Users": "Users in the clusterRoleBinding",
            "Groups": "Groups in the clusterRoleBinding",
            "ServiceAccounts": "ServiceAccounts in the clusterRoleBinding",
        },
        "validatingadmissionpolicies": {
            "Validations": (
                "Validations indicates the number of validation rules defined in this configuration"
            ),
            "ParamKind": (
                "ParamKind specifies the kind of resources used to parameterize this policy"
            ),
        },
        "validatingadmissionpolicybindings": {
            "PolicyName": (
                "PolicyName indicates the policy definition which the policy binding binded to"
            ),
            "ParamRef": (
                "ParamRef indicates the param resource which sets the configuration param"
            ),
        },
    }
)
