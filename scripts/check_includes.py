#!/usr/bin/env python3
"""Checks the include rule of docs/architecture.md over src/, include/ and bench/.

Each folder of src/ may include only the layers its row allows (never one
further down the list), the rpc rooms keep apart (client and server use wire
and transport, never each other), the rooms of the model layer (gguf, text,
arch, quantize, runtime) include only the rooms before them, public headers include only public
headers, and no chain of includes leads back to where it started. bench/
(the bench lab and the benchmark programs) never includes a header of
tools/: the tools build on the bench lab, not the other way round.
Prints each break of the rule and exits 1 if there is any.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The rooms of the model layer (src/model/*), in order.
MODEL = {"model/gguf", "model/text", "model/arch", "model/quantize", "model/runtime"}

# The layer of each folder, and the layers it may include (its own included).
# Layers above the model layer may include every room of it.
ALLOWED = {
    "core": {"core"},
    "backend": {"core", "backend"},
    "cpu": {"core", "backend", "cpu"},
    # The Vulkan device: beside cpu, knowing nothing of it.
    "vulkan": {"core", "backend", "vulkan"},
    "rpc/wire": {"core", "backend", "rpc/wire"},
    "rpc/transport": {"core", "backend", "rpc/wire", "rpc/transport"},
    "rpc/client": {"core", "backend", "rpc/wire", "rpc/transport", "rpc/client"},
    "rpc/server": {"core", "backend", "cpu", "rpc/wire", "rpc/transport", "rpc/server"},
    # The model layer's rooms, in order: each includes the rooms before it.
    "model/gguf": {"core", "backend", "cpu", "model/gguf"},
    "model/text": {"core", "backend", "cpu", "model/gguf", "model/text"},
    "model/arch": {"core", "backend", "cpu", "model/gguf", "model/text", "model/arch"},
    "model/quantize": {"core", "backend", "cpu", "model/gguf", "model/text", "model/arch", "model/quantize"},
    "model/runtime": {"core", "backend", "cpu", "model/gguf", "model/text", "model/arch", "model/runtime"},
    # The cluster's certificate authority (TLS files for tensorpc certs, the
    # bench and the tests): above transport, whose TlsOptions it fills.
    "certs": {"core", "backend", "rpc/wire", "rpc/transport", "certs"},
    # The public model API (include/tensorpc/model.h): the model on devices
    # of the local CPU, local GPUs and servers, so above model, vulkan and client.
    "api": {"core", "backend", "cpu", "vulkan", "rpc/wire", "rpc/transport", "rpc/client", "api"} | MODEL,
    # The OpenAI-compatible API's JSON (requests, responses, stop strings) for
    # `tensorpc serve`: over the model layer and the public model API.
    "serve": {"core", "backend", "cpu", "rpc/wire", "rpc/transport", "rpc/client", "api", "serve"} | MODEL,
}

# The layer each public header belongs to.
PUBLIC = {
    "status.h": "core", "dtype.h": "core", "op.h": "core", "tensor.h": "core",
    "context.h": "core", "graph.h": "core",
    "device.h": "backend", "graph_allocator.h": "backend", "scheduler.h": "backend",
    "execution_plan.h": "backend",
    "cpu_device.h": "cpu",
    "vulkan_device.h": "vulkan",
    "key.h": "rpc/transport", "tls.h": "rpc/transport", "endpoint.h": "rpc/transport",
    "rpc_client.h": "rpc/client", "server.h": "rpc/server",
    "model.h": "api", "version.h": "core", "local_weights.h": "core",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of_src(rel):  # rel: path under src/
    parts = rel.split("/")
    if parts[0] in ("rpc", "model") and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    return parts[0]


def bench_includes_from_tools():
    """Each include in bench/ of a header that lives in tools/: one found
    neither beside the including file nor under bench/, src/ or include/
    (where a bench file's includes resolve), but under tools/; and how many
    files of bench/ were read."""
    problems, read = [], 0
    tools = os.path.realpath(os.path.join(ROOT, "tools")) + os.sep
    for dirpath, _, names in sorted(os.walk(os.path.join(ROOT, "bench"))):
        for name in sorted(names):
            if not name.endswith((".h", ".cpp")):
                continue
            path = os.path.join(dirpath, name)
            node = os.path.relpath(path, ROOT)
            read += 1
            for inc in INCLUDE.findall(open(path, encoding="utf-8").read()):
                places = [dirpath] + [os.path.join(ROOT, d) for d in ("bench", "src", "include", "tools")]
                found = next((os.path.realpath(os.path.join(p, inc)) for p in places
                              if os.path.isfile(os.path.join(p, inc))), None)
                if found is not None and found.startswith(tools):
                    problems.append(f'{node} includes "{inc}" ({os.path.relpath(found, ROOT)}): bench/ never '
                                    "includes from tools/")
    return problems, read


def main():
    problems, bench_files = bench_includes_from_tools()
    files = {}  # include name as written -> (path, layer)
    for base, prefix in (("src", ""), ("include", "")):
        top = os.path.join(ROOT, base)
        for dirpath, _, names in os.walk(top):
            for name in names:
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, top)
                files[(base, rel)] = path

    def target_layer(inc):
        if inc.startswith("tensorpc/"):
            name = inc[len("tensorpc/"):]
            if name not in PUBLIC:
                return None, f'public header "{inc}" has no layer in scripts/check_includes.py'
            return PUBLIC[name], None
        if not os.path.exists(os.path.join(ROOT, "src", inc)):
            return None, None  # a system or third-party header
        return layer_of_src(inc), None

    graph = {}
    for (base, rel), path in sorted(files.items()):
        text = open(path, encoding="utf-8").read()
        incs = INCLUDE.findall(text)
        node = ("include/" if base == "include" else "src/") + rel
        graph[node] = []
        for inc in incs:
            if base == "include":
                if not inc.startswith("tensorpc/"):
                    problems.append(f"{node}: public header includes private \"{inc}\"")
                graph[node].append("include/" + inc)
                continue
            layer, err = target_layer(inc)
            if err:
                problems.append(f"{node}: {err}")
                continue
            if layer is None:
                continue
            graph[node].append(("include/" + inc) if inc.startswith("tensorpc/") else "src/" + inc)
            own = layer_of_src(rel)
            allowed = ALLOWED.get(own)
            if allowed is None:
                problems.append(f"{node}: folder has no row in scripts/check_includes.py")
            elif layer not in allowed:
                problems.append(f'{node} ({own}) includes "{inc}" ({layer})')

    # No include cycle.
    state = {}

    def visit(n, stack):
        state[n] = 1
        stack.append(n)
        for m in graph.get(n, []):
            if state.get(m) == 1:
                problems.append("include cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
            elif m in graph and m not in state:
                visit(m, stack)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])

    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} break(s) of the include rule (docs/architecture.md)")
        return 1
    print(f"include rule: {len(graph)} files of src/ and include/, {bench_files} of bench/ checked, no break")
    return 0


if __name__ == "__main__":
    sys.exit(main())
