#!/usr/bin/env python3
"""Renders the real chat templates of tests/data/chat_templates with jinja2, the way Hugging Face
transformers applies a tokenizer's chat_template (trim_blocks, lstrip_blocks, raise_exception), and
prints each rendering as a C++ string literal.

These printed texts are the expected renderings in tests/model/chat_template_test.cpp: they come
from the templates themselves, independently of src/model/text/chat_template.cpp.

    python3 tools/chat_template_reference.py   (needs python3-jinja2)
"""
import datetime
import json
import os

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "tests", "data", "chat_templates")

# The conversations the tests render; keep them in step with the test file.
WITH_SYSTEM = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": " 4. \n"},
    {"role": "user", "content": "And 3+3?"},
]
WITHOUT_SYSTEM = WITH_SYSTEM[1:]

# The BOS and EOS texts of each family's vocabulary.
TOKENS = {
    "chatml": ("<|endoftext|>", "<|endoftext|>"),
    "chatml-openhermes": ("<s>", "<|im_end|>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.3": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama2": ("<s>", "</s>"),
    "mistral-v0": ("<s>", "</s>"),
    "mistral-v1": ("<s>", "</s>"),
    "mistral-v3": ("<s>", "</s>"),
    "mistral-v3-tekken": ("<s>", "</s>"),
    "mistral-v7": ("<s>", "</s>"),
    "phi3": ("<s>", "<|endoftext|>"),
    "phi3-small": ("<|endoftext|>", "<|endoftext|>"),
    "gemma": ("<bos>", "<eos>"),
    "gemma3": ("<bos>", "<eos>"),
    "zephyr": ("<s>", "</s>"),
    "qwen2.5": ("<|endoftext|>", "<|im_end|>"),
}

# The tool-calling conversation (tests/model/text/chat_template_tools_test.cpp), rendered by the
# templates that have tools: a call, its result, and a generation prompt.
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, \"now\"",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}]
TOOL_CALL = {"id": "abcDEF123", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}
WITH_TOOLS = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
    {"role": "tool", "tool_call_id": "abcDEF123", "content": "{\"temp\": 21}"},
]
TOOL_TEMPLATES = ["qwen2.5", "llama3.1", "mistral-v3", "mistral-v3-tekken"]


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """transformers' tojson filter (json.dumps, not jinja2's HTML-safe one)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


# "Today" for templates that date their system block with the day of rendering (Llama 3.2's
# strftime_now); the tests fix the same date with ChatTemplate::set_today.
TODAY = datetime.date(2025, 3, 5)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(format):
    return TODAY.strftime(format)


def render(name, messages, add_generation_prompt=True, tools=None):
    with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
        text = f.read()
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = tojson
    # As transformers defines it; no custom_tools or date_string are passed.
    env.globals["strftime_now"] = strftime_now
    bos, eos = TOKENS[name]
    try:
        return env.from_string(text).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token=bos, eos_token=eos, tools=tools)
    except jinja2.exceptions.TemplateError as e:
        return "ERROR: " + str(e)


def cpp(s):
    if s.startswith("ERROR: "):
        return "/* " + s + " */"
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def main():
    for name in TOKENS:
        print(f"// {name}")
        print(f"  with system:    {cpp(render(name, WITH_SYSTEM))}")
        print(f"  without system: {cpp(render(name, WITHOUT_SYSTEM))}")
        # The first turn alone, for prefix stability: rendered with a generation prompt, then answered.
        print(f"  first turn:     {cpp(render(name, WITH_SYSTEM[:2]))}")
    for name in TOOL_TEMPLATES:
        print(f"// {name} with tools")
        print(f"  call and result: {cpp(render(name, WITH_TOOLS, tools=TOOLS))}")
        print(f"  first turn:      {cpp(render(name, WITH_TOOLS[:2], tools=TOOLS))}")
        print(f"  no tools given:  {cpp(render(name, WITH_TOOLS))}")


if __name__ == "__main__":
    main()
