#!/usr/bin/env python3
"""Checks the include graph of src/ against the layers the build declares.

usage: check_layers.py LAYERS_JSON REPO

LAYERS_JSON (build/layers/layers.json, written by cmake/layers.cmake) lists each layered
library's sources and the entries of src/ it sees. Every quoted include of every file under
src/ must resolve (next to the file, under src/ or under include/) to a file inside an entry
that the file's library sees; a header counts as belonging to every library that has a source
in its folder. No include may name a path with "..". The graph of folders (a top folder of
src/, or backends/<name>) that those includes form must have no cycle. Prints each violation
and exits 1 if there is one.
"""
import json
import os
import re
import sys
from collections import defaultdict

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SUFFIXES = (".cpp", ".hpp", ".h", ".inc", ".c")


def folder_node(rel):
    """The node of a path relative to src/: backends/<name> or the top folder."""
    parts = rel.split("/")
    if parts[0] == "backends" and len(parts) > 2:
        return "backends/" + parts[1]
    return parts[0]


def sees(entries, rel):
    return any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in entries)


def main():
    layers_json, repo = sys.argv[1], sys.argv[2]
    src = os.path.join(repo, "src")
    layers = json.load(open(layers_json))
    by_file, by_folder = {}, defaultdict(set)
    for name, lib in layers.items():
        if name.startswith("qhx_layering_probe"):  # the deliberate violation and its control
            continue
        for s in lib["sources"]:
            if not s.startswith("src/"):
                continue
            rel = s[len("src/"):]
            by_file.setdefault(rel, set()).update(lib["sees"])
            by_folder[os.path.dirname(rel)].update(lib["sees"])
    problems, edges, checked = [], defaultdict(set), 0
    for d, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(SUFFIXES):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, src)
            allowed = by_file.get(rel) or by_folder.get(os.path.dirname(rel))
            if allowed is None:
                problems.append(f"src/{rel}: in no layered library (add it to src/CMakeLists.txt)")
                continue
            for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                checked += 1
                where = f"src/{rel}:{n}"
                if ".." in inc.split("/"):
                    problems.append(f'{where}: #include "{inc}" climbs with ".."')
                    continue
                beside = os.path.relpath(os.path.join(d, inc), src)
                if os.path.exists(os.path.join(d, inc)):
                    target = beside
                elif os.path.exists(os.path.join(src, inc)):
                    target = inc
                else:
                    continue  # include/qhexrt/..., a generated header
                if target.startswith("..") or not sees(allowed, target):
                    problems.append(f'{where}: #include "{inc}" is outside what its layer sees')
                a, b = folder_node(rel), folder_node(target)
                if a != b:
                    edges[a].add(b)
    # A cycle among folders: depth-first search for a back edge.
    state, stack = {}, []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(edges[u]):
            if state.get(v) == 1:
                problems.append("include cycle between folders: " + " -> ".join(stack[stack.index(v):] + [v]))
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = 2

    for u in sorted(list(edges)):
        if u not in state:
            visit(u)
    for p in problems:
        print(p)
    print(f"{checked} includes in src/ checked against {len(layers)} layered libraries; "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
