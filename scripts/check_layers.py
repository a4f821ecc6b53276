#!/usr/bin/python3
"""The layer check behind scripts/check_layers.sh (see there for usage).

Reads the dependency order from docs/ARCHITECTURE.md (the backquoted list
after "the dependency order:"), then looks at every C/CUDA file under
src/<layer>/:
  - each `#include "x/y.h"` names the layer x (a bare "y.h" is the file's own
    folder; "sluice.h", the public header, is every layer's);
  - each use (a call, or the function's address) of an sl_ function that
    another layer's .c/.cu file defines with external linkage (found by a
    scan of top-level definitions, comments and string literals removed
    first; every exported or shared symbol of the library is named sl_...,
    and a CUDA kernel or a file's static names are nobody else's) is a call
    into that layer.
A layer may use only itself and the layers before it in the order; the
C files of tools/, python/ and bench/ include no header of src/ and call no
sl_ function that include/sluice.h does not declare. Inside the pipeline
layer (rule R11 of docs/ARCHITECTURE.md): `struct sl_pipeline`'s header,
pipeline/pipeline.h, is included by pipeline.c and exec.c only, and a stage
file (src/pipeline/stage*.c, collate*.c: one kind of stage or one
collation, behind stage.h) includes neither pipeline/pipeline.h nor the
executor's pipeline/exec.h: it sees its stage and its environment. Inside
the io layer (rule R12): each part of the remote layer (the transport
io/http.h, the shard cache io/cache.h, read-ahead io/readahead.h) is
included only by its own file and the files that use it (IO_PARTS), and
outside src/io no header of io but io/io.h is included. Every
other use is printed as `src/x/y.c:LINE: includes pipeline/pipeline.h (source
may not use pipeline)` or `... calls sl_pipeline__pools_tensor (defined in
src/pipeline/pools.c; ops may not use pipeline)`, unless the allow file
lists it (one `FILE TARGET` a line, TARGET the included path or the function
name, `#` comments; an entry that matches nothing is an error too, so the
list can only shrink as the code is fixed).
Exit status: 0 clean, 1 violations (or stale allow entries), 2 usage or a
document without the order.
"""
import fnmatch
import os
import re
import sys

EXTS = (".c", ".h", ".cu")
# rule R11: who may include the pipeline's whole state (see the docstring)
PRIVATE = {"pipeline/pipeline.h": ("src/pipeline/pipeline.c", "src/pipeline/exec.c")}
STAGE_FILES = ("src/pipeline/stage*.c", "src/pipeline/collate*.c")
STAGE_REFUSED = ("pipeline/pipeline.h", "pipeline/exec.h")
# rule R12: the remote layer's parts, each behind its own header, seen by the
# files that use that part only; outside src/io, io/io.h is the layer's one header
IO_PARTS = {
    "io/http.h": ("src/io/http.c", "src/io/io_remote.c", "src/io/io_s3.c",
                  "src/io/readahead.c", "src/io/readahead.h"),
    "io/cache.h": ("src/io/cache.c", "src/io/io_remote.c"),
    "io/readahead.h": ("src/io/readahead.c", "src/io/io_remote.c"),
}
USERS = ("tools", "python", "bench")  # use the library through include/sluice.h only
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else",
            "case", "defined", "_Alignof", "alignof", "__attribute__", "_Static_assert"}


