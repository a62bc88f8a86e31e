#!/usr/bin/env python3
"""Renders every chat template x case (cases.json) and every snippet (snippets.json) with Python
jinja2 exactly as Hugging Face transformers' apply_chat_template compiles templates, and writes
goldens.json for tests/unit/tokenizer_chat_template_test.cc.

transformers' environment (utils/chat_template_utils.py, _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension and a no-op {% generation %} tag, raise_exception / strftime_now globals, and its own
`tojson` (plain json.dumps: keys unsorted, no HTML escaping, ensure_ascii=False) in place of
Jinja's. Special tokens a tokenizer lacks are left out of the variables (undefined).

Each golden is {"output": text} or {"error": message, "kind": "raise" | "render" | "parse"}:
"raise" is a raise_exception() message (the C++ side must give the same text), "render" any
other error while rendering, "parse" a template jinja2 refuses to compile.

Usage: python3 render_goldens.py [--check]   (jinja2 >= 3.1; rewrites goldens.json beside this
file, or with --check compares with it and exits 1 on a difference: ctest chat_template_goldens)
"""
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker, less the tracking: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def make_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def render(env, source, variables):
    try:
        template = env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"error": str(e), "kind": "parse"}
    try:
        return {"output": template.render(**variables)}
    except jinja2.exceptions.TemplateError as e:
        # raise_exception raises the TemplateError base class itself; Jinja's own errors are
        # subclasses (UndefinedError, SecurityError, TemplateRuntimeError, ...).
        kind = "raise" if type(e) is jinja2.exceptions.TemplateError else "render"
        return {"error": str(e), "kind": kind}
    except Exception as e:  # TypeError, ZeroDivisionError, OverflowError, ...
        return {"error": f"{type(e).__name__}: {e}", "kind": "render"}


def variables_for(messages, add_generation_prompt, special_tokens, extra):
    variables = dict(extra)
    variables.update(special_tokens)
    variables["messages"] = messages
    variables["add_generation_prompt"] = add_generation_prompt
    return variables


def main():
    env = make_environment()
    with open(os.path.join(HERE, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    with open(os.path.join(HERE, "snippets.json"), encoding="utf-8") as f:
        snippets = json.load(f)
    goldens = {"jinja2_version": jinja2.__version__, "templates": {}, "snippets": {}}
    for name, special_tokens in cases["templates"].items():
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            source = f.read()
        goldens["templates"][name] = {
            case["name"]: render(env, source, variables_for(
                case["messages"], case.get("add_generation_prompt", False), special_tokens,
                case.get("variables", {})))
            for case in cases["cases"]
        }
    for snippet in snippets["snippets"]:
        variables = variables_for(snippet.get("messages", snippets["default_messages"]),
                                  snippet.get("add_generation_prompt", False), {},
                                  snippet.get("variables", {}))
        goldens["snippets"][snippet["name"]] = render(env, snippet["template"], variables)
    path = os.path.join(HERE, "goldens.json")
    if "--check" in sys.argv[1:]:
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        stale = [f"{group}/{name}" for group in ("templates", "snippets")
                 for name in sorted(set(goldens[group]) | set(stored.get(group, {})))
                 if goldens[group].get(name) != stored.get(group, {}).get(name)]
        if stale:
            print(f"goldens.json differs from jinja2 {jinja2.__version__} in: {', '.join(stale)}")
            sys.exit(1)
        print(f"goldens.json equals jinja2 {jinja2.__version__}'s renderings "
              f"({len(goldens['templates'])} templates, {len(goldens['snippets'])} snippets)")
        return
    with open(path, "w", encoding="utf-8") as f:
        json.dump(goldens, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
