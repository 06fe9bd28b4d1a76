#!/usr/bin/env python3
"""Fails when a library source includes a header of a layer above its own.

The library's layers, each allowed to include only itself and the layers listed for it
(docs/architecture.md, "Layers"). A header is placed by its path: "core/op.h" is in core,
"tcp/tcp_transport.h" and "transport.h" in transports, "prioccl/..." is the public API that every
layer may use. The build runs this before compiling the library (CMakeLists.txt, target
check_layers), so an upward include fails the build with the file, the line and the rule.

Usage: check_layers.py ROOT [STAMP]   (ROOT: the source tree; STAMP: touched on success)
"""
import os
import re
import sys

# layer -> the layers it may include (besides itself). Below the seams: common (utilities and the
# control wire format), reduce (kernels), device (memory seam). transports implement the
# point-to-point seam; algo (step machines) never sees a transport; topology groups hosts over the
# bootstrap; core (engine, scheduler) drives algorithms over transports; api is the library's
# edge; modes (training modes) build on the api.
ALLOWED = {
    "common": set(),
    "reduce": {"common"},
    "device": {"common", "reduce"},
    "transports": {"common", "reduce", "device"},
    "algo": {"common", "reduce"},
    "topology": {"common", "algo", "transports"},
    "core": {"common", "reduce", "device", "algo", "transports"},
    "api": {"common", "reduce", "device", "algo", "transports", "topology", "core"},
    "modes": {"common", "reduce", "device", "api"},
}
SRC_LAYERS = {name for name in ALLOWED if name != "transports"}
TRANSPORT_DIRS = {"tcp", "ucx", "mpi", "nccl"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of_file(rel):
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2 and parts[1] in SRC_LAYERS:
        return parts[1]
    if parts[0] == "transports":
        return "transports"
    return None


def layer_of_include(inc, including_dir, root):
    first = inc.split("/")[0]
    if first == "prioccl":
        return "public"
    if "/" in inc:
        if first in SRC_LAYERS:
            return first
        if first in TRANSPORT_DIRS:
            return "transports"
    else:
        if os.path.exists(os.path.join(including_dir, inc)):
            return layer_of_file(os.path.relpath(os.path.join(including_dir, inc), root))
        if os.path.exists(os.path.join(root, "transports", inc)):
            return "transports"
    return None


def check(root):
    problems = []
    for top in ("src", "transports"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith((".h", ".cpp", ".cu", ".cuh")):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, root)
                own = layer_of_file(rel)
                if own is None:
                    problems.append(f"{rel}: in no layer (add its folder to tools/check_layers.py)")
                    continue
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        target = layer_of_include(inc, d, root)
                        if target is None:
                            problems.append(f'{rel}:{n}: #include "{inc}" is in no layer')
                        elif target not in ("public", own) and target not in ALLOWED[own]:
                            allowed = ", ".join(sorted(ALLOWED[own])) or "none"
                            problems.append(f'{rel}:{n}: #include "{inc}": {own} may not include '
                                            f"{target} (layers below {own}: {allowed})")
    return problems


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    root = os.path.abspath(sys.argv[1])
    problems = check(root)
    for p in problems:
        print(f"check_layers: {p}", file=sys.stderr)
    if problems:
        print("check_layers: see docs/architecture.md, \"Layers\"", file=sys.stderr)
        sys.exit(1)
    if len(sys.argv) == 3:
        with open(sys.argv[2], "w") as fh:
            fh.write("layers ok\n")


if __name__ == "__main__":
    main()
