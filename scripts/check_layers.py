#!/usr/bin/env python3
"""Checks that dc's layers point one way (docs/architecture.md, "Layers").

Two kinds of edge are checked against one table of layers:
  - links: every target of the tree and its direct link dependencies, as CMake knows them
    (tests/layers/layers.cmake writes BUILD/layers/targets.txt at configure time);
  - includes: every quoted #include of the product folders' sources, resolved to the file
    it names (includes are flat: each folder is an include directory).
A target or a file belongs to the layer of the longest matching folder prefix; an edge may
only point to a layer the table allows. tests/, python/ and scripts/ may use anything.

  check_layers.py --source DIR --targets BUILD/layers/targets.txt
  ... --plant-include FILE:HEADER   pretend FILE includes HEADER (the check's own test)
  ... --plant-link TARGET:DEP       pretend TARGET links DEP (idem)
Exit 0 when every edge is allowed, 1 with one line per wrong edge, 2 on bad input.
"""
import argparse
import os
import re
import subprocess
import sys

# Layers, lowest first, and what each may use besides itself. A layer is a folder prefix.
ALLOWED = {
    "common": set(),
    "codegen": {"common"},
    "codegen/plan_runtime": {"codegen", "common"},
    "estimator": {"codegen", "common"},
    "worker": {"codegen", "common"},
    # dc-db reads calibration fits (estimator/calibration_fit.h) for its `calibration` command.
    "schema": {"estimator", "codegen", "common"},
    "coordinator": {"schema", "estimator", "codegen", "common"},
}
# Folders whose sources and targets may use every layer (they are not part of the product).
FREE = ("tests", "python", "scripts", "examples")
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cc", ".cu", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    """The layer of a path relative to the source root, None for free folders."""
    if path in ("", ".") or path.split("/")[0] in FREE:
        return None  # the root's own targets (dc_warnings) and the free folders
    best = None
    for layer in ALLOWED:
        if path == layer or path.startswith(layer + "/"):
            if best is None or len(layer) > len(best):
                best = layer
    if best is None:
        raise SystemExit(f"error: {path} lies in no layer of scripts/check_layers.py's table")
    return best


def allowed(src_layer, dst_layer):
    return src_layer is None or dst_layer is None or dst_layer == src_layer or \
        dst_layer in ALLOWED[src_layer]


def tracked_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"error: {root} is not a git checkout: {out.stderr.strip()}")
    return [f for f in out.stdout.split("\n") if f and os.path.exists(os.path.join(root, f))]


def include_edges(root, files, planted):
    """(file, resolved header) for every quoted include of a product source."""
    by_suffix = {}
    for f in files:
        parts = f.split("/")
        for i in range(len(parts)):
            by_suffix.setdefault("/".join(parts[i:]), []).append(f)
    edges, problems = [], []
    for f in files:
        if not f.endswith(SOURCE_EXT) or layer_of(f) is None:
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            names = INCLUDE.findall(fh.read())
        names += planted.get(f, [])
        for name in names:
            same_dir = os.path.normpath(os.path.join(os.path.dirname(f), name))
            if same_dir in by_suffix.get(name, []) or os.path.exists(os.path.join(root, same_dir)):
                edges.append((f, same_dir))
                continue
            found = by_suffix.get(name, [])
            if not found:
                continue  # generated (farm.pb.h) or a macro-named header (DC_CUDA_NVRTC_H)
            layers = {layer_of(c) for c in found}
            if len(layers) > 1:
                problems.append(f"{f}: #include \"{name}\" is ambiguous: {', '.join(sorted(found))}")
                continue
            edges.append((f, found[0]))
    return edges, problems


def read_targets(path, planted):
    targets = {}
    try:
        with open(path) as fh:
            for line in fh:
                name, src, deps = (line.rstrip("\n").split("\t") + ["", ""])[:3]
                targets[name] = (src, [d for d in deps.split(";") if d])
    except OSError as e:
        print(f"error: cannot read {path}: {e.strerror} (configure the build first)", file=sys.stderr)
        sys.exit(2)
    for name, dep in planted:
        if name not in targets:
            print(f"error: --plant-link: no target {name}", file=sys.stderr)
            sys.exit(2)
        targets[name][1].append(dep)
    return targets


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", required=True, help="source root (a git checkout)")
    ap.add_argument("--targets", required=True, help="BUILD/layers/targets.txt")
    ap.add_argument("--plant-include", action="append", default=[], metavar="FILE:HEADER")
    ap.add_argument("--plant-link", action="append", default=[], metavar="TARGET:DEP")
    a = ap.parse_args()
    planted_includes = {}
    for p in a.plant_include:
        f, _, h = p.partition(":")
        planted_includes.setdefault(f, []).append(h)
    planted_links = [tuple(p.split(":", 1)) for p in a.plant_link]

    wrong = []
    targets = read_targets(a.targets, planted_links)
    for name, (src, deps) in sorted(targets.items()):
        for d in deps:
            if d not in targets:
                continue
            sl, dl = layer_of(src), layer_of(targets[d][0])
            if not allowed(sl, dl):
                wrong.append(f"{name} ({sl}) links {d} ({dl})")

    files = tracked_files(a.source)
    edges, problems = include_edges(a.source, files, planted_includes)
    wrong += problems
    for f, h in edges:
        sl, dl = layer_of(f), layer_of(h)
        if not allowed(sl, dl):
            wrong.append(f"{f} ({sl}) includes {h} ({dl})")

    for w in wrong:
        print(w)
    if wrong:
        print(f"layering: FAILED, {len(wrong)} edge(s) point the wrong way "
              "(the allowed layers: scripts/check_layers.py, docs/architecture.md)")
        return 1
    print(f"layering: ok ({len(targets)} targets, {len(edges)} includes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
