#!/usr/bin/env python3
"""Checks the PromQL of deploy/ (Grafana dashboard + Prometheus rules) against a live Prometheus.

  promql_check.py structure DASHBOARD.json
  promql_check.py live PROM_URL TARGETS.txt DASHBOARD.json RULES.yml...

TARGETS.txt has role=host:port lines (the /metrics address of each sparseserve process).
Every expression must evaluate without error and return data; every sparseserve_* metric it names
must be on the live /metrics of the role it selects (all roles when it selects none). A deliberately
misspelled expression must fail the same check (self-test). Prints ok/FAIL lines; exit 1 on failure.
"""
import json
import re
import sys
import time
import urllib.parse
import urllib.request

import yaml

METRIC_RE = re.compile(r'(?<![:\w])(sparseserve_[a-z0-9_]+)')
ROLE_RE = re.compile(r'role="(\w+)"')
COMPARISON_RE = re.compile(r'\s*(==|!=|>=|<=|>|<)\s*[0-9.eE+-]+\s*$')


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get('panels', []))


def dashboard_exprs(path):
    with open(path) as f:
        dash = json.load(f)
    out = []
    for p in walk_panels(dash.get('panels', [])):
        for t in p.get('targets', []):
            if t.get('expr'):
                expr = t['expr'].replace('$__rate_interval', '1m').replace('$__interval', '1m')
                out.append((f'dashboard panel {p["id"]} "{p.get("title")}" {t.get("refId")}', expr))
    return dash, out


def rule_exprs(paths):
    out = []
    for path in paths:
        with open(path) as f:
            doc = yaml.safe_load(f)
        for g in doc['groups']:
            for r in g['rules']:
                name = r.get('record') or r.get('alert')
                expr = ' '.join(str(r['expr']).split())
                if 'alert' in r:
                    # An alert is quiet while healthy: its condition returns nothing. Evaluate the
                    # condition for errors and its value side (without the threshold) for data.
                    out.append((f'alert {name} (condition)', expr, False))
                    expr = COMPARISON_RE.sub('', expr)
                out.append((f'{"alert" if "alert" in r else "record"} {name}', expr, True))
    return out


def check_structure(dash):
    errors = []
    ids = [p.get('id') for p in walk_panels(dash.get('panels', []))]
    dup = sorted({i for i in ids if ids.count(i) > 1 or i is None}, key=str)
    if dup:
        errors.append(f'duplicate or missing panel ids: {dup}')
    variables = dash.get('templating', {}).get('list', [])
    if not any(v.get('type') == 'datasource' for v in variables):
        errors.append('no templating variable of type datasource')
    if not dash.get('uid'):
        errors.append('dashboard has no uid')
    rows = {p.get('title') for p in dash.get('panels', []) if p.get('type') == 'row'}
    for role in ('router', 'prefill', 'decode'):
        if role not in rows:
            errors.append(f'no row for role {role}')
    return errors


def query(prom, expr):
    url = prom + '/api/v1/query?' + urllib.parse.urlencode({'query': expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        body = json.load(e)
    except OSError as e:
        return None, str(e)
    if body.get('status') != 'success':
        return None, body.get('error', 'query failed')
    return body['data']['result'], None


def live_families(targets):
    fams = {}
    for role, addr in targets.items():
        with urllib.request.urlopen(f'http://{addr}/metrics', timeout=10) as r:
            text = r.read().decode()
        names = set()
        for line in text.splitlines():
            if line.startswith('# TYPE '):
                names.add(line.split()[2])
            elif line and not line.startswith('#'):
                names.add(re.split(r'[{ ]', line, maxsplit=1)[0])
        fams[role] = names
    return fams


def check_expr(prom, fams, expr, want_data=True):
    """Returns a list of problems with one expression (empty = fine)."""
    problems = []
    roles = ROLE_RE.findall(expr) or sorted(fams)
    for metric in set(METRIC_RE.findall(expr)):
        for role in roles:
            if role not in fams:
                problems.append(f'selects unknown role {role}')
            elif metric not in fams[role]:
                problems.append(f'{metric} is not on the live /metrics of role {role}')
    result, err = query(prom, expr)
    if err:
        problems.append(f'query error: {err}')
    elif want_data and not result:
        problems.append('returned no data')
    return problems


def wait_ready(prom, deadline_s=90):
    """Bounded wait: all targets up, requests counted, rates and recording rules computable."""
    probes = ['count(up == 1) >= 3',
              'sum(sparseserve_generated_tokens_total{role="router"}) > 0',
              'sum(rate(sparseserve_generated_tokens_total{role="router"}[1m])) >= 0',
              'role:sparseserve_time_to_first_token_seconds:p99',
              'role:sparseserve_prefix_cache_hit_ratio:rate5m']
    end = time.time() + deadline_s
    while time.time() < end:
        if all(query(prom, p)[0] for p in probes):
            time.sleep(3)  # a few more scrapes and rule evaluations
            return True
        time.sleep(1)
    return False


def main(argv):
    if argv[1] == 'structure':
        dash, _ = dashboard_exprs(argv[2])
        errors = check_structure(dash)
        for e in errors:
            print(f'FAIL dashboard: {e}')
        return 1 if errors else 0
    prom, targets_path, dash_path, rule_paths = argv[2], argv[3], argv[4], argv[5:]
    with open(targets_path) as f:
        targets = dict(line.strip().split('=', 1) for line in f if '=' in line)
    fams = live_families(targets)
    if not wait_ready(prom):
        print('FAIL prometheus did not scrape the targets / evaluate the rules within 90s')
        return 1
    _, dexprs = dashboard_exprs(dash_path)
    items = [(n, e, True) for n, e in dexprs] + rule_exprs(rule_paths)
    failures = 0
    for name, expr, want in items:
        problems = check_expr(prom, fams, expr, want)
        if problems:
            failures += 1
            print(f'FAIL {name}: {"; ".join(problems)}\n    {expr}')
    print(f'{"ok" if not failures else "FAIL"} {len(items) - failures}/{len(items)} expressions')
    # Self-test: the checker must reject a misspelled metric and a syntax error.
    for bad in ['sum(rate(sparseserve_generated_tokenz_total{role="router"}[1m]))',
                'histogram_quantile(0.9, sum by (le) (rate(sparseserve_time_to_first_token_seconds_bucket[1m])']:
        if check_expr(prom, fams, bad):
            print(f'ok self-test rejects {bad}')
        else:
            failures += 1
            print(f'FAIL self-test accepted {bad}')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
