#!/usr/bin/env python3
"""The reference for troupe's chat-template tests: renders templates with Python's Jinja2 the
way transformers' apply_chat_template does, so the C++ renderer can be compared with it byte
for byte. Written from transformers' behaviour (no transformers install needed):

- the environment is ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
  the loopcontrols extension and a {% generation %} tag that renders its body;
- filters["tojson"] is json.dumps(x, ensure_ascii=False, indent=..., separators=...,
  sort_keys=...) (not Jinja2's HTML-safe tojson); globals raise_exception(message) raises
  jinja2.exceptions.TemplateError(message) and strftime_now(fmt) formats the local time;
- the template sees messages, tools, documents, add_generation_prompt, the tokenizer's special
  tokens (the set ones, as strings) and any extra keyword arguments (which override them);
- a tokenizer directory's template is chat_template.jinja if present, else
  tokenizer_config.json's chat_template (a list of {name, template} picks "tool_use" when
  tools are given and it exists, else "default").

Usage: render.py INPUT.json   (prints a JSON list of results on stdout; exits 3 when jinja2
is missing). INPUT: {"now": <unix seconds, for strftime_now>, "cases": [...]}, each case either
  {"template": str, "context": {...}}                          -> template.render(**context)
  {"template": str | "tokenizer_dir": str, "messages": [...],
   "add_generation_prompt": bool, "extra": {...}}              -> apply_chat_template
Each result is {"ok": true, "text": str} or {"ok": false, "type": "<exception class>",
"message": str(exception)}.
"""
import json
import os
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.stderr.write("render.py: python3 has no jinja2 (Debian: apt-get install python3-jinja2)\n")
    sys.exit(3)

SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class GenerationTag(Extension):
    """transformers' {% generation %} ... {% endgeneration %}: a call block around the body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def make_environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(now).strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, "jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_compiled = {}


def compile_template(env, source):
    """Compiled once per source, as transformers caches them."""
    if source not in _compiled:
        _compiled[source] = env.from_string(source)
    return _compiled[source]


def token_text(value):
    if isinstance(value, dict):
        value = value.get("content")
    return value


def load_tokenizer_dir(directory):
    config = {}
    config_path = os.path.join(directory, "tokenizer_config.json")
    if os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    special = {}
    for key in SPECIAL_TOKEN_KEYS:
        text = token_text(config.get(key))
        if text:
            special[key] = str(text)
    additional = [str(token_text(t)) for t in (config.get("additional_special_tokens") or [])]
    if additional:
        special["additional_special_tokens"] = additional
    template = config.get("chat_template")
    jinja_path = os.path.join(directory, "chat_template.jinja")
    if os.path.exists(jinja_path):
        with open(jinja_path, encoding="utf-8") as f:
            template = f.read()
    if isinstance(template, list):
        template = {entry["name"]: entry["template"] for entry in template}
    if template is None:
        raise ValueError("Cannot use chat template functions because tokenizer.chat_template is not set")
    return template, special


def apply_chat_template(env, template, special, messages, add_generation_prompt, extra):
    extra = dict(extra)
    tools = extra.pop("tools", None)
    documents = extra.pop("documents", None)
    if isinstance(template, dict):
        if tools is not None and "tool_use" in template:
            template = template["tool_use"]
        elif "default" in template:
            template = template["default"]
        else:
            raise ValueError("This model has multiple chat templates with no default specified!")
    kwargs = {**special, **extra}
    return compile_template(env, template).render(
        messages=messages, tools=tools, documents=documents, add_generation_prompt=add_generation_prompt, **kwargs
    )


def run_case(env, case, loaded):
    if "context" in case:
        return compile_template(env, case["template"]).render(**case["context"])
    if "tokenizer_dir" in case:
        directory = case["tokenizer_dir"]
        if directory not in loaded:
            loaded[directory] = load_tokenizer_dir(directory)
        template, special = loaded[directory]
    else:
        template, special = case["template"], case.get("special_tokens", {})
    return apply_chat_template(
        env, template, special, case["messages"], case.get("add_generation_prompt", False), case.get("extra", {})
    )


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        request = json.load(f)
    env = make_environment(request.get("now", 0.0))
    loaded = {}
    results = []
    for case in request["cases"]:
        try:
            results.append({"ok": True, "text": run_case(env, case, loaded)})
        except Exception as e:  # every failure is a result to compare, not a crash
            results.append({"ok": False, "type": type(e).__name__, "message": str(e)})
    sys.stdout.buffer.write(json.dumps(results, ensure_ascii=False).encode("utf-8"))


if __name__ == "__main__":
    main()
