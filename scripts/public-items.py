#!/usr/bin/env python3
"""Counts the items each crate of the workspace lets other crates reach.

An item counts when it is declared `pub` (a function or method, struct, enum, trait, const,
static, type alias, module, or a `pub use` re-export) and every module around it is `pub` too (or
re-exported whole by `pub use module::*`), so a path from outside its crate names it. `pub(crate)`, `pub(super)`, private modules and
`#[cfg(test)]` modules are not reachable and do not count; methods of trait impls carry no `pub`
and do not count either. Fields are not items. The count reads the source with a brace-aware
scanner (comments, strings and char literals skipped), standard library only.

Usage (from the project root): python3 scripts/public-items.py [--modules] [--max N]
Prints one line per crate (and with --modules, per module), then the total; exits 1 when the
total is above --max.
"""
import os, re, sys

ITEM = re.compile(r"^pub\s+(?:(?:async|unsafe|const|extern\s+\"C\")\s+)*(fn|struct|enum|trait|const|static|type|mod|use|union|macro)\b")
MOD_DECL = re.compile(r"^(pub\s+)?mod\s+([a-z_][a-z0-9_]*)\s*(;|\{)")
PUB_RESTRICTED = re.compile(r"^pub\s*\(")

def strip(text):
    """The code with comments, strings and char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i): depth, i = depth + 1, i + 2
                elif text.startswith("*/", i): depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n": out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i-1].isalnum() or text[i-1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append("\n" * text.count("\n", i, j)); out.append('""'); i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append("\n" * text.count("\n", i, j)); out.append('""'); i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:i + 12])
            out.append("' '"); i += len(m.group(0))
        else:
            out.append(c); i += 1
    return "".join(out)

def use_names(s):
    """How many names a `pub use` statement re-exports (each leaf of a `{…}` group counts)."""
    if "{" not in s:
        return 1
    inner = s[s.index("{") + 1:s.rindex("}")].replace("{", ",").replace("}", ",")
    return sum(1 for part in inner.split(",") if part.strip() and not part.strip().endswith("::"))

def count_file(path, mod_path, reachable, counts):
    """Counts reachable items of the module in `path` (and its child modules)."""
    code = strip(open(path, encoding="utf-8").read())
    # Stack of (depth at which the block opened, reachable inside it, module path).
    stack, depth = [], 0
    pending_test = False
    lines = code.split("\n")
    # A private child module whose items are re-exported whole (`pub use child::*`) is reachable.
    globbed = set(re.findall(r"^\s*pub\s+use\s+([a-z_][a-z0-9_]*)::\*\s*;", code, re.M))
    pending_use = None
    for line in lines:
        s = line.strip()
        # A `pub use` group spread over several lines counts once it is whole.
        if pending_use is not None:
            pending_use += " " + s
            depth += line.count("{") - line.count("}")
            if pending_use.count("{") == pending_use.count("}"):
                counts[pending_use_mod] = counts.get(pending_use_mod, 0) + use_names(pending_use)
                pending_use = None
            continue
        if s.startswith("#[cfg(test)]"):
            pending_test = True
        cur_reach = stack[-1][1] if stack else reachable
        cur_mod = stack[-1][2] if stack else mod_path
        m = MOD_DECL.match(s)
        if m:
            public = (bool(m.group(1)) or m.group(2) in globbed) and not pending_test
            name = m.group(2)
            if m.group(3) == ";" and not pending_test:
                base = os.path.dirname(path)
                stem = os.path.basename(path)[:-3]
                if stem not in ("mod", "lib", "main"):
                    base = os.path.join(base, stem)
                for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
                    if os.path.exists(cand):
                        count_file(cand, cur_mod + [name], cur_reach and public, counts)
                        break
            elif m.group(3) == "{":
                # An inline module: its items are reachable only through a pub chain.
                opens = s.count("{") - s.count("}")
                if cur_reach and public:
                    counts.setdefault("::".join(cur_mod), 0)
                    counts["::".join(cur_mod)] += 1
                stack.append((depth, cur_reach and public and not pending_test, cur_mod + [name]))
                depth += opens
                pending_test = False
                continue
        elif ITEM.match(s) and not PUB_RESTRICTED.match(s) and cur_reach and not re.match(r"pub\s+use\s+[a-z_][a-z0-9_]*::\*", s):
            key = "::".join(cur_mod)
            if s.startswith("pub use") and s.count("{") > s.count("}"):
                pending_use, pending_use_mod = s, key
                depth += line.count("{") - line.count("}")
                continue
            counts[key] = counts.get(key, 0) + (use_names(s) if s.startswith("pub use") else 1)
        if s and not s.startswith("#"):
            pending_test = False
        depth += line.count("{") - line.count("}")
        while stack and depth <= stack[-1][0]:
            stack.pop()

def main():
    if not os.path.isfile("Cargo.toml"):
        sys.exit("run from the project root")
    crates = [("pointact", "src/lib.rs")]
    for d in sorted(os.listdir("crates")) if os.path.isdir("crates") else []:
        lib = os.path.join("crates", d, "src", "lib.rs")
        if os.path.exists(lib):
            name = re.search(r'^name\s*=\s*"([^"]+)"', open(os.path.join("crates", d, "Cargo.toml")).read(), re.M).group(1)
            crates.append((name, lib))
    limit = None
    if "--max" in sys.argv:
        limit = int(sys.argv[sys.argv.index("--max") + 1])
    total = 0
    for name, lib in crates:
        counts = {}
        count_file(lib, [name.replace("-", "_")], True, counts)
        n = sum(counts.values())
        total += n
        print(f"{name:<20} {n:>5}")
        if "--modules" in sys.argv:
            for mod, c in sorted(counts.items(), key=lambda kv: -kv[1]):
                print(f"    {mod:<50} {c:>5}")
    print(f"{'total':<20} {total:>5} items reachable from outside their crate")
    if limit is not None and total > limit:
        print(f"above the limit of {limit}")
        sys.exit(1)

main()
