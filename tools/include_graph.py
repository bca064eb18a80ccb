#!/usr/bin/env python3
"""include_graph.py: which folders of a source tree include which.

    tools/include_graph.py [--files] [ROOT]      (ROOT: services/runner)

For every .c/.h/.cu/.cuh file under ROOT, reads its `#include "..."` lines
that name a file under ROOT (paths are repo-rooted, e.g.
"services/runner/model/forward.h") and prints, per folder (relative to
ROOT, "." for the top), the folders it includes with the number of
#include lines, then the cycles (strongly connected components of more
than one folder). With --files the nodes are files instead of folders.
Exits 1 when there is a cycle. Run it from the repository root."""
import os
import re
import sys

INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def main():
    args = sys.argv[1:]
    by_file = "--files" in args
    args = [a for a in args if a != "--files"]
    root = os.path.normpath(args[0] if args else "services/runner")
    edges = {}  # node -> {node: count}
    nodes = set()
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            if not name.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, name)
            src = os.path.relpath(path, root)
            src_node = src if by_file else (os.path.dirname(src) or ".")
            nodes.add(src_node)
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = INC.match(line)
                    if not m:
                        continue
                    inc = os.path.normpath(m.group(1))
                    if not inc.startswith(root + os.sep):
                        continue
                    dst = os.path.relpath(inc, root)
                    dst_node = dst if by_file else (os.path.dirname(dst) or ".")
                    if dst_node == src_node:
                        continue
                    e = edges.setdefault(src_node, {})
                    e[dst_node] = e.get(dst_node, 0) + 1
                    nodes.add(dst_node)
    arrows = 0
    for n in sorted(nodes):
        out = edges.get(n, {})
        arrows += len(out)
        if out:
            print("%-28s -> %s" % (n, ", ".join(
                "%s (%d)" % (d, c) for d, c in sorted(out.items()))))
        else:
            print("%-28s -> (nothing)" % n)
    # Tarjan's strongly connected components.
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    print("%d %s, %d arrows, %d cycle%s" % (
        len(nodes), "files" if by_file else "folders", arrows, len(sccs),
        "" if len(sccs) == 1 else "s"))
    for comp in sccs:
        print("cycle: " + " <-> ".join(comp))
    return 1 if sccs else 0


if __name__ == "__main__":
    sys.exit(main())
