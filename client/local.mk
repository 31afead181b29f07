# client/: the client library. libjobfs_client.la (C++, convenience) serves the tool and the
# tests; libjobfs.la is the installed shared library with the C API of jobfs.h, exporting
# jobfs_* and nothing else.
noinst_LTLIBRARIES += client/libjobfs_client.la
client_libjobfs_client_la_SOURCES = \
	client/layout.h \
	client/file_io.h client/file_io.cc \
	client/local_reads.h client/local_reads.cc \
	client/kept_chunks.h client/kept_chunks.cc \
	client/page_cache_filler.h client/page_cache_filler.cc \
	client/sequential_reads.h client/sequential_reads.cc \
	client/huge_buffer.h client/huge_buffer.cc \
	client/write_arena.h client/write_arena.cc \
	client/write_behind.h client/write_behind.cc \
	client/cluster.h client/cluster.cc \
	client/attr_cache.h client/attr_cache.cc \
	client/dir_delegation.h client/dir_delegation.cc \
	client/client.h client/client.cc \
	client/inode_client.h client/inode_client.cc client/meta_call.h \
	client/stall_watch.h client/stall_watch.cc \
	client/scrub.h client/scrub.cc \
	client/local_cluster.h client/local_cluster.cc
client_libjobfs_client_la_CXXFLAGS = $(AM_CXXFLAGS) $(UCX_CFLAGS) $(ISAL_CFLAGS)
client_libjobfs_client_la_LIBADD = ucx-transport/libjobfs_transport.la $(ISAL_LIBS)

# Striped data path against three in-process daemons (server/ only as the test's peers).
check_PROGRAMS += tests/unit/file_io_test
tests_unit_file_io_test_SOURCES = tests/unit/file_io_test.cc
tests_unit_file_io_test_CXXFLAGS = $(UNIT_FLAGS) $(UCX_CFLAGS)
tests_unit_file_io_test_LDADD = client/libjobfs_client.la server/libjobfs_server.la $(UNIT_LIBS) -lgtest_main
TESTS += tests/unit/file_io_test

# The watcher of calls that wait too long (no daemons: its action is the test's).
check_PROGRAMS += tests/unit/stall_watch_test
tests_unit_stall_watch_test_SOURCES = tests/unit/stall_watch_test.cc
tests_unit_stall_watch_test_CXXFLAGS = $(UNIT_FLAGS)
tests_unit_stall_watch_test_LDADD = client/libjobfs_client.la $(UNIT_LIBS) -lgtest_main
TESTS += tests/unit/stall_watch_test

# Buffers in transparent huge pages for direct reads (alignment, growth, huge pages where the kernel has them).
check_PROGRAMS += tests/unit/huge_buffer_test
tests_unit_huge_buffer_test_SOURCES = tests/unit/huge_buffer_test.cc
tests_unit_huge_buffer_test_CXXFLAGS = $(UNIT_FLAGS)
tests_unit_huge_buffer_test_LDADD = client/libjobfs_client.la $(UNIT_LIBS) -lgtest_main
TESTS += tests/unit/huge_buffer_test

# Read-ahead of sequential readers (no daemons: the ranges it asks for).
check_PROGRAMS += tests/unit/sequential_reads_test
tests_unit_sequential_reads_test_SOURCES = tests/unit/sequential_reads_test.cc
tests_unit_sequential_reads_test_CXXFLAGS = $(UNIT_FLAGS)
tests_unit_sequential_reads_test_LDADD = client/libjobfs_client.la $(UNIT_LIBS) -lgtest_main
TESTS += tests/unit/sequential_reads_test

