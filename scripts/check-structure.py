#!/usr/bin/env python3
"""Structure checks for `make lint` (issue 21): no non-test Rust file over 500 lines in any
crate, and no import cycle between the core crate's modules.

A file's non-test lines are its lines outside `#[cfg(test)]` items (a test module inline,
or `mod tests;` pointing at a test file, which is itself skipped). The module graph is read
from the `crate::a::b` and `super::b` paths (in `use` and in expressions) of crawlguard-core's
non-test code: an edge a -> b for each module a that names module b (a module and the
modules inside it are one node for this). Exit 1 with the offenders; `--graph` also prints
the graph.

    scripts/check-structure.py [--max-lines N]
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LINES = 500
# Crate source trees (the fuzz crate is its own workspace, same rule).
SOURCE_DIRS = ["src", "core/src", "contract/src", "sidecar/src", "cli/src", "testkit/src",
               "integration/src", "fuzz/fuzz_targets"]
CORE = os.path.join(ROOT, "core/src")


def strip_comments_and_strings(text):
    """The text with comments, string and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i-1].isalnum() or text[i-1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or (c == "'" and re.match(r"'\\u\{[0-9a-fA-F]+\}'", text[i:i+12])):
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def non_test_lines(path):
    """Lines of `path` outside #[cfg(test)] items (blank and comment lines count)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    code = strip_comments_and_strings(text).split("\n")
    count, i = 0, 0
    while i < len(lines):
        if re.match(r"\s*#\[cfg\(test\)\]", code[i]):
            # Skip the attribute's item: to `;` (a `mod x;`) or its closing brace.
            depth, j, opened = 0, i + 1, False
            while j < len(code):
                depth += code[j].count("{") - code[j].count("}")
                opened = opened or "{" in code[j]
                if (opened and depth <= 0) or (not opened and code[j].rstrip().endswith(";")):
                    break
                j += 1
            i = j + 1
            continue
        count += 1
        i += 1
    # A trailing newline leaves one empty element.
    return count - (1 if lines and lines[-1] == "" else 0)


def test_files():
    """Files that are test modules (`#[cfg(test)] mod x;`), relative to ROOT."""
    found = set()
    for d in SOURCE_DIRS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, d)):
            for name in names:
                if not name.endswith(".rs"):
                    continue
                path = os.path.join(dirpath, name)
                text = open(path, encoding="utf-8").read()
                for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod\s+(\w+)\s*;", text):
                    base = dirpath if name in ("mod.rs", "lib.rs", "main.rs") else os.path.join(dirpath, name[:-3])
                    for cand in (os.path.join(base, m.group(1) + ".rs"), os.path.join(base, m.group(1), "mod.rs")):
                        found.add(os.path.normpath(cand))
    return found


def long_files(max_lines):
    tests = test_files()
    over = []
    for d in SOURCE_DIRS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, d)):
            for name in sorted(names):
                path = os.path.normpath(os.path.join(dirpath, name))
                if not name.endswith(".rs") or path in tests:
                    continue
                n = non_test_lines(path)
                if n > max_lines:
                    over.append((os.path.relpath(path, ROOT), n))
    return over


def module_of(path):
    """The core module a file belongs to, as a path of names: core/src/a/b.rs -> a::b."""
    rel = os.path.relpath(path, CORE)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return rel


def core_graph():
    """Edges between core modules: {module: {module it names}}, modules as 'a' or 'a::b'."""
    files = []
    for dirpath, _, names in os.walk(CORE):
        files += [os.path.join(dirpath, n) for n in names if n.endswith(".rs")]
    modules = {"::".join(module_of(f)) for f in files} - {""}
    tests = test_files()
    graph = {}
    for f in files:
        if os.path.normpath(f) in tests:
            continue
        me = module_of(f)
        if not me:
            continue
        code = strip_comments_and_strings(open(f, encoding="utf-8").read())
        # Drop inline test modules: they may name anything.
        code = re.sub(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{.*", "", code, flags=re.S)
        node = owner(me, modules)
        for m in re.finditer(r"\bcrate::((?:\w+::)*\w+)", code):
            target = owner(m.group(1).split("::"), modules)
            if target and target != node and not node.startswith(target + "::") and not target.startswith(node + "::"):
                graph.setdefault(node, set()).add(target)
        # `super::x` names a sibling of this module.
        for m in re.finditer(r"(?<![\w:])super::((?:\w+::)*\w+)", code):
            target = owner(me[:-1] + m.group(1).split("::"), modules)
            if target and target != node and not node.startswith(target + "::") and not target.startswith(node + "::"):
                graph.setdefault(node, set()).add(target)
        # `use crate::{a, b::c}` groups.
        for m in re.finditer(r"\bcrate::\{([^}]*)\}", code):
            for part in m.group(1).split(","):
                names = [p for p in part.strip().split("::") if p and p != "self"]
                target = owner(names, modules) if names else None
                if target and target != node and not target.startswith(node + "::") and not node.startswith(target + "::"):
                    graph.setdefault(node, set()).add(target)
    return graph


def owner(names, modules):
    """The deepest module of `modules` that `names` (a path) starts with."""
    for k in range(len(names), 0, -1):
        cand = "::".join(names[:k])
        if cand in modules:
            return cand
    return None


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    max_lines = MAX_LINES
    if "--max-lines" in sys.argv:
        max_lines = int(sys.argv[sys.argv.index("--max-lines") + 1])
    failed = False
    for path, n in long_files(max_lines):
        print(f"check-structure: {path} has {n} non-test lines (limit {max_lines})")
        failed = True
    graph = core_graph()
    for comp in cycles(graph):
        print("check-structure: import cycle between core modules: " + " <-> ".join(comp))
        for a in comp:
            print(f"    {a} -> " + ", ".join(sorted(b for b in graph.get(a, ()) if b in comp)))
        failed = True
    if "--graph" in sys.argv:
        for a in sorted(graph):
            print(f"{a} -> {', '.join(sorted(graph[a]))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
