#!/usr/bin/env python3
"""priocclGetConstant (src/api/constants.cpp) answers every enumerator and integer macro of
prioccl.h with the header's value, and refuses a name the header lacks; the Python package's
names (prioccl/_constants.py) are all among them.
Usage: test_constants.py LIBPRIOCCL HEADER PYTHON_PACKAGE_DIR"""
import ctypes
import re
import sys


def header_constants(text):
    """{name: value} of the header's enumerators (explicit values, as prioccl.h writes them all)
    and of its #define'd integers (evaluated over the ones before them)."""
    found = {}
    for body in re.findall(r"typedef enum\s*\{(.*?)\}", text, re.S):
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        for name, value in re.findall(r"(prioccl\w+)\s*=\s*(-?\d+)", body):
            found[name] = int(value)
    text = text.replace("(size_t)", "")  # PRIOCCL_ROWS_FAILED: (size_t)-1, which reads as int -1
    for name, expr in re.findall(r"^#define (PRIOCCL_[A-Z_]+)[ \t]+([-()0-9A-Z_ *+]+?)\s*(?:/\*.*)?$",
                                 text, re.M):
        try:
            found[name] = int(eval(expr, {}, dict(found)))  # only the header's own integers
        except Exception:
            pass  # not an integer constant (PRIOCCL_API, ...)
    return found


def main(lib_path, header, package_dir):
    lib = ctypes.CDLL(lib_path)
    lib.priocclGetConstant.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
    expected = header_constants(open(header).read())
    failures = []
    if len(expected) < 50:
        failures.append(f"only {len(expected)} constants parsed from {header}: the parser broke")
    value = ctypes.c_int()
    for name, want in sorted(expected.items()):
        rc = lib.priocclGetConstant(name.encode(), ctypes.byref(value))
        if rc != 0:
            failures.append(f"{name}: priocclGetConstant returned {rc}")
        elif value.value != want:
            failures.append(f"{name}: library says {value.value}, header {want}")
    if lib.priocclGetConstant(b"priocclNoSuchThing", ctypes.byref(value)) != 4:
        failures.append("an unknown name is not priocclInvalidArgument (4)")
    if lib.priocclGetConstant(None, ctypes.byref(value)) != 4:
        failures.append("a NULL name is not priocclInvalidArgument (4)")
    sys.path.insert(0, package_dir)
    from prioccl import _constants  # names only: importing it loads no library
    for name in _constants.names():
        if name not in expected:
            failures.append(f"prioccl/_constants.py asks for {name}, which prioccl.h lacks")
    for f in failures:
        print("FAIL:", f)
    print(f"CONSTANTS checked={len(expected)} python_names={len(_constants.names())} "
          f"failures={len(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
