# server/: jobfsd, the storage daemon, built from a convenience library so tests link the parts.
noinst_LTLIBRARIES += server/libjobfs_server.la
server_libjobfs_server_la_SOURCES = \
	server/config.h server/config.cc \
	server/chunk_store.h server/chunk_store.cc \
	server/chunk_stamps.h server/chunk_stamps.cc \
	server/crc_table_cache.h server/crc_table_cache.cc \
	server/buffer_pool.h server/buffer_pool.cc \
	server/chunk_service.h server/chunk_service.cc \
	server/same_node_peers.h server/same_node_peers.cc \
	server/local_read_server.h server/local_read_server.cc \
	server/write_arenas.h server/write_arenas.cc \
	server/membership.h server/membership.cc \
	server/resync.h server/resync.cc \
	server/daemon_stats.h server/daemon_stats.cc \
	server/daemon.h server/daemon.cc \
	server/bootstrap_pmix.h server/bootstrap_pmix.cc \
	server/meta_shard.h server/meta_shard.cc \
	server/meta_wire.h \
	server/meta_coordinator.h server/meta_coordinator.cc \
	server/attr_leases.h server/attr_leases.cc \
	server/dir_delegations.h server/dir_delegations.cc \
	server/file_locks.h server/file_locks.cc \
	server/meta_service.h server/meta_service.cc \
	server/rename_lock.h server/rename_lock.cc
server_libjobfs_server_la_CXXFLAGS = $(AM_CXXFLAGS) $(UCX_CFLAGS) $(SQLITE_CFLAGS) $(ISAL_CFLAGS) $(PMIX_CFLAGS)
server_libjobfs_server_la_LIBADD = ucx-transport/libjobfs_transport.la $(SQLITE_LIBS) $(ISAL_LIBS) $(BOOST_PO_LIBS) $(PMIX_LIBS)

sbin_PROGRAMS += server/jobfsd
server_jobfsd_SOURCES = server/jobfsd.cc
server_jobfsd_LDADD = server/libjobfs_server.la
