#!/bin/sh
# romio-adio/build-component.sh: builds mca_io_romio_jobfs.so, Open MPI's ROMIO io component
# renamed (romio321 -> romio_jobfs) with the jobfs ADIO driver in it, out of tree against the
# installed Open MPI headers. Run by make (romio-adio/local.mk); stages that are done are kept,
# so after the first build only the driver and the glue are compiled again (a few seconds).
#
#   build-component.sh --srcdir=DIR --builddir=DIR --jobfs-include=DIR --jobfs-libdir=DIR
#                      [--rpath=DIR] [--romio-source=DIR]
#
# Stages, each under --builddir:
#  1. source   ROMIO from --romio-source (an Open MPI source tree, or its ompi/mca/io/romio321)
#              or, by default, `apt-get source` of the Debian source package of the installed
#              libopenmpi-dev; the tree's VERSION must equal `ompi_info`'s version.
#  2. tree     a copy of romio321 in a fake Open MPI tree (ROMIO's configure wants
#              config/opal_mca.m4 five levels up) with patches/romio-jobfs-core.patch (the
#              ADIO_JOBFS id and the "jobfs:" prefix, under -DROMIO_JOBFS), and the component
#              glue renamed with sed plus patches/glue-jobfs-priority.patch.
#  3. configure ROMIO's own configure (the flags Open MPI's configure.m4 passes, Debian's way).
#  4. lib      make libromio_dist.la (a PIC convenience archive).
#  5. component compile the glue and ad_jobfs*.c, link with a version script exporting only
#              mca_io_romio_jobfs_component (the system romio321 is loaded RTLD_GLOBAL next to
#              it; any other exported ROMIO symbol would bind to the wrong copy).
set -eu
srcdir= builddir= jobfs_include= jobfs_libdir= rpath= romio_source=
for a in "$@"; do
  case $a in
    --srcdir=*) srcdir=${a#*=} ;;
    --builddir=*) builddir=${a#*=} ;;
    --jobfs-include=*) jobfs_include=${a#*=} ;;
    --jobfs-libdir=*) jobfs_libdir=${a#*=} ;;
    --rpath=*) rpath=${a#*=} ;;
    --romio-source=*) romio_source=${a#*=} ;;
    *) echo "build-component.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
: "${srcdir:?--srcdir}" "${builddir:?--builddir}" "${jobfs_include:?--jobfs-include}" "${jobfs_libdir:?--jobfs-libdir}"
srcdir=$(cd "$srcdir" && pwd)
mkdir -p "$builddir"
B=$(cd "$builddir" && pwd)
MAKE=${MAKE:-make}
CC=${ROMIO_CC:-gcc}
INC=${OMPI_INCDIR:-$(mpicc --showme:incdirs | tr ' ' '\n' | grep -v '/openmpi$' | head -n 1)}
LIB=${OMPI_LIBDIR:-$(mpicc --showme:libdirs | tr ' ' '\n' | head -n 1)}
ROMIO_CFLAGS="-DNDEBUG -g -O2 -fno-strict-aliasing -D__EXTENSIONS__ -DROMIO_JOBFS"
say() { echo "romio_jobfs: $*"; }

ompi_version=$(ompi_info --parsable | sed -n 's/^ompi:version:full://p')
[ -n "$ompi_version" ] || { echo "romio_jobfs: ompi_info gives no version" >&2; exit 1; }

# ---- 1. source ------------------------------------------------------------------------------
tree_version() { # OMPI_TREE: prints major.minor.release from its VERSION file
  sed -n 's/^major=//p; s/^minor=//p; s/^release=//p' "$1/VERSION" | paste -sd. -
}
if [ ! -f "$B/source.stamp" ]; then
  if [ -n "$romio_source" ]; then
    src=$(cd "$romio_source" && pwd)
    if [ -d "$src/ompi/mca/io/romio321/romio" ]; then
      top=$src; romio321=$src/ompi/mca/io/romio321
    elif [ -d "$src/romio" ] && [ -d "$src/src" ]; then
      romio321=$src; top=$(cd "$src/../../../.." && pwd)
    else
      echo "romio_jobfs: $romio_source is neither an Open MPI source tree nor its ompi/mca/io/romio321" >&2
      exit 1
    fi
  else
    pkg=$(dpkg-query -W -f='${source:Package}' libopenmpi-dev)
    ver=$(dpkg-query -W -f='${source:Version}' libopenmpi-dev)
    say "fetching ROMIO: apt-get source $pkg=$ver"
    rm -rf "$B/debsrc"; mkdir -p "$B/debsrc"
    if ! (cd "$B/debsrc" && apt-get source -q "$pkg=$ver" > apt-get.log 2>&1); then
      sed 's/^/  /' "$B/debsrc/apt-get.log" >&2
      echo "romio_jobfs: apt-get source $pkg=$ver failed: it needs deb-src entries and dpkg-dev (scripts/install-deps adds both), or configure --with-romio-source=DIR" >&2
      exit 1
    fi
    top=$(find "$B/debsrc" -mindepth 1 -maxdepth 1 -type d -name "$pkg-*" | head -n 1)
    romio321=$top/ompi/mca/io/romio321
  fi
  [ -d "$romio321/romio/adio" ] || { echo "romio_jobfs: no ROMIO in $romio321" >&2; exit 1; }
  if [ -f "$top/VERSION" ]; then
    v=$(tree_version "$top")
    if [ "$v" != "$ompi_version" ]; then
      echo "romio_jobfs: the ROMIO source is from Open MPI $v, the installed Open MPI is $ompi_version" >&2
      exit 1
    fi
  else
    say "warning: no VERSION file next to $romio321; cannot check it against Open MPI $ompi_version"
  fi
  echo "$romio321" > "$B/source.path"
  touch "$B/source.stamp"
  rm -f "$B/tree.stamp"
