# tests/lib.sh: what the shell tests share; sourced as `. "$(dirname "$0")/lib.sh"`.
# Output follows tests/case-driver: one "ok - NAME" / "not ok - NAME" line per case; a test
# ends with `exit $((fails > 0))`.

fails=0

check() { # NAME CMD...: runs CMD, counts a failure if it fails
  name=$1; shift
  if "$@"; then echo "ok - $name"; else echo "not ok - $name"; fails=$((fails + 1)); fi
}

# mpi_env COMPONENT_DIR: Open MPI as the MPI tests run it here: as root, more ranks than cores,
# no binding, loopback only, and the component directory under test before Open MPI's own (an
# installed copy of mca_io_romio_jobfs.so there must not shadow the one under test). No
# --mca io: the jobfs: prefix selects the driver. libjobfs from this build tree.
mpi_env() {
  sysdir=$(ompi_info --path pkglibdir | sed 's/^.*: *//')
  export OMPI_MCA_mca_base_component_path="$1:$sysdir"
  export LD_LIBRARY_PATH="$(pwd)/client/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
  export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
}