def strip(text):
    """Comments and string/char literals blanked, newlines kept (so line
    numbers and #include lines survive: the include's path is kept apart)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def read_order(doc):
    try:
        text = open(doc, encoding="utf-8").read()
    except OSError as e:
        sys.exit(f"check_layers: cannot read {doc}: {e.strerror}")
    m = re.search(r"the dependency order:\s*`([^`]+)`", text)
    if not m:
        print(f"check_layers: {doc} states no dependency order (want a line "
              "'the dependency order: `core → io → ...`')", file=sys.stderr)
        sys.exit(2)
    order = [w.strip() for w in re.split(r"→|->", m.group(1))]
    if not all(re.fullmatch(r"[a-z_]+", w) for w in order) or len(set(order)) != len(order):
        print(f"check_layers: {doc}: cannot read the dependency order '{m.group(1)}'", file=sys.stderr)
        sys.exit(2)
    return order


def definitions(code):
    """Names of the top-level function definitions in stripped C text, with
    whether each is static."""
    defs = []
    depth = 0
    start = 0  # where the current top-level declaration began
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == "#" and (i == 0 or code[i - 1] == "\n"):  # skip preprocessor lines
            while i < n and code[i] != "\n":
                i += 2 if code[i] == "\\" else 1
            start = i
            continue
        if c == "{":
            if depth == 0:
                head = code[start:i].rstrip()
                # a function definition: ... NAME ( PARAMS ) {
                name = None
                if head.endswith(")"):
                    k, par = len(head) - 1, 0
                    while k >= 0:
                        par += {")": 1, "(": -1}.get(head[k], 0)
                        if par == 0:
                            break
                        k -= 1
                    m = re.search(r"([A-Za-z_]\w*)\s*$", head[:max(k, 0)])
                    if m and m.group(1) not in KEYWORDS and "=" not in head[:m.start()]:
                        name = m.group(1)
                        words = re.findall(r"\w+", head[:m.start()])
                        defs.append((name, "static" in words))
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
            if depth == 0:
                start = i + 1
        elif c == ";" and depth == 0:
            start = i + 1
        i += 1
    return defs


def pipeline_rule(rel, header):
    """Why file `rel` may not include `header` (folder/name) under rule R11,
    or None. (Other layers may not use the pipeline at all: the order says
    so.)"""
    rel = rel.replace(os.sep, "/")
    if any(fnmatch.fnmatch(rel, g) for g in STAGE_FILES) and header in STAGE_REFUSED:
        return ("a stage file sees its stage and its environment, stage.h; "
                "rule R11 of docs/ARCHITECTURE.md")
    if header in PRIVATE and rel.startswith("src/pipeline/") and rel not in PRIVATE[header]:
        return (f"struct sl_pipeline is private to {' and '.join(PRIVATE[header])}; "
                "rule R11 of docs/ARCHITECTURE.md")
    return None


def io_rule(rel, header):
    """Why file `rel` may not include `header` (folder/name) under rule R12,
    or None."""
    rel = rel.replace(os.sep, "/")
    if header in IO_PARTS and rel not in IO_PARTS[header]:
        return (f"{header} is the part of the remote layer that "
                f"{', '.join(IO_PARTS[header])} use; rule R12 of docs/ARCHITECTURE.md")
    if header.startswith("io/") and header != "io/io.h" and not rel.startswith("src/io/"):
        return ("outside src/io the byte-access layer is io/io.h; "
                "rule R12 of docs/ARCHITECTURE.md")
    return None


def main():
    args = sys.argv[1:]
    root = "."
    allow_path = None
    while args:
        if args[0] == "--allow" and len(args) > 1:
            allow_path = args[1]
            args = args[2:]
        elif args[0].startswith("-"):
            print("usage: check_layers.py [--allow FILE] [ROOT]", file=sys.stderr)
            sys.exit(2)
        else:
            root = args[0]
            args = args[1:]
    order = read_order(os.path.join(root, "docs", "ARCHITECTURE.md"))
    rank = {name: k for k, name in enumerate(order)}
    src = os.path.join(root, "src")
    files = []
    for layer in sorted(os.listdir(src)):
        d = os.path.join(src, layer)
        if not os.path.isdir(d):
            continue
        if layer not in rank:
            print(f"check_layers: src/{layer}/ is not a layer of docs/ARCHITECTURE.md's order "
                  f"({' → '.join(order)}): add it there", file=sys.stderr)
            sys.exit(1)
        for dirpath, _, names in os.walk(d):
            for f in sorted(names):
                if f.endswith(EXTS):
                    p = os.path.join(dirpath, f)
                    files.append((layer, os.path.relpath(p, root)))
    texts = {}
    for layer, rel in files:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            raw = fh.read()
        texts[rel] = (raw, strip(raw))
    # external functions per defining file
    owner = {}
    local = {}
    for layer, rel in files:
        if not rel.endswith((".c", ".cu")):
            continue
        names = definitions(texts[rel][1])
        local[rel] = {nm for nm, _ in names}
        for nm, static in names:
            if not static and nm.startswith("sl_"):
                owner.setdefault(nm, (layer, rel))
    allow = {}
    if allow_path:
        try:
            for k, line in enumerate(open(allow_path, encoding="utf-8"), 1):
                line = line.split("#", 1)[0].split()
                if not line:
                    continue
                if len(line) != 2:
                    print(f"{allow_path}:{k}: want 'FILE TARGET' (TARGET: included path or function)",
                          file=sys.stderr)
                    sys.exit(2)
                allow[(line[0], line[1])] = [k, 0]
        except OSError as e:
            print(f"check_layers: cannot read {allow_path}: {e.strerror}", file=sys.stderr)
            sys.exit(2)
    bad = []
    inc = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
    call = re.compile(r"\b([A-Za-z_]\w*)\b")
    for layer, rel in files:
        raw, code = texts[rel]
        me = rank[layer]
        mine = local.get(rel, set())
        for ln, (rline, cline) in enumerate(zip(raw.split("\n"), code.split("\n")), 1):
            m = inc.match(rline)
            if m and cline.lstrip().startswith("#"):
                path = m.group(1)
                parts = path.split("/")
                hdr = f"{layer}/{path}" if len(parts) == 1 else path
                why = pipeline_rule(rel, hdr) or io_rule(rel, hdr)
                if not why and len(parts) > 1:  # one part: own folder, or the public header
                    if parts[0] in ("..", "."):
                        target = os.path.normpath(os.path.join(os.path.dirname(rel), path))
                        tparts = target.split(os.sep)
                        used = tparts[1] if len(tparts) > 2 and tparts[0] == "src" else None
                    else:
                        used = parts[0]
                    if used in rank and rank[used] > me:
                        why = f"{layer} may not use {used}"
                if why:
                    key = (rel, path)
                    if key in allow:
                        allow[key][1] += 1
                    else:
                        bad.append(f"{rel}:{ln}: includes {path} ({why})")
                continue
            if cline.lstrip().startswith("#") and not cline.lstrip().startswith("#define"):
                continue
            for m in call.finditer(cline):
                nm = m.group(1)
                o = owner.get(nm)
                if not o or nm in mine:
                    continue
                olayer, orel = o
                if rank[olayer] > me:
                    key = (rel, nm)
                    if key in allow:
                        allow[key][1] += 1
                    else:
                        bad.append(f"{rel}:{ln}: calls {nm} (defined in {orel}; "
                                   f"{layer} may not use {olayer})")
    # the library's users (tools/, python/, bench/) see only include/sluice.h
    try:
        header = strip(open(os.path.join(root, "include", "sluice.h"), encoding="utf-8").read())
    except OSError:
        header = ""
    public = set(re.findall(r"\b(sl_\w+)\s*\(", header)) | set(re.findall(r"\b(sl_\w+)\b", header))
    for user in USERS:
        top = os.path.join(root, user)
        for dirpath, _, names in os.walk(top):
            for f in sorted(names):
                if not f.endswith((".c", ".h", ".cpp")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
                    raw = fh.read()
                code = strip(raw)
                for ln, (rline, cline) in enumerate(zip(raw.split("\n"), code.split("\n")), 1):
                    m = inc.match(rline)
                    if m and cline.lstrip().startswith("#"):
                        path = m.group(1)
                        first = path.split("/")[0]
                        if first in rank or first == "src" or (first == ".." and "src/" in path):
                            if (rel, path) in allow:
                                allow[(rel, path)][1] += 1
                            else:
                                bad.append(f"{rel}:{ln}: includes {path} ({user}/ uses only include/sluice.h)")
                        continue
                    for m in call.finditer(cline):
                        nm = m.group(1)
                        if nm in owner and nm not in public:
                            if (rel, nm) in allow:
                                allow[(rel, nm)][1] += 1
                            else:
                                bad.append(f"{rel}:{ln}: calls {nm} (defined in {owner[nm][1]}, not in "
                                           f"include/sluice.h; {user}/ uses only include/sluice.h)")
    for (f, t), (k, hits) in sorted(allow.items(), key=lambda x: x[1][0]):
        if hits == 0:
            bad.append(f"{allow_path}:{k}: '{f} {t}' is allowed but no longer used: remove the line")
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} use(s) against docs/ARCHITECTURE.md's dependency order "
              f"({' → '.join(order)}; a layer uses only itself and the layers before it)",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
