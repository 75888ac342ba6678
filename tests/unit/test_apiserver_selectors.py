"""Label and field selectors as kube-apiserver parses and matches them.

The tables are what `kubectl get -l` and `--field-selector` send, with the answers (and the
error texts) a real cluster gives, so code that lists with selectors behaves the same here.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.apiserver.errors import ApiError
from sim.apiserver.field_selectors import (
    SUPPORTED_FIELDS,
    check_fields,
    field_value,
    parse_field_selector,
)
from sim.apiserver.label_selectors import (
    SelectorError,
    label_selector_from_dict,
    parse_label_selector,
)

CD_LABEL = "resource.nvidia.com/computeDomain"
DAEMON = {"app": "compute-domain-daemon", CD_LABEL: "uid-1", "tier": "node"}
OTHER = {"app": "web"}
UNLABELLED: dict[str, str] = {}

# --- label selectors: what they select ---------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "daemon", "other", "unlabelled"),
    [
        ("", True, True, True),
        ("app=compute-domain-daemon", True, False, False),
        ("app==compute-domain-daemon", True, False, False),
        # `!=` and `notin` also select objects that lack the key altogether.
        ("app!=web", True, False, True),
        ("app in (web,compute-domain-daemon)", True, True, False),
        ("app notin (web)", True, False, True),
        (CD_LABEL, True, False, False),
        (f"!{CD_LABEL}", False, True, True),
        (f"{CD_LABEL}=uid-1,tier=node", True, False, False),
        (f"{CD_LABEL}=uid-2", False, False, False),
        ("tier in (node),app", True, False, False),
        ("app in ()", False, False, False),  # "()" is the set {""}
        ("app notin ()", True, True, True),
        ("  app =  web  ", False, True, False),  # whitespace around tokens is fine
        ("tier=", False, False, False),  # an empty value is a value, not "any"
    ],
)
def test_label_selector_matches(selector, daemon, other, unlabelled):
    sel = parse_label_selector(selector)
    assert [sel.matches(DAEMON), sel.matches(OTHER), sel.matches(UNLABELLED)] == [
        daemon,
        other,
        unlabelled,
    ]


def test_none_labels_are_no_labels():
    assert parse_label_selector("app!=web").matches(None)
    assert not parse_label_selector("app").matches(None)


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("replicas>2", {"replicas": "3"}, True),
        ("replicas>2", {"replicas": "2"}, False),
        ("replicas<2", {"replicas": "1"}, True),
        ("replicas<2", {"replicas": "x"}, False),  # a non-integer label never compares
        ("replicas<2", {}, False),
    ],
)
def test_greater_and_less_than(selector, labels, expected):
    assert parse_label_selector(selector).matches(labels) is expected


def test_empty_selector_is_empty():
    assert parse_label_selector("").empty
    assert not parse_label_selector("a").empty
    assert str(parse_label_selector("")) == ""


@pytest.mark.parametrize(
    ("selector", "canonical"),
    [
        ("b=1,a=2", "a=2,b=1"),  # sorted by key
        ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),
        ("a  notin ( c , b )", "a notin (b,c)"),
        ("!a,b==c,d!=e", "!a,b==c,d!=e"),
        ("in in (in,notin)", "in in (in,notin)"),  # keywords are identifiers where values go
        ("example.com/name=v", "example.com/name=v"),
        ("k>5", "k>5"),
    ],
)
def test_canonical_string(selector, canonical):
    assert str(parse_label_selector(selector)) == canonical
    assert str(parse_label_selector(canonical)) == canonical


NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("app=web cache", "found 'cache', expected: ',' or 'end of string'"),
        ("app:web", f'unable to parse requirement: <nil>: Invalid value: "app:web": {NAME_PART}'),
        ("-app=web", f'unable to parse requirement: <nil>: Invalid value: "-app": {NAME_PART}'),
        (
            "app=-web",
            f'unable to parse requirement: values[0][app]: Invalid value: "-web": {VALUE}',
        ),
        (
            "app web",
            "unable to parse requirement: found 'web', expected: in, notin, =, ==, !=, gt, lt",
        ),
        ("app in web", "unable to parse requirement: found 'web' expected: '('"),
        ("app in (web", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("app=(web)", "unable to parse requirement: found '(', expected: identifier"),
        ("app,", "found '', expected: identifier after ','"),
        (",app", "found ',', expected: !, identifier, or 'end of string'"),
        ("=web", "found '=', expected: !, identifier, or 'end of string'"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
        (
            "replicas>two",
            'unable to parse requirement: values[0]: Invalid value: "two": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (
            "/app",
            'unable to parse requirement: <nil>: Invalid value: "/app": '
            "prefix part must be non-empty",
        ),
        (
            "a" * 64,
            f'unable to parse requirement: <nil>: Invalid value: "{"a" * 64}": '
            "name part must be no more than 63 characters",
        ),
        (
            f"app={'v' * 64}",
            f'unable to parse requirement: values[0][app]: Invalid value: "{"v" * 64}": '
            "must be no more than 63 characters",
        ),
    ],
)
def test_invalid_label_selectors_fail_like_the_real_parser(selector, message):
    with pytest.raises(SelectorError) as err:
        parse_label_selector(selector)
    assert str(err.value) == message


def test_several_errors_are_aggregated_in_brackets():
    big = "9" * 64  # beyond int64 and beyond a label value's 63 characters
    with pytest.raises(SelectorError) as err:
        parse_label_selector(f"replicas>{big}")
    assert str(err.value) == (
        f"unable to parse requirement: [values[0]: Invalid value: \"{big}\": for 'Gt', 'Lt' "
        f'operators, the value must be an integer, values[0][replicas]: Invalid value: "{big}": '
        "must be no more than 63 characters]"
    )
    with pytest.raises(SelectorError):
        parse_label_selector("replicas>" + "9" * 5000)


def test_upper_case_prefix_is_not_a_dns_subdomain():
    with pytest.raises(SelectorError, match="prefix part a lowercase RFC 1123 subdomain"):
        parse_label_selector("Example.com/app=web")


# --- metav1.LabelSelector ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "matches_daemon", "matches_other", "canonical"),
    [
        (None, True, True, ""),
        ({}, True, True, ""),
        ({"matchLabels": {}, "matchExpressions": []}, True, True, ""),
        (
            {"matchLabels": {"app": "compute-domain-daemon"}},
            True,
            False,
            "app=compute-domain-daemon",
        ),
        (
            {
                "matchLabels": {"app": "compute-domain-daemon"},
                "matchExpressions": [{"key": CD_LABEL, "operator": "In", "values": ["uid-1"]}],
            },
            True,
            False,
            f"app=compute-domain-daemon,{CD_LABEL} in (uid-1)",
        ),
        (
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web", "db"]}]},
            True,
            False,
            "app notin (db,web)",
        ),
        ({"matchExpressions": [{"key": CD_LABEL, "operator": "Exists"}]}, True, False, CD_LABEL),
        (
            {"matchExpressions": [{"key": CD_LABEL, "operator": "DoesNotExist"}]},
            False,
            True,
            f"!{CD_LABEL}",
        ),
    ],
)
def test_label_selector_from_dict(selector, matches_daemon, matches_other, canonical):
    sel = label_selector_from_dict(selector)
    assert sel.matches(DAEMON) is matches_daemon
    assert sel.matches(OTHER) is matches_other
    assert str(sel) == canonical


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (
            {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]},
            '"Gt" is not a valid label selector operator',
        ),
        (
            {"matchExpressions": [{"key": "app", "operator": "In", "values": []}]},
            "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]},
            'values: Invalid value: ["x"]: values set must be empty for exists and does not exist',
        ),
        ({"matchLabels": {"app": "-x"}}, f'values[0][app]: Invalid value: "-x": {VALUE}'),
        (
            {"matchLabels": {"-app": "x"}},
            f'key: Invalid value: "-app": {NAME_PART}',
        ),
    ],
)
def test_invalid_label_selector_dicts(selector, message):
    with pytest.raises(SelectorError) as err:
        label_selector_from_dict(selector)
    assert str(err.value) == message


# --- field selectors ------------------------------------------------------------------------

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "worker-0", "namespace": "drv"},
    "spec": {"nodeName": "node-a", "restartPolicy": "Always"},
    "status": {"phase": "Running", "podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}]},
}
PENDING = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "worker-1", "namespace": "drv"},
    "spec": {},
    "status": {"phase": "Pending"},
}


@pytest.mark.parametrize(
    ("selector", "running", "pending"),
    [
        ("", True, True),
        ("spec.nodeName=node-a", True, False),
        ("spec.nodeName==node-a", True, False),
        ("spec.nodeName=", False, True),  # missing fields compare as ""
        ("spec.nodeName!=node-a", False, True),
        ("status.phase!=Running,metadata.namespace=drv", False, True),
        ("metadata.name=worker-0,metadata.namespace=drv", True, False),
        ("status.podIP=10.0.0.7", True, False),
        ("spec.hostNetwork=false", True, True),  # a Pod's unset hostNetwork reads "false"
        ("status.podIPs=", True, True),  # accepted, but not a selectable field: always ""
    ],
)
def test_field_selector_matches_pods(selector, running, pending):
    sel = parse_field_selector(selector)
    assert [sel.matches(POD), sel.matches(PENDING)] == [running, pending]


def test_field_values_of_other_kinds():
    event = {
        "kind": "Event",
        "involvedObject": {"kind": "Pod", "uid": "u-1", "name": "p"},
        "source": {"component": "kubelet"},
        "reportingComponent": "",
        "type": "Warning",
    }
    assert field_value(event, "involvedObject.uid") == "u-1"
    assert field_value(event, "source") == "kubelet"
    assert field_value({"kind": "Event", "reportingComponent": "ctl"}, "source") == "ctl"
    assert (
        field_value({"kind": "Node", "spec": {"unschedulable": True}}, "spec.unschedulable")
        == "true"
    )
    assert field_value({"kind": "Node", "spec": {}}, "spec.unschedulable") == "false"
    assert field_value({"kind": "Job", "status": {"succeeded": 2}}, "status.successful") == "2"
    assert field_value({"kind": "Job", "status": {}}, "status.successful") == "0"
    assert field_value({"kind": "Secret", "type": "Opaque"}, "type") == "Opaque"
    assert field_value({"kind": "Namespace"}, "metadata.namespace") == ""


def test_escaped_values():
    sel = parse_field_selector(r"metadata.name=a\,b\=c\\d")
    assert sel.only_field("metadata.name") == r"a,b=c\d"
    assert str(sel) == r"metadata.name=a\,b\=c\\d"
    assert sel.matches({"metadata": {"name": r"a,b=c\d"}})


@pytest.mark.parametrize(
    ("selector", "fields", "canonical"),
    [
        ("spec.nodeName=n1", {"spec.nodeName"}, "spec.nodeName=n1"),
        ("status.phase!=Running,spec.nodeName==n1", {"spec.nodeName", "status.phase"},
         "spec.nodeName=n1,status.phase!=Running"),
        ("a=1,,b=2", {"a", "b"}, "a=1,b=2"),
        ("", set(), ""),
    ],
)  # fmt: skip
def test_field_selector_fields_and_canonical_form(selector, fields, canonical):
    sel = parse_field_selector(selector)
    assert sel.fields == fields
    assert str(sel) == canonical
    assert sel.empty is (not fields)


@pytest.mark.parametrize(
    ("selector", "value"),
    [
        ("spec.nodeName=node-a", "node-a"),
        ("spec.nodeName==node-a", "node-a"),
        ("spec.nodeName!=node-a", None),
        ("spec.nodeName=node-a,status.phase=Running", None),
        ("metadata.name=node-a", None),
        ("", None),
    ],
)
def test_only_field(selector, value):
    assert parse_field_selector(selector).only_field("spec.nodeName") == value


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("spec.nodeName", "invalid selector: 'spec.nodeName'; can't understand 'spec.nodeName'"),
        ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
        ("a=b=c", "invalid field selector: unescaped character in value: 61"),
        (r"a=b\x", r"invalid field selector: invalid escape sequence: \x"),
        ("a=b\\", "invalid field selector: invalid escape sequence: \\"),
    ],
)
def test_invalid_field_selectors(selector, message):
    with pytest.raises(SelectorError) as err:
        parse_field_selector(selector)
    assert str(err.value) == message


# --- which fields each resource supports ------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "resource", "selector"),
    [
        ("", "pods", "spec.nodeName=n1,status.phase=Running,metadata.namespace=drv"),
        ("", "events", "involvedObject.uid=u,reason=Failed,type=Warning,source=kubelet"),
        ("", "nodes", "spec.unschedulable=false,metadata.name=n1"),
        ("", "namespaces", "status.phase=Active"),
        ("", "secrets", "type=kubernetes.io/service-account-token"),
        ("", "services", "spec.type=ClusterIP,spec.clusterIP=None"),
        ("", "configmaps", "metadata.name=a,metadata.namespace=b"),
        ("resource.k8s.io", "resourceslices", "spec.nodeName=n1,spec.driver=gpu.nvidia.com"),
        ("batch", "jobs", "status.successful=1"),
        ("resource.nvidia.com", "computedomains", "metadata.name=cd,metadata.namespace=ns"),
    ],
)
def test_supported_fields_pass(group, resource, selector):
    sel = parse_field_selector(selector)
    assert check_fields(group, resource, sel) == sel


@pytest.mark.parametrize(
    ("group", "resource", "selector", "message"),
    [
        ("", "pods", "spec.foo=x", "field label not supported: spec.foo"),
        ("", "nodes", "metadata.namespace=x", "field label not supported: metadata.namespace"),
        ("", "events", "involvedObject.foo=x", "field label not supported: involvedObject.foo"),
        (
            "",
            "configmaps",
            "data.x=y",
            '"data.x" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
        ("batch", "jobs", "status.succeeded=1",
         'field label "status.succeeded" not supported for batchv1.Job'),
        (
            "resource.k8s.io",
            "resourceslices",
            "spec.pool=p",
            "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: spec.pool",
        ),
        ("resource.nvidia.com", "computedomains", "spec.numNodes=2",
         "field label not supported: spec.numNodes"),
        ("~custom", "computedomains", "status.status=Ready",
         "field label not supported: status.status"),
    ],
)  # fmt: skip
def test_unsupported_fields_are_a_400(group, resource, selector, message):
    with pytest.raises(ApiError) as err:
        check_fields(group, resource, parse_field_selector(selector))
    assert (err.value.code, err.value.reason, err.value.message) == (400, "BadRequest", message)


def test_custom_resource_scope_and_selectable_fields():
    ns_sel = parse_field_selector("metadata.namespace=a")
    with pytest.raises(ApiError, match=r"field label not supported: metadata\.namespace"):
        check_fields("example.com", "clusterthings", ns_sel, namespaced=False)
    spec_sel = parse_field_selector("spec.color=blue")
    assert check_fields("example.com", "things", spec_sel, custom_fields=["spec.color"]) == spec_sel


def test_legacy_pod_host_field_means_node_name():
    sel = check_fields("", "pods", parse_field_selector("spec.host=node-a"))
    assert sel.only_field("spec.nodeName") == "node-a"


def test_supported_fields_table_keys():
    assert ("", "pods") in SUPPORTED_FIELDS
    assert "spec.nodeName" in SUPPORTED_FIELDS["", "pods"]
    assert all(isinstance(v, frozenset) for v in SUPPORTED_FIELDS.values())


# --- properties -----------------------------------------------------------------------------

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_name = st.builds(
    lambda first, middle, last: first + middle + last if middle or last else first,
    st.sampled_from(_ALNUM),
    st.text(alphabet=_ALNUM + "-_.", max_size=20),
    st.sampled_from(_ALNUM) | st.just(""),
).filter(lambda s: s[-1].isalnum())
_prefix = st.lists(
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True), min_size=1, max_size=3
).map(".".join)
_key = st.one_of(_name, st.builds(lambda p, n: f"{p}/{n}", _prefix, _name))
_value = st.one_of(st.just(""), _name)
_requirement = st.one_of(
    st.builds(lambda k, op, v: f"{k}{op}{v}", _key, st.sampled_from(["=", "==", "!="]), _value),
    st.builds(
        lambda k, op, vs: f"{k} {op} ({','.join(vs)})",
        _key,
        st.sampled_from(["in", "notin"]),
        st.lists(_value, min_size=1, max_size=4, unique=True),
    ),
    _key,
    _key.map(lambda k: f"!{k}"),
    st.builds(
        lambda k, op, n: f"{k}{op}{n}", _key, st.sampled_from([">", "<"]), st.integers(0, 10**6)
    ),
)


@given(st.lists(_requirement, max_size=5).map(",".join))
def test_label_selector_round_trips(text):
    sel = parse_label_selector(text)
    again = parse_label_selector(str(sel))
    assert again == sel
    assert str(again) == str(sel)


_TOKENS = [" ", "\t", "!", "=", "==", "!=", "(", ")", ",", "<", ">", "in", "notin", "a", "b/c", "-"]


@given(st.text() | st.lists(st.sampled_from(_TOKENS) | st.characters(), max_size=12).map("".join))
def test_label_parser_raises_only_selector_errors(text):
    with contextlib.suppress(SelectorError):
        parse_label_selector(text)


@given(st.text())
def test_field_parser_raises_only_selector_errors(text):
    try:
        sel = parse_field_selector(text)
    except SelectorError:
        return
    assert parse_field_selector(str(sel)) == sel


@given(st.dictionaries(_key, _value, max_size=5), st.lists(_requirement, max_size=4).map(",".join))
def test_negation_complements(labels, text):
    """`!=` and `notin` are exactly the complements of `=` and `in` on any label set."""
    sel = parse_label_selector(text)
    for req in sel.requirements:
        flipped = {"=": "!=", "==": "!=", "!=": "=", "in": "notin", "notin": "in"}.get(req.operator)
        if flipped is None:
            continue
        values = ",".join(req.values)
        other = (
            f"{req.key}{flipped}{values}"
            if flipped in ("=", "!=")
            else (f"{req.key} {flipped} ({values})")
        )
        assert parse_label_selector(other).matches(labels) is not req.matches(labels)
