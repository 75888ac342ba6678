"""Spec text encodings: YAML as the Go library writes it, and YAML or JSON when reading."""

from __future__ import annotations

import json

import yaml

from cdi import blockyaml
from cdi.cdi_error import CDIError
from cdi.spec import Spec

# libyaml's bindings are several times faster and produce the same documents; a
# 2048-channel claim spec is written on the prepare path, so the speed matters (and
# `cdi.blockyaml` writes the simple documents without PyYAML's Python representer).
# Both are the *safe* variants: spec files never construct arbitrary objects.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def spec_to_yaml(spec: Spec) -> str:
    """YAML with a leading `---` and keys in spec order, as Go-written spec files have.

    The layout is PyYAML's (2-space indentation, sequences level with their key); the
    reference's CDI library (gopkg.in/yaml.v3) indents by 4, sequences included. Both read
    as the same spec; tests/sim/reference_state.py renders the reference's bytes.
    """
    document = spec.to_dict()
    body = blockyaml.dump(document, _DUMPER.yaml_implicit_resolvers)
    if body is None:  # something only PyYAML knows how to write (quoting, floats, ...)
        body = yaml.dump(document, Dumper=_DUMPER, sort_keys=False, default_flow_style=False)
    return f"---\n{body}"


def spec_to_json(spec: Spec) -> str:
    """Compact JSON, the other encoding runtimes read."""
    return json.dumps(spec.to_dict(), separators=(",", ":"))


def spec_from_text(text: str, *, is_json: bool = False) -> Spec:
    """Decode YAML (or JSON) into a Spec, checking shape but not meaning."""
    try:
        data = json.loads(text) if is_json else yaml.load(text, Loader=_LOADER)
    except json.JSONDecodeError as err:
        raise CDIError(f"invalid JSON: {err}") from None
    except yaml.YAMLError as err:
        raise CDIError(f"invalid YAML: {err}") from None
    except RecursionError:
        raise CDIError("document is nested too deeply") from None
    return Spec.from_dict(data)
