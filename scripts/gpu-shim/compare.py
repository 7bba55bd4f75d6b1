#!/usr/bin/env python3
"""Compares two result files of a gpu-shim check (torch_check.py, cupy_check.py): the run with
the machine's own libcuda.so.1 and the run through ac-cuda's. scripts/gpu-check runs it.

Every value is compared, at every depth: numbers by relative error (|a - b| / max(|a|, |b|),
at most --rtol; two numbers both under 1e-6 in magnitude count as equal, where a relative
error means nothing), everything else (names, shapes, counts, errors) exactly. The top-level
"info" object is recorded by the checks but not compared (versions the shim may report
differently, e.g. the driver's).

Prints a line per difference, then one line starting with "compared " that gpu-check's
check_same_results reads. Exits 0 when nothing differs, 1 when something does, 2 when a file
cannot be read.

Usage: compare.py NATIVE.json SHIM.json [--rtol 1e-3]
"""
import json
import math
import sys

TINY = 1e-6


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def relative_error(a, b):
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    if a == b:
        return 0.0
    scale = max(abs(a), abs(b))
    if scale < TINY:
        return 0.0
    return abs(a - b) / scale


def walk(path, native, shim, rtol, found):
    """Appends (path, what) for each difference under `path`; returns (values, worst error)."""
    if isinstance(native, dict) and isinstance(shim, dict):
        values, worst = 0, 0.0
        for key in sorted(set(native) | set(shim)):
            sub = f"{path}.{key}" if path else str(key)
            if path == "" and key == "info":
                continue
            if key not in shim:
                found.append((sub, "missing through the shim"))
            elif key not in native:
                found.append((sub, "missing in the native run"))
            else:
                n, w = walk(sub, native[key], shim[key], rtol, found)
                values, worst = values + n, max(worst, w)
        return values, worst
    if isinstance(native, list) and isinstance(shim, list):
        if len(native) != len(shim):
            found.append((path, f"{len(native)} values natively, {len(shim)} through the shim"))
            return 0, 0.0
        values, worst = 0, 0.0
        for i, (a, b) in enumerate(zip(native, shim)):
            n, w = walk(f"{path}[{i}]", a, b, rtol, found)
            values, worst = values + n, max(worst, w)
        return values, worst
    if is_number(native) and is_number(shim):
        error = relative_error(float(native), float(shim))
        if error > rtol:
            found.append((path, f"native {native!r}, shim {shim!r}, relative error {error:.3g}"))
        return 1, error
    if native != shim:
        found.append((path, f"native {native!r}, shim {shim!r}"))
    return 1, 0.0


def main(argv):
    args = list(argv[1:])
    rtol = 1e-3
    if "--rtol" in args:
        i = args.index("--rtol")
        rtol = float(args[i + 1])
        del args[i : i + 2]
    if len(args) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    docs = []
    for name in args:
        try:
            with open(name, encoding="utf-8") as f:
                docs.append(json.load(f))
        except (OSError, ValueError) as e:
            print(f"compared nothing: {name}: {e}")
            return 2
    found = []
    values, worst = walk("", docs[0], docs[1], rtol, found)
    for path, what in found:
        print(f"differs: {path}: {what}")
    first = f"; first: {found[0][0]}" if found else ""
    print(
        f"compared {values} values: {len(found)} differ (relative error > {rtol:g}){first}; "
        f"max relative error {worst:.2g}"
    )
    return 1 if found or values == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