fi
romio321=$(cat "$B/source.path")

# ---- 2. tree --------------------------------------------------------------------------------
C=$B/tree/ompi/mca/io/romio_jobfs
patches_sum=$(cat "$srcdir/patches/romio-jobfs-core.patch" "$srcdir/patches/glue-jobfs-priority.patch" | cksum)
if [ ! -f "$B/tree.stamp" ] || [ "$(cat "$B/tree.stamp")" != "$patches_sum" ]; then
  say "preparing the component tree"
  rm -rf "$B/tree" "$B/configure.stamp" "$B/lib.stamp"
  mkdir -p "$B/tree/config" "$C/src"
  : > "$B/tree/config/opal_mca.m4"
  cp -pR "$romio321/romio" "$C/romio"   # -p: keep the times, or make reruns automake
  patch -s -d "$C/romio" -p1 < "$srcdir/patches/romio-jobfs-core.patch"
  for f in "$romio321"/src/io_romio321*; do
    n=$(basename "$f" | sed 's/romio321/romio_jobfs/')
    sed 's/romio321/romio_jobfs/g; s/ROMIO321/ROMIO_JOBFS/g' "$f" > "$C/src/$n"
  done
  patch -s -d "$C/src" -p1 < "$srcdir/patches/glue-jobfs-priority.patch"
  echo "$patches_sum" > "$B/tree.stamp"
fi

# ---- 3. configure ---------------------------------------------------------------------------
if [ ! -f "$B/configure.stamp" ]; then
  say "configuring ROMIO"
  (cd "$C/romio" && ./configure -q FROM_OMPI=yes CC="$CC" CFLAGS="$ROMIO_CFLAGS" \
      CPPFLAGS="-I$INC/openmpi -I$INC" --enable-shared --disable-static --disable-aio \
      --disable-weak-symbols --disable-f77 --disable-f90) > "$B/configure.log" 2>&1 || {
    tail -n 30 "$B/configure.log" >&2; echo "romio_jobfs: ROMIO's configure failed (see $B/configure.log)" >&2; exit 1; }
  touch "$B/configure.stamp"
  rm -f "$B/lib.stamp"
fi

# ---- 4. lib ---------------------------------------------------------------------------------
if [ ! -f "$B/lib.stamp" ]; then
  say "building ROMIO (libromio_dist.la)"
  (cd "$C/romio" && $MAKE ACLOCAL=true AUTOMAKE=true AUTOCONF=true AUTOHEADER=true libromio_dist.la) > "$B/make.log" 2>&1 || {
    tail -n 30 "$B/make.log" >&2; echo "romio_jobfs: building ROMIO failed (see $B/make.log)" >&2; exit 1; }
  touch "$B/lib.stamp"
fi

# ---- 5. component ---------------------------------------------------------------------------
CPP="-DOMPI_BUILDING=1 -DHAVE_ROMIOCONF_H -I$INC/openmpi -I$INC -I$C -I$C/romio/include -I$C/romio/adio/include"
objs=
for f in "$C"/src/io_romio_jobfs_*.c "$srcdir/ad_jobfs.c" "$srcdir/ad_jobfs_shared.c"; do
  o=$B/obj/$(basename "$f" .c).o
  mkdir -p "$B/obj"
  if [ ! -f "$o" ] || [ "$f" -nt "$o" ] || [ "$srcdir/ad_jobfs.h" -nt "$o" ]; then
    $CC $ROMIO_CFLAGS -Wall -fPIC -fvisibility=hidden $CPP -I"$srcdir" -I"$jobfs_include" -c "$f" -o "$o"
  fi
  objs="$objs $o"
done
echo '{ global: mca_io_romio_jobfs_component; local: *; };' > "$B/component.map"
rp=
[ -n "$rpath" ] && rp="-Wl,-rpath,$rpath -Wl,--enable-new-dtags"
# shellcheck disable=SC2086
$CC -shared -o "$B/mca_io_romio_jobfs.so.tmp" $objs \
  -Wl,--whole-archive "$C/romio/.libs/libromio_dist.a" -Wl,--no-whole-archive \
  -Wl,--version-script="$B/component.map" -Wl,-z,defs \
  -L"$LIB" -lmpi -lopen-pal -L"$jobfs_libdir" -ljobfs $rp
exported=$(nm -D --defined-only "$B/mca_io_romio_jobfs.so.tmp" | awk '{ print $NF }')
if [ "$exported" != "mca_io_romio_jobfs_component" ]; then
  echo "romio_jobfs: the component exports more than its component symbol:" $exported >&2
  exit 1
fi
mv "$B/mca_io_romio_jobfs.so.tmp" "$B/mca_io_romio_jobfs.so"
say "built $B/mca_io_romio_jobfs.so"