# Local reads: a real LocalReadServer and ChunkStore in the test, the reader of client/.
check_PROGRAMS += tests/unit/page_cache_filler_test
tests_unit_page_cache_filler_test_SOURCES = tests/unit/page_cache_filler_test.cc
tests_unit_page_cache_filler_test_CXXFLAGS = $(UNIT_FLAGS) $(UCX_CFLAGS)
tests_unit_page_cache_filler_test_LDADD = client/libjobfs_client.la $(UNIT_LIBS) -lgtest_main
TESTS += tests/unit/page_cache_filler_test
check_PROGRAMS += tests/unit/local_reads_test
tests_unit_local_reads_test_SOURCES = tests/unit/local_reads_test.cc
tests_unit_local_reads_test_CXXFLAGS = $(UNIT_FLAGS) $(UCX_CFLAGS)
tests_unit_local_reads_test_LDADD = client/libjobfs_client.la server/libjobfs_server.la $(UNIT_LIBS) -lgtest_main
TESTS += tests/unit/local_reads_test

# libjobfs against three real jobfsd processes (LocalCluster starts the jobfsd of this tree).
check_PROGRAMS += tests/unit/client_test
tests_unit_client_test_SOURCES = tests/unit/client_test.cc tests/unit/read_whole.h
tests_unit_client_test_CXXFLAGS = $(UNIT_FLAGS) $(UCX_CFLAGS)
tests_unit_client_test_LDADD = client/libjobfs_client.la $(UNIT_LIBS) -lgtest_main
TESTS += tests/unit/client_test

# Chain replication against whole small clusters of real jobfsd processes (3FS-style shapes).
# Leased attributes: two clients and a stopped holder (tests/helpers/lease_holder) against jobfsd.
# Directory delegations: libjobfs clients against three real jobfsd processes.
check_PROGRAMS += tests/unit/dir_delegation_test tests/helpers/dir_holder
tests_unit_dir_delegation_test_SOURCES = tests/unit/dir_delegation_test.cc tests/unit/daemon_counts.h tests/unit/read_whole.h tests/unit/two_clients_fixture.h tests/unit/child_process.h tests/unit/child_process.cc
tests_unit_dir_delegation_test_CXXFLAGS = $(UNIT_FLAGS) $(UCX_CFLAGS)
tests_unit_dir_delegation_test_LDADD = client/libjobfs_client.la $(UNIT_LIBS) -lgtest_main
TESTS += tests/unit/dir_delegation_test
tests_helpers_dir_holder_SOURCES = tests/helpers/dir_holder.cc tests/helpers/helper_client.h
tests_helpers_dir_holder_CXXFLAGS = $(AM_CXXFLAGS) $(UCX_CFLAGS)
tests_helpers_dir_holder_LDADD = client/libjobfs_client.la

check_PROGRAMS += tests/unit/attr_lease_test tests/helpers/lease_holder
tests_unit_attr_lease_test_SOURCES = tests/unit/attr_lease_test.cc tests/unit/two_clients_fixture.h tests/unit/child_process.h tests/unit/child_process.cc
tests_unit_attr_lease_test_CXXFLAGS = $(UNIT_FLAGS) $(UCX_CFLAGS)
tests_unit_attr_lease_test_LDADD = client/libjobfs_client.la $(UNIT_LIBS) -lgtest_main
tests_helpers_lease_holder_SOURCES = tests/helpers/lease_holder.cc tests/helpers/helper_client.h
tests_helpers_lease_holder_CXXFLAGS = $(AM_CXXFLAGS) $(UCX_CFLAGS)
tests_helpers_lease_holder_LDADD = client/libjobfs_client.la
TESTS += tests/unit/attr_lease_test

check_PROGRAMS += tests/unit/replication_test
tests_unit_replication_test_SOURCES = tests/unit/replication_test.cc
tests_unit_replication_test_CXXFLAGS = $(UNIT_FLAGS) $(UCX_CFLAGS)
tests_unit_replication_test_LDADD = client/libjobfs_client.la $(UNIT_LIBS) -lgtest_main
TESTS += tests/unit/replication_test

bin_PROGRAMS += client/jobfs
client_jobfs_SOURCES = client/jobfs_cli.cc
client_jobfs_LDADD = client/stage/libjobfs_stage.la client/libjobfs_client.la $(BOOST_PO_LIBS)

