#!/bin/sh
# romio_suite_test.sh: ROMIO's own test programs (romio/test/*.c of the same Debian source
# package the driver is built from) run with a jobfs: file name through ad_jobfs, and the same
# programs with a ufs: name on the local disk through the stock romio321 as the control.
# Each listed program must pass on both (it prints " No Errors" and mpirun exits 0), and its
# jobfs run must have gone through ad_jobfs (JOBFS_ROMIO_TRACE lines).
#
# Not run, and why (identical on the stock driver, see ../shared/research/romio-driver.md):
#   error       looks for MPICH's wording ("displacement") in an Open MPI error message
#   coll_perf   segfaults in Open MPI's unpack (open-mpi/ompi#8246) on ufs as well
#   large_array, large_file   write 4 GB each (more than the CI disk budget)
#   external32  opens a hard-coded local name with fopen: no prefix possible
#   f*.f        Fortran (Debian's Open MPI headers are used from C only here)
# and one that passes on ufs but is left out on purpose:
#   shared_fp   reads, right after a barrier, what the other ranks wrote with no MPI_File_sync
#               in between: outside MPI's consistency rules (sync-barrier-sync, or atomic
#               mode). jobfs settles a file's length at sync and close (docs/design.md), so
#               the readers stop at the old end. Shared file pointers themselves are tested
#               by ordered_fp and split_coll's neighbours here, and by romio_test.sh.
set -u
JOBFS=${JOBFS:-./client/jobfs}
export JOBFSD=${JOBFSD:-./server/jobfsd}
COMPONENT_DIR=${ROMIO_COMPONENT_DIR:-$(pwd)/romio-adio}
SRC=${ROMIO_TEST_SRC:-$(cat romio-adio/build/source.path 2>/dev/null)/romio/test}
dir=$(mktemp -d /tmp/jobfs-romiot-XXXXXX)
rm -rf "$dir"
tmp=$(mktemp -d /tmp/jobfs-romiot-files-XXXXXX)
. "$(dirname "$0")/lib.sh"
cleanup() { "$JOBFS" local down --dir "$dir" >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 1' INT TERM

mpi_env "$COMPONENT_DIR"

# program, ranks, how it takes the file name (runtests' way)
tests="${ROMIO_TESTS:-simple 4 -fname
async 4 -fname
async-multiple 4 -fname
atomicity 4 -fname
coll_test 4 -fname
excl 4 -fname
file_info 4 -fname
i_noncontig 2 -fname
noncontig 2 -fname
noncontig_coll 2 -fname
noncontig_coll2 4 -fname
misc 4 -fname
ordered_fp 4 -fname
split_coll 4 -fname
psimple 4 -fname
status 1 -fname
aggregation1 4 -f
aggregation2 4 -
hindexed 4 -
types_with_zeros 2 -
darray_read 4 -}"

check "ROMIO's test sources are there ($SRC)" test -f "$SRC/simple.c"
[ -f "$SRC/simple.c" ] || exit 1

# Five programs still use MPI-1 names that Open MPI 4 leaves out of mpi.h (MPI_LB, MPI_UB,
# MPI_Type_hindexed...); libmpi.so.40 still exports them, so declare them back.
cat > "$tmp/mpi1compat.h" <<'EOF'
#include <mpi.h>
#ifndef MPI_LB
OMPI_DECLSPEC extern struct ompi_predefined_datatype_t ompi_mpi_lb;
OMPI_DECLSPEC extern struct ompi_predefined_datatype_t ompi_mpi_ub;
#define MPI_LB OMPI_PREDEFINED_GLOBAL(MPI_Datatype, ompi_mpi_lb)
#define MPI_UB OMPI_PREDEFINED_GLOBAL(MPI_Datatype, ompi_mpi_ub)
#endif
EOF
built=0
echo "$tests" | while read -r prog np how; do
  mpicc -O1 -w -DOMPI_OMIT_MPI1_COMPAT_DECLS=0 -include "$tmp/mpi1compat.h" -I"$SRC" \
    -o "$tmp/$prog" "$SRC/$prog.c" -lm > "$tmp/$prog.cc.log" 2>&1 || { echo "# cannot build $prog"; sed 's/^/# /' "$tmp/$prog.cc.log"; }
done
for prog in $(echo "$tests" | awk '{print $1}'); do [ -x "$tmp/$prog" ] && built=$((built + 1)); done
check "all $(echo "$tests" | wc -l) listed programs built with mpicc" test "$built" -eq "$(echo "$tests" | wc -l)"

check "local up" sh -c "'$JOBFS' local up -n 3 --dir '$dir' > '$tmp/up.out'"
export JOBFS_CLUSTER=$dir/cluster
check "mkdir /romiot" "$JOBFS" mkdir /romiot
mkdir -p "$tmp/ufs"

# run PROG NP HOW NAME [MPIRUN ARGS]: true if it passed; output in $tmp/PROG.<fs>.{out,err}
# (mpirun reads standard input: give it none, the list of programs is read from there)
run() {
  prog=$1 np=$2 how=$3 file=$4 fs=${4%%:*}; shift 4
  if [ "$how" = - ]; then args=$file; else args="$how $file"; fi
  (cd "$tmp" && JOBFS_ROMIO_TRACE=1 timeout -k 10 180 mpirun --allow-run-as-root --oversubscribe -np "$np" "$@" \
     "./$prog" $args < /dev/null > "$prog.$fs.out" 2> "$prog.$fs.err")
  rc=$?
  if [ "$rc" -eq 0 ] && grep -q 'No Errors' "$tmp/$prog.$fs.out"; then return 0; fi
  # The program's own output and errors first; the driver's trace lines (many) only at the end.
  echo "# $prog on $fs: mpirun exited $rc"
  { cat "$tmp/$prog.$fs.out"; grep -v '^\[ad_jobfs ' "$tmp/$prog.$fs.err"; } | head -40 | sed 's/^/# /'
  grep '^\[ad_jobfs ' "$tmp/$prog.$fs.err" | tail -n 10 | sed 's/^/# /'
  return 1
}

echo "$tests" > "$tmp/list"
while read -r prog np how; do
  [ -x "$tmp/$prog" ] || continue
  check "$prog ($np ranks) passes on ufs: (control, stock romio321)" run "$prog" "$np" "$how" "ufs:$tmp/ufs/$prog" --mca io romio321
  check "$prog ($np ranks) passes on jobfs:" run "$prog" "$np" "$how" "jobfs:/romiot/$prog"
  check "$prog: its jobfs: run went through ad_jobfs" grep -q '^\[ad_jobfs [0-9]*\] open /romiot/' "$tmp/$prog.jobfs.err"
done < "$tmp/list"

exit $((fails > 0))
