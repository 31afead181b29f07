# bench/lib.sh: helpers shared by the benchmark scripts (sourced, not run).

# Finds a jobfs program: $JOBFS_BENCH_BIN, then an installed tree, then a build tree.
bench_find() {
  name=$1
  for d in ${JOBFS_BENCH_BIN:-} /usr/local/libexec/jobfs /usr/libexec/jobfs /usr/local/bin /usr/local/sbin \
           "$BENCH_DIR/../build/bench" "$BENCH_DIR/../build/client" "$BENCH_DIR/../bench"; do
    if [ -x "$d/$name" ]; then echo "$d/$name"; return 0; fi
  done
  echo "bench: $name not found; build and install jobfs first (make install), or set JOBFS_BENCH_BIN" >&2
  return 1
}

# A TCP port that nothing listens on right now.
bench_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# bench_mpi_env PROG: the environment mpirun needs for the ROMIO driver, as root: when PROG
# (jobfs-bench-romio) is in a build tree, that tree's component and libjobfs (an installed one
# is where Open MPI looks by itself).
bench_mpi_env() {
  _top=$(cd "$(dirname "$1")/.." && pwd)
  if [ -f "$_top/romio-adio/mca_io_romio_jobfs.so" ]; then
    export OMPI_MCA_mca_base_component_path="$_top/romio-adio:$(ompi_info --path pkglibdir | sed 's/^.*: *//')"
    export LD_LIBRARY_PATH="$_top/client/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

# bench_max A B: the larger of two figures (rounds of a benchmark keep each side's best).
bench_max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b) ? a : b }'; }

bench_progress() { printf 'bench: %s\n' "$*" >&2; }

# bench_line NAME VALUE BASELINE UNIT: prints the summary line with the ratio
# jobfs/baseline (for latencies the ratio is still jobfs/baseline: lower is better there).
bench_line() {
  awk -v n="$1" -v j="$2" -v b="$3" -v u="$4" 'BEGIN {
    r = (b > 0) ? j / b : 0
    printf "bench %s: jobfs %.2f %s, baseline %.2f %s, ratio %.2f\n", n, j, u, b, u, r }'
}
