#!/usr/bin/env bash
# The GPU kit: everything prioccl's GPU checks need on a bare GPU machine (CUDA, NCCL and a
# Python with a CUDA torch there; no MPI, UCX, hwloc or package manager assumed), in one folder.
#   scripts/gpu-kit.sh pack DIR [--build BUILD_DIR]
# builds prioccl with CUDA in BUILD_DIR (default build-gpukit/, Release; an existing build, e.g.
# the test suite's, is reused as it is) and fills DIR with:
#   bin/      the GPU tests and perf tools          lib/      libprioccl and every library they
#   ompi/     Open MPI's launcher and components              need that the GPU machine may lack
#   pmix/     PMIx's components and help files      python/   the prioccl package
#   tests/    the Python GPU test                   run.sh    runs every check (run.sh --help)
# Then it checks that every binary in DIR resolves its libraries inside DIR, from the C/C++
# runtime every Linux has, or from the GPU machine's CUDA/NCCL, and that DIR is at most 60 MiB.
# On the GPU machine: copy DIR there, then `DIR/run.sh OUTDIR` (docs/testing.md, "GPU kit").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { echo "usage: gpu-kit.sh pack DIR [--build BUILD_DIR]" >&2; exit 2; }
[[ ${1:-} == pack && -n ${2:-} ]] || usage
kit=$2
shift 2
build=$root/build-gpukit
while (($#)); do
  case $1 in
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    *) usage ;;
  esac
done
limit_mib=60
# The libraries a GPU machine is sure to have: the C and C++ runtimes, and the GPU stack itself.
base_libs='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libutil\.so\.1|libresolv\.so\.2|libgcc_s\.so\.1|libstdc\+\+\.so\.6)$'
gpu_libs='^(libcuda\.so\.1|libcudart\.so\.13|libnccl\.so\.2)$'
targets=(prioccl test_device_buffers test_reduce_kernels test_nccl_backend gpu_perf)

if [[ ! -f $build/CMakeCache.txt ]]; then
  echo "gpu-kit: configuring $build (Release, CUDA)"
  "$root/scripts/setup.sh" --test
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$build.configure.log" 2>&1 ||
    { cat "$build.configure.log" >&2; exit 1; }
fi
grep -q '^PRIOCCL_WITH_NCCL:BOOL=ON' "$build/CMakeCache.txt" ||
  { echo "gpu-kit: $build was configured without CUDA/NCCL (the toolkit's nccl.h is needed)" >&2; exit 1; }
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$build/gpu-kit-build.log" 2>&1 ||
  { tail -40 "$build/gpu-kit-build.log" >&2; exit 1; }

rm -rf "$kit"
mkdir -p "$kit"/{bin,lib,ompi/bin,ompi/etc,ompi/share,pmix/lib,pmix/share,python,tests}
kit=$(cd "$kit" && pwd)
copy_elf() {  # copy_elf FILE DEST_DIR: a stripped copy, symlinks resolved
  local dest=$2/$(basename "$1")
  cp -L "$1" "$dest"
  chmod u+w "$dest"
  (strip --strip-unneeded "$dest") >/dev/null 2>&1 || true
}
for t in test_device_buffers test_reduce_kernels test_nccl_backend gpu_perf; do
  f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [[ -n $f ]] || { echo "gpu-kit: $t was not built in $build" >&2; exit 1; }
  copy_elf "$f" "$kit/bin"
done
lib=$(find "$build" -maxdepth 1 -name 'libprioccl.so.*' -type f | head -1)
[[ -n $lib ]] || { echo "gpu-kit: libprioccl was not built in $build" >&2; exit 1; }
copy_elf "$lib" "$kit/lib"
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[[ $(basename "$lib") == "$soname" ]] || ln -sf "$(basename "$lib")" "$kit/lib/$soname"
ln -sf "$soname" "$kit/lib/libprioccl.so"
cp -r "$root/python/prioccl" "$kit/python/"
find "$kit/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$root/tests/gpu/test_python_cuda.py" "$root/python/tests/checks.py" "$kit/tests/"
cp "$root/scripts/gpu-kit/run.sh" "$kit/run.sh"
chmod +x "$kit/run.sh"
git -C "$root" describe --always --dirty >"$kit/COMMIT" 2>/dev/null || echo unknown >"$kit/COMMIT"

# Open MPI (relocated with OPAL_PREFIX=ompi) and its PMIx (PMIX_INSTALL_PREFIX=pmix). Debian's
# layout: the launcher in /usr/bin, components in $libdir/openmpi/lib/openmpi3, help files in
# /usr/share/openmpi; PMIx under /usr/lib/x86_64-linux-gnu/pmix2.
ompi_info=$(command -v ompi_info) || { echo "gpu-kit: Open MPI is not installed" >&2; exit 1; }
ompi_path() { "$ompi_info" --path "$1" --parsable | sed -n "s/^path:$1://p"; }
ompi_prefix=$(ompi_path prefix)
ompi_bindir=$(ompi_path bindir)
ompi_pkglibdir=$(ompi_path pkglibdir)
ompi_pkgdatadir=$(ompi_path pkgdatadir)
rel_pkglibdir=${ompi_pkglibdir#"$ompi_prefix"/}
mkdir -p "$kit/ompi/$rel_pkglibdir" "$kit/ompi/share/openmpi"
for exe in orterun orted; do copy_elf "$ompi_bindir/$exe" "$kit/ompi/bin"; done
ln -sf orterun "$kit/ompi/bin/mpirun"
ln -sf orterun "$kit/ompi/bin/mpiexec"
cp "$ompi_pkgdatadir"/*.txt "$kit/ompi/share/openmpi/" 2>/dev/null || true
cp -r "$ompi_pkgdatadir"/amca-param-sets "$kit/ompi/share/openmpi/" 2>/dev/null || true
for c in "$ompi_pkglibdir"/mca_*.so; do copy_elf "$c" "$kit/ompi/$rel_pkglibdir"; done
# PMIx's own prefix, as Open MPI was configured with it (--with-pmix=DIR).
pmix_prefix=$("$ompi_info" | sed -n "s/.*'--with-pmix=\([^']*\)'.*/\1/p")
if [[ -d $pmix_prefix/lib/pmix ]]; then
  mkdir -p "$kit/pmix/lib/pmix"
  for c in "$pmix_prefix"/lib/pmix/*.so; do copy_elf "$c" "$kit/pmix/lib/pmix"; done
  cp -r "$pmix_prefix"/share/. "$kit/pmix/share/"
fi
# The kit's own MCA defaults, in place of whatever /etc/openmpi holds on the GPU machine: shared
# memory and TCP over loopback only (the GPU machine has no network), no warnings about the
# high-speed components this kit leaves out.
cat >"$kit/ompi/etc/openmpi-mca-params.conf" <<'EOF'
btl = self,vader,tcp
pml = ob1
btl_tcp_if_include = lo
oob_tcp_if_include = lo
btl_base_warn_component_unused = 0
mca_base_component_show_load_errors = 0
EOF
# UCX's transport modules, found beside libucs in lib/ucx.
ucs=$(ldd "$kit/lib/$soname" | awk '/libucs\.so/ {print $3}')
if [[ -n $ucs && -d $(dirname "$ucs")/ucx ]]; then
  mkdir -p "$kit/lib/ucx"
  # UCX opens each module by its versioned name (libuct_cma.so.0).
  for m in "$(dirname "$ucs")"/ucx/*.so.0; do [[ -e $m ]] && copy_elf "$m" "$kit/lib/ucx"; done
fi

# Library closure: copy every library an ELF file in the kit needs that is neither in the kit nor
# among the base or GPU libraries, until nothing is missing. Plugins (Open MPI and PMIx components,
# UCX modules) whose needs reach beyond that (InfiniBand verbs, libfabric, PSM, Java...) are left
# out: they are optional, and a GPU machine with such hardware has its own MPI.
export LD_LIBRARY_PATH=$kit/lib
is_plugin() { [[ $1 == "$kit/ompi/$rel_pkglibdir/"* || $1 == "$kit/pmix/lib/pmix/"* || $1 == "$kit/lib/ucx/"* ]]; }
elves() { find "$kit" -type f \( -name '*.so*' -o -perm -u+x \) ! -name '*.sh' ! -name '*.py' |
          while read -r f; do head -c4 "$f" | grep -q ELF && echo "$f"; done; }
needs() { ldd "$1" 2>/dev/null | awk '/=>/ {print $1, $3}'; }
# Libraries a plugin may bring in (beyond them it is dropped); the closure then adds their needs.
core_libs='^(libmpi|libopen-(rte|pal)|libmca_common_(sm|monitoring|ompio)|libpmix|libhwloc|libevent|libuc[pstm]\.|libz\.|libudev|libltdl|libnuma|libmunge|libcap)'
add_lib() {  # add_lib NAME PATH
  cp -L "$2" "$kit/lib/$1"
  chmod u+w "$kit/lib/$1"  # a distribution's libraries come stripped already
}
close_libs() {  # until nothing is missing from what the kit's non-plugin files need
  local pass added f name path
  for pass in 1 2 3 4 5 6 7 8; do
    added=0
    while read -r f; do
      is_plugin "$f" && continue
      while read -r name path; do
        [[ $name =~ $base_libs || $name =~ $gpu_libs || -e $kit/lib/$name ]] && continue
        [[ $path == /* ]] || { echo "gpu-kit: $f needs $name, which is not found here" >&2; exit 1; }
        add_lib "$name" "$path"
        added=1
      done < <(needs "$f")
    done < <(elves)
    ((added)) || return 0
  done
}
close_libs
dropped=()
while read -r f; do
  is_plugin "$f" || continue
  while read -r name path; do
    [[ $name =~ $base_libs || $name =~ $gpu_libs || -e $kit/lib/$name ]] && continue
    if [[ $name =~ $core_libs && $path == /* ]]; then
      add_lib "$name" "$path"
    else
      dropped+=("$(basename "$f") ($name)")
      rm -f "$f"
      break
    fi
  done < <(needs "$f")
done < <(elves)
close_libs
printf '%s\n' "${dropped[@]}" >"$kit/DROPPED_PLUGINS"

# The checks: every library resolved inside the kit, or a base/GPU library; the size.
bad=0
while read -r f; do
  while read -r name path; do
    [[ $name =~ $base_libs || $name =~ $gpu_libs ]] && continue
    if [[ $path != "$kit"/* ]]; then
      echo "gpu-kit: FAIL: $f resolves $name to ${path:-nothing} (outside the kit)" >&2
      bad=1
    fi
  done < <(needs "$f")
done < <(elves)
((bad == 0)) || exit 1
size_kib=$(du -sk "$kit" | cut -f1)
if ((size_kib > limit_mib * 1024)); then
  echo "gpu-kit: FAIL: the kit is $((size_kib / 1024)) MiB, over its $limit_mib MiB" >&2
  exit 1
fi
echo "gpu-kit: packed $kit ($((size_kib / 1024)) MiB, $(elves | wc -l) ELF files resolved inside" \
     "it or from the base/GPU libraries; ${#dropped[@]} optional plugins left out, listed in DROPPED_PLUGINS)"
