#!/usr/bin/env python3
"""Lists import circles between the source files of each crate of the workspace.

A file uses another when its code names an item defined there (`use crate::a::b::Item`,
`super::x::f(…)`, an inline `crate::a::Item`), followed through `pub use` re-exports to the file
that defines the item. A `mod` declaration and a `pub use` re-export are not uses, and test code
(`#[cfg(test)]` modules, `tests.rs`) is left out: circles are about the code that ships. Prints
each strongly connected group of files and the edges inside it; exits 1 if there is any.

Usage (from the project root): python3 scripts/file-cycles.py
Standard library only.
"""
import os, re, sys

ITEM_DEF = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:(?:async|unsafe|const|extern\s+\"C\")\s+)*(?:fn|struct|enum|trait|const|static|type|union|macro_rules!)\s*([A-Za-z_][A-Za-z0-9_]*)")
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*([;{])")
USE = re.compile(r"^[ \t]*(pub(?:\([^)]*\))?\s+)?use\s+([^;]*);", re.S | re.M)
PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")

def code_of(path):
    """The file's code without comments and without its test module."""
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    m = re.search(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
    return text[:m.start()] if m else text

class Module:
    def __init__(self, path, file):
        self.path, self.file = path, file
        self.children, self.items, self.reexports = {}, set(), {}

def load(file, path, modules):
    mod = Module(path, file)
    modules[tuple(path)] = mod
    code = code_of(file)
    base = os.path.dirname(file)
    stem = os.path.basename(file)[:-3]
    if stem not in ("mod", "lib", "main"):
        base = os.path.join(base, stem)
    for line in code.split("\n"):
        m = MOD_DECL.match(line)
        if m and m.group(2) == ";":
            name = m.group(1)
            if name == "tests":
                continue
            for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
                if os.path.exists(cand):
                    mod.children[name] = load(cand, path + [name], modules)
                    break
        elif m:
            mod.items.add(m.group(1))  # an inline module: its items count as this file's
        else:
            d = ITEM_DEF.match(line)
            if d and not line.startswith((" ", "\t")):
                mod.items.add(d.group(1))
    for m in USE.finditer(code):
        if m.group(1):  # pub use: remember where each name comes from
            for target, alias in expand(m.group(2)):
                mod.reexports[alias] = target
    mod.code = code
    return mod

def expand(tree):
    """`a::{b, c::d as e}` → [(["a","b"], "b"), (["a","c","d"], "e")]."""
    tree = re.sub(r"\s+as\s+", "@", tree)  # `x as y` → `x@y`, before the spaces go
    tree = re.sub(r"\s+", "", tree)
    out = []
    def walk(prefix, t):
        if t.startswith("{") and t.endswith("}"):
            depth, parts, cur = 0, [], ""
            for ch in t[1:-1]:
                if ch == "," and depth == 0:
                    parts.append(cur); cur = ""; continue
                depth += ch == "{"; depth -= ch == "}"; cur += ch
            if cur: parts.append(cur)
            for p in parts: walk(prefix, p)
            return
        i = t.find("::{")
        if i >= 0:
            walk(prefix + t[:i].split("::"), t[i + 2:])
            return
        path, _, alias = t.partition("@")
        if re.match(r"^[A-Za-z0-9_:]+$", path):  # not a glob (`*`), handled apart
            segs = path.split("::")
            out.append((prefix + segs, alias or segs[-1]))
    walk([], tree)
    return out

def resolve(segs, here, modules, depth=0):
    """The file defining what `segs` (absolute module path + item) names, or None."""
    if depth > 8:
        return None
    mod = modules.get(())
    i = 0
    while i < len(segs) and segs[i] in mod.children:
        mod = mod.children[segs[i]]
        i += 1
    if i == len(segs):
        return mod.file
    name = segs[i]
    if name in mod.items:
        return mod.file
    if name in mod.reexports:
        t = mod.reexports[name]
        absolute = absolutize(t, mod.path)
        if absolute is not None:
            return resolve(absolute, mod, modules, depth + 1) or mod.file
    return mod.file

def absolutize(segs, modpath):
    if not segs:
        return None
    head = segs[0]
    if head == "crate":
        return segs[1:]
    if head == "self":
        return modpath + segs[1:]
    if head == "super":
        p = list(modpath)
        while segs and segs[0] == "super":
            p = p[:-1]; segs = segs[1:]
        return p + segs
    return modpath + segs  # a child module or an item of this module

def crate_edges(lib):
    modules = {}
    root = load(lib, [], modules)
    edges = {}
    for path, mod in modules.items():
        targets = set()
        for m in USE.finditer(mod.code):
            if m.group(1):
                continue
            for t, _ in expand(m.group(2)):
                if t[0] in ("crate", "super", "self") or t[0] in mod.children:
                    a = absolutize(t, list(path))
                    if a is not None:
                        targets.add(resolve(a, mod, modules))
        # A glob (`use super::*`, `pub use child::*`): an edge to each file defining a name of that
        # module which this file's code mentions.
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", mod.code))
        for m in re.finditer(r"\buse\s+([A-Za-z_:]+)::\*\s*;", mod.code):
            a = absolutize(m.group(1).split("::"), list(path))
            g = modules.get(tuple(a)) if a is not None else None
            if g is None:
                continue
            for name in (g.items | set(g.reexports)) & words:
                targets.add(resolve(a + [name], mod, modules))
        for m in PATH.finditer(USE.sub("", mod.code)):
            segs = [m.group(1)] + m.group(2).strip(":").split("::")
            a = absolutize(segs, list(path))
            if a is not None:
                targets.add(resolve(a, mod, modules))
        # Bare paths through a child module (`net::connect(…)`, `replay::ReplayError`).
        for m in re.finditer(r"(?<![:\w])([a-z_][a-z0-9_]*)((?:::[A-Za-z_][A-Za-z0-9_]*)+)", USE.sub("", mod.code)):
            if m.group(1) in mod.children:
                segs = list(path) + [m.group(1)] + m.group(2).strip(":").split("::")
                targets.add(resolve(segs, mod, modules))
        targets.discard(mod.file)
        targets.discard(None)
        # A module's own children are declared, not used, unless code names them: kept.
        edges[mod.file] = targets
    return edges

def sccs(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop(); on.discard(w); group.append(w)
                if w == v: break
            if len(group) > 1:
                out.append(sorted(group))
    for v in list(edges):
        if v not in index:
            visit(v)
    return out

def main():
    libs = ["src/lib.rs"] + sorted(os.path.join("crates", d, "src", "lib.rs") for d in os.listdir("crates")
                                   if os.path.exists(os.path.join("crates", d, "src", "lib.rs")))
    found = 0
    for lib in libs:
        edges = crate_edges(lib)
        for group in sccs(edges):
            found += 1
            print("circle: " + " ".join(group))
            for a in group:
                for b in sorted(edges[a] & set(group)):
                    print(f"    {a} -> {b}")
    print(f"{found} circles between files" if found else "no circle between files")
    sys.exit(1 if found else 0)

main()
