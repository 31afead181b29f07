# bench/: benchmarks, run from a built and installed tree by bench/run NAME (never by make check).
pkglibexec_PROGRAMS += bench/jobfs-bench-transport
bench_jobfs_bench_transport_SOURCES = bench/transport_bench.cc
bench_jobfs_bench_transport_LDADD = ucx-transport/libjobfs_transport.la $(BOOST_PO_LIBS)
EXTRA_DIST += bench/run bench/transport bench/ckpt bench/lib.sh bench/README.md

pkglibexec_PROGRAMS += bench/jobfs-bench-meta
bench_jobfs_bench_meta_SOURCES = bench/meta_bench.cc
bench_jobfs_bench_meta_LDADD = client/libjobfs_client.la $(BOOST_PO_LIBS)
EXTRA_DIST += bench/meta bench/fuse bench/replication bench/slurm bench/stage bench/append
