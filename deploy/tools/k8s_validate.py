#!/usr/bin/env python3
"""Validates every object of a multi-document Kubernetes YAML file against the OpenAPI schemas
bundled with the PyPI package kubernetes-validate (offline). Custom resources (ServiceMonitor,
PodMonitor: monitoring.coreos.com) have no bundled schema and are reported as skipped.
Usage: k8s_validate.py RENDERED.yaml [KUBERNETES_VERSION]. Exit 1 on any invalid object."""
import sys

import kubernetes_validate
import yaml

CRD_GROUPS = ('monitoring.coreos.com/',)


def main(argv):
    version = argv[2] if len(argv) > 2 else '1.30.0'
    with open(argv[1]) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    if not docs:
        print(f'FAIL {argv[1]}: no objects')
        return 1
    failures = 0
    for d in docs:
        name = f'{d.get("kind")}/{d.get("metadata", {}).get("name")}'
        if str(d.get('apiVersion', '')).startswith(CRD_GROUPS):
            print(f'skip {name} (custom resource, no bundled schema)')
            continue
        try:
            kubernetes_validate.validate(d, version, strict=True)
            print(f'ok {name}')
        except Exception as e:  # ValidationError, SchemaNotFoundError, ...
            failures += 1
            print(f'FAIL {name}: {str(e).splitlines()[0]}')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
