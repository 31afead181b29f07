# ucx-transport/: the network layer shared by daemons and clients (a convenience library).
noinst_LTLIBRARIES += ucx-transport/libjobfs_transport.la
ucx_transport_libjobfs_transport_la_SOURCES = \
	ucx-transport/status.h ucx-transport/status.cc \
	ucx-transport/result.h \
	ucx-transport/log.h ucx-transport/log.cc \
	ucx-transport/wire.h \
	ucx-transport/block_crc.h \
	ucx-transport/crc32c_copy.h ucx-transport/crc32c_copy.cc \
	ucx-transport/placement.h \
	ucx-transport/frame.h ucx-transport/frame.cc \
	ucx-transport/transport_protocol.h \
	ucx-transport/worker.h ucx-transport/worker.cc \
	ucx-transport/cluster_descriptor.h ucx-transport/cluster_descriptor.cc \
	ucx-transport/file_util.h ucx-transport/file_util.cc \
	ucx-transport/hostlist.h ucx-transport/hostlist.cc \
	ucx-transport/priority.h ucx-transport/priority.cc \
	ucx-transport/local_read_socket.h ucx-transport/local_read_socket.cc \
	ucx-transport/rpc.h \
	ucx-transport/daemon_protocol.h
ucx_transport_libjobfs_transport_la_CXXFLAGS = $(AM_CXXFLAGS) $(UCX_CFLAGS) $(ISAL_CFLAGS)
ucx_transport_libjobfs_transport_la_LIBADD = $(UCX_LIBS) $(ISAL_LIBS) -lpthread
EXTRA_DIST += ucx-transport/README.md
