# romio-adio/: the ROMIO ADIO driver (jobfs: file names) in a renamed Open MPI io component,
# mca_io_romio_jobfs.so. build-component.sh gets ROMIO's sources (apt-get source of the
# installed Open MPI's source package, or --with-romio-source), builds ROMIO once under
# romio-adio/build, and compiles and links the driver and the glue again when they change.
ROMIO_DRIVER_FILES = romio-adio/ad_jobfs.c romio-adio/ad_jobfs_shared.c romio-adio/ad_jobfs.h romio-adio/build-component.sh \
	romio-adio/patches/romio-jobfs-core.patch romio-adio/patches/glue-jobfs-priority.patch
EXTRA_DIST += $(ROMIO_DRIVER_FILES) tests/romio_test.sh tests/helpers/romio_mpi.c \
	tests/romio_suite_test.sh tests/romio_hdf5_test.sh tests/helpers/romio_hdf5.c \
	tests/romio_faults_test.sh tests/helpers/romio_faults.c

if JOBFS_ROMIO
dist_man_MANS += man/ad_jobfs.7
ompicomponentdir = @OMPI_COMPONENT_DIR@
ROMIO_COMPONENT = romio-adio/mca_io_romio_jobfs.so
all-local: $(ROMIO_COMPONENT)
$(ROMIO_COMPONENT): $(ROMIO_DRIVER_FILES:%=$(srcdir)/%) client/libjobfs.la
	+$(AM_V_GEN)MAKE="$(MAKE)" $(SHELL) $(srcdir)/romio-adio/build-component.sh \
		--srcdir=$(srcdir)/romio-adio --builddir=$(abs_builddir)/romio-adio/build \
		--jobfs-include=$(srcdir)/client --jobfs-libdir=$(abs_builddir)/client/.libs \
		--rpath=$(libdir) $(ROMIO_SOURCE:%=--romio-source=%) \
	&& cp romio-adio/build/mca_io_romio_jobfs.so $@
install-exec-local: $(ROMIO_COMPONENT)
	$(MKDIR_P) "$(DESTDIR)$(ompicomponentdir)"
	$(INSTALL) -m 755 $(ROMIO_COMPONENT) "$(DESTDIR)$(ompicomponentdir)/mca_io_romio_jobfs.so"
uninstall-local:
	rm -f "$(DESTDIR)$(ompicomponentdir)/mca_io_romio_jobfs.so"

# The MPI cases of tests/romio_test.sh and the checkpoint of tests/romio_faults_test.sh,
# built with mpicc.
check_SCRIPTS = tests/helpers/romio_mpi tests/helpers/romio_faults
tests/helpers/romio_mpi: $(srcdir)/tests/helpers/romio_mpi.c
	@$(MKDIR_P) tests/helpers
	$(AM_V_CC)$(MPICC) -O2 -Wall -Wextra -o $@ $(srcdir)/tests/helpers/romio_mpi.c -lopen-pal # (its yield case)
tests/helpers/romio_faults: $(srcdir)/tests/helpers/romio_faults.c
	@$(MKDIR_P) tests/helpers
	$(AM_V_CC)$(MPICC) -O2 -Wall -Wextra -o $@ $(srcdir)/tests/helpers/romio_faults.c
# Not in the ASan+UBSan tree: an instrumented libjobfs cannot be loaded into mpirun's
# uninstrumented processes (the sanitizer runtime must come first).
# romio_suite_test.sh: ROMIO's own test programs (from the same source package) on jobfs: and,
# as the control, on ufs:; romio_hdf5_test.sh: parallel HDF5 through the driver;
# romio_faults_test.sh: a daemon killed during a collective checkpoint (replicas 2), resync.
# (It hung or failed in half of its runs until session 4 fixed the membership deadlock and the
# lost syncing state it found.)
if !JOBFS_SANITIZE
TESTS += tests/romio_test.sh tests/romio_suite_test.sh tests/romio_hdf5_test.sh tests/romio_faults_test.sh
# One MPI test at a time under make -j: two of them (8 ranks and 6 daemons on 2 cores) starved
# each other's daemons past their 30 s deadlines (romio_faults_test beside romio_suite_test).
tests/romio_suite_test.log: tests/romio_test.log
tests/romio_hdf5_test.log: tests/romio_suite_test.log
tests/romio_faults_test.log: tests/romio_hdf5_test.log
# The radosgw tier (three Ceph daemons, 1.5 GiB moved) after them, for the same reason.
tests/stage_rgw_test.log: tests/romio_faults_test.log
endif
endif
CLEANFILES += romio-adio/mca_io_romio_jobfs.so tests/helpers/romio_mpi tests/helpers/romio_faults
distclean-local:
	rm -rf romio-adio/build
# make distcheck installs the component under its own prefix, not into Open MPI's directory
# (AM_DISTCHECK_CONFIGURE_FLAGS in Makefile.am).

# bench/mpiio-ckpt's MPI program (bench/run mpiio-ckpt), built with mpicc and installed with the others.
EXTRA_DIST += bench/mpiio-ckpt bench/romio_bench.c
if JOBFS_ROMIO
pkglibexec_SCRIPTS = bench/jobfs-bench-romio
bench/jobfs-bench-romio: $(srcdir)/bench/romio_bench.c
	@$(MKDIR_P) bench
	$(AM_V_CC)$(MPICC) -O2 -Wall -Wextra -o $@ $(srcdir)/bench/romio_bench.c
endif
CLEANFILES += bench/jobfs-bench-romio
