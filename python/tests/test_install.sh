#!/usr/bin/env bash
# The Python package installed, end to end, on 2 ranks (Debian's /usr/bin/python3 and numpy):
#  (a) `cmake --install BUILD --prefix P`, PYTHONPATH=P/<python dir>, no PRIOCCL_LIBRARY: prioccl
#      must come from P and load P's library (its loaded_path and the mapped file), not the
#      build tree's;
#  (b) a `python3 -m venv --system-site-packages` with
#      `pip install --no-index --no-build-isolation ./python`, PRIOCCL_LIBRARY=BUILD's library:
#      prioccl from the venv, that library, the version CMakeLists.txt's project() names;
#      then the same venv reinstalled with build isolation from Debian's wheels
#      (`--no-index --find-links /usr/share/python-wheels`), import and load only.
# Both do an allreduce (Sum) and check the value. The installed package without its library
# must fail with an OSError naming every place tried. pip never reaches the network (--no-index,
# no pip configuration). Exits 77 after a SKIPPED line when a Debian package it needs is missing
# (scripts/setup.sh --test installs them).
# Usage: test_install.sh BUILD_DIR SOURCE_DIR   (MPIRUN may name the mpirun wrapper)
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
mpirun=(${MPIRUN:-$src/scripts/mpirun-local})
py=/usr/bin/python3
skipped=()
skip() { echo "SKIPPED: $* (scripts/setup.sh --test installs it)"; exit 77; }
[[ -x $py ]] || skip "no $py (python3)"
$py -c 'import numpy' 2>/dev/null || skip "no numpy for $py (python3-numpy)"
command -v mpirun >/dev/null || skip "no mpirun (openmpi-bin)"
[[ -e $build/libprioccl.so ]] || { echo "FAIL: no $build/libprioccl.so: build first"; exit 1; }
version=$(sed -nE 's/^project\(prioccl VERSION ([0-9.]+).*/\1/p' "$src/CMakeLists.txt")
[[ -n $version ]] || { echo "FAIL: no project(prioccl VERSION ...) in $src/CMakeLists.txt"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # nothing of the source tree on sys.path through the current directory
unset PRIOCCL_LIBRARY PYTHONPATH PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONNOUSERSITE=1

# What each rank checks: argv = where prioccl must come from, the library (a file, or a
# directory it must lie under), the package version ('-': none recorded).
cat >check.py <<'EOF'
import importlib.metadata, os, sys
import numpy
import prioccl

pkg_dir, lib_want, version = sys.argv[1:4]
real = os.path.realpath
def inside(path, where):
    return real(path) == real(where) or real(path).startswith(real(where) + os.sep)
prioccl.init()
r, p = prioccl.rank(), prioccl.size()
fails = []
out = prioccl.allreduce(numpy.arange(6, dtype=numpy.float64) * (r + 1), op=prioccl.Sum)
want = numpy.arange(6) * (p * (p + 1) // 2)
if p != 2 or not numpy.array_equal(out, want):
    fails.append(f"allreduce on {p} ranks gave {out}, expected {want}")
if not inside(prioccl.__file__, pkg_dir):
    fails.append(f"prioccl imported from {prioccl.__file__}, not under {pkg_dir}")
loaded = prioccl._lib.loaded_path
if loaded is None or not inside(loaded, lib_want):
    fails.append(f"prioccl._lib.loaded_path is {loaded}, expected {lib_want}")
with open("/proc/self/maps") as f:
    mapped = {l.split(None, 5)[5].strip() for l in f if "libprioccl" in l and len(l.split()) == 6}
if not mapped or not all(inside(m, lib_want) for m in mapped):
    fails.append(f"mapped libprioccl files {sorted(mapped)}, expected {lib_want}")
if version != "-":
    got = importlib.metadata.version("prioccl")
    if got != version:
        fails.append(f"installed prioccl version {got}, CMakeLists.txt says {version}")
prioccl.shutdown()
for f in fails:
    print(f"[rank {r}] FAIL: {f}", flush=True)
if fails:
    sys.exit(1)
if r == 0:  # the others' failures are printed above; one line keeps the output readable
    print(f"ok on {p} ranks: prioccl {prioccl.__file__}, library {loaded} "
          f"({sorted(mapped)[0]}), allreduce {out.tolist()}", flush=True)
EOF

# ---- (a) cmake --install ----
cmake --install "$build" --prefix "$work/prefix" >/dev/null
pkg=$(find "$work/prefix" -path '*-packages/prioccl/__init__.py' -printf '%h\n')
[[ -n $pkg && $(wc -l <<<"$pkg") == 1 ]] || { echo "FAIL: cmake --install put no (or several) prioccl packages: '$pkg'"; exit 1; }
echo "(a) installed package: ${pkg#$work/prefix/}"
leftovers=$(find "$pkg" -name __pycache__ -o -name '*.pyc')
[[ -z $leftovers ]] || { echo "FAIL: installed byte code: $leftovers"; exit 1; }
for f in __init__.py _lib.py pipeline.py torch/__init__.py; do
  cmp -s "$src/python/prioccl/$f" "$pkg/$f" || { echo "FAIL: $pkg/$f differs from the source"; exit 1; }
done
PYTHONPATH=$(dirname "$pkg") "${mpirun[@]}" -np 2 $py "$work/check.py" "$pkg" "$work/prefix" -
# Without its library the installed package must fail and say where it looked.
for f in "$work"/prefix/lib*/libprioccl.so* "$work"/prefix/lib/*/libprioccl.so*; do
  [[ -e $f || -L $f ]] && mv "$f" "$work/"
done
set +e
msg=$(PYTHONPATH=$(dirname "$pkg") $py -c 'import prioccl._lib as l; l.load(); print("LOADED", l.loaded_path)' 2>&1)
set -e
if [[ $msg == LOADED* ]]; then
  # A libprioccl.so.1 installed system-wide may answer the loader's fallback: acceptable, as
  # long as it is not the scratch prefix's.
  [[ $msg != *"$work/prefix"* ]] || { echo "FAIL: loaded a library that was moved away: $msg"; exit 1; }
  echo "(a) without the prefix's library: the system's loader found one (${msg#LOADED })"
else
  for want in "OSError: cannot load libprioccl.so" "PRIOCCL_LIBRARY: unset" \
              "$work/prefix/lib/libprioccl.so.1: no such file" "libprioccl.so.1 (system loader)"; do
    [[ $msg == *"$want"* ]] || { echo "FAIL: the error without a library does not name '$want': $msg"; exit 1; }
  done
  echo "(a) without the prefix's library: ${msg##*$'\n'}"
fi

# ---- (b) pip into a venv ----
if ! $py -c 'import ensurepip, venv' 2>/dev/null; then
  skipped+=("no venv/ensurepip for $py (python3-venv): pip route not checked")
elif ! $py -c 'import setuptools, wheel' 2>/dev/null; then
  skipped+=("no setuptools/wheel for $py (python3-setuptools, python3-wheel): pip route not checked")
else
  # The source's package only (no tests, byte code or earlier pip build output), so pip's
  # in-tree build writes nothing into the source tree.
  mkdir python
  cp "$src/python/pyproject.toml" python/
  cp -r "$src/python/prioccl" python/
  find python -name __pycache__ -prune -exec rm -rf {} +
  $py -m venv --system-site-packages venv
  venv/bin/pip install -q --no-index --no-build-isolation ./python
  echo "(b) pip install --no-index --no-build-isolation ./python: $(venv/bin/pip show prioccl | grep -E '^(Name|Version|Location)' | tr '\n' ' ')"
  site=$(venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  PRIOCCL_LIBRARY=$build/libprioccl.so "${mpirun[@]}" -np 2 venv/bin/python "$work/check.py" \
    "$site/prioccl" "$build/libprioccl.so" "$version"
  # Build isolation, offline: setuptools and wheel from Debian's wheels.
  if compgen -G '/usr/share/python-wheels/setuptools-*.whl' >/dev/null &&
     compgen -G '/usr/share/python-wheels/wheel-*.whl' >/dev/null; then
    venv/bin/pip uninstall -q -y prioccl
    rm -rf python/build python/*.egg-info
    venv/bin/pip install -q --no-index --find-links /usr/share/python-wheels ./python
    got=$(PRIOCCL_LIBRARY=$build/libprioccl.so venv/bin/python -c '
import importlib.metadata, prioccl
prioccl._lib.load()
print(importlib.metadata.version("prioccl"), prioccl.__file__, prioccl._lib.loaded_path)')
    [[ $got == "$version $site/prioccl/__init__.py $build/libprioccl.so" ]] ||
      { echo "FAIL: after the isolated pip install: '$got'"; exit 1; }
    echo "(b) pip install --no-index --find-links /usr/share/python-wheels ./python: $got"
  else
    skipped+=("no setuptools/wheel wheels in /usr/share/python-wheels (python3-setuptools-whl, python3-wheel-whl): isolated pip build not checked")
  fi
fi

if ((${#skipped[@]})); then
  for s in "${skipped[@]}"; do echo "SKIPPED: $s (scripts/setup.sh --test installs it)"; done
  exit 77
fi
echo "python.install: cmake --install and pip install routes OK"