lib_LTLIBRARIES += client/libjobfs.la
include_HEADERS += client/jobfs.h
client_libjobfs_la_SOURCES = client/jobfs.h client/jobfs_c.cc
client_libjobfs_la_CXXFLAGS = $(AM_CXXFLAGS) $(UCX_CFLAGS)
client_libjobfs_la_LIBADD = client/libjobfs_client.la
client_libjobfs_la_LDFLAGS = $(AM_LDFLAGS) -version-info 0:0:0 -export-symbols-regex '^jobfs_' \
	-Wl,--version-script=$(srcdir)/client/libjobfs.map
EXTRA_client_libjobfs_la_DEPENDENCIES = client/libjobfs.map
EXTRA_DIST += client/libjobfs.map
pkgconfigdir = $(libdir)/pkgconfig
pkgconfig_DATA += client/jobfs.pc

# The C API against three real jobfsd processes, through the installed library's interface.
check_PROGRAMS += tests/unit/c_api_test
tests_unit_c_api_test_SOURCES = tests/unit/c_api_test.cc tests/unit/test_util.h tests/unit/daemon_counts.h
tests_unit_c_api_test_CXXFLAGS = $(UNIT_FLAGS) $(UCX_CFLAGS)
tests_unit_c_api_test_LDADD = client/libjobfs.la client/libjobfs_client.la $(UNIT_LIBS) -lgtest_main
TESTS += tests/unit/c_api_test

# A C99 program using jobfs.h (compiled -std=c99 -pedantic), run by c_api_test.sh against
# `jobfs local up`; the shell test also checks that libjobfs exports jobfs_* only.
check_PROGRAMS += tests/unit/c_api_compile
tests_unit_c_api_compile_SOURCES = tests/unit/c_api_compile.c
tests_unit_c_api_compile_CFLAGS = $(AM_CFLAGS) -std=c99 -pedantic
tests_unit_c_api_compile_LDADD = client/libjobfs.la
EXTRA_DIST += tests/c_api_test.sh
TESTS += tests/c_api_test.sh

# jobfs-fuse, the FUSE mount (libfuse3 low-level API), over the inode-addressed InodeClient.
if JOBFS_FUSE
sbin_PROGRAMS += client/jobfs-fuse
client_jobfs_fuse_SOURCES = client/jobfs_fuse.cc client/fuse_session_io.cc client/fuse_session_io.h
client_jobfs_fuse_CXXFLAGS = $(AM_CXXFLAGS) $(UCX_CFLAGS) $(FUSE3_CFLAGS)
client_jobfs_fuse_LDADD = client/libjobfs_client.la $(FUSE3_LIBS)
# The session's reads and writes of /dev/fuse, fed the kernel's messages through a pipe.
check_PROGRAMS += tests/unit/fuse_session_io_test
tests_unit_fuse_session_io_test_SOURCES = tests/unit/fuse_session_io_test.cc client/fuse_session_io.cc client/fuse_session_io.h
tests_unit_fuse_session_io_test_CXXFLAGS = $(UNIT_FLAGS)
tests_unit_fuse_session_io_test_LDADD = $(GTEST_LIBS) -lgtest_main
TESTS += tests/unit/fuse_session_io_test
# mount(8) helpers: mount -t jobfs / -t fuse.jobfs and fstab lines (man jobfs-fuse.8).
mounthelperdir = $(MOUNT_HELPER_DIR)
mounthelper_SCRIPTS = client/mount.jobfs client/mount.fuse.jobfs
CLEANFILES += client/mount.jobfs client/mount.fuse.jobfs
endif
EXTRA_DIST += client/mount.jobfs.in
client/mount.jobfs client/mount.fuse.jobfs: $(top_srcdir)/client/mount.jobfs.in Makefile
	$(AM_V_GEN)mkdir -p client && sed -e 's|@sbindir[@]|$(sbindir)|g' $(top_srcdir)/client/mount.jobfs.in > $@.tmp && chmod +x $@.tmp && mv $@.tmp $@
