# client/stage/: data staging between S3-compatible object stores and jobfs (issue #7): the S3
# client (SigV4 over libcurl + OpenSSL) and the engine of `jobfs stage-in/stage-out`.
noinst_LTLIBRARIES += client/stage/libjobfs_stage.la
client_stage_libjobfs_stage_la_SOURCES = \
	client/stage/sigv4.h client/stage/sigv4.cc \
	client/stage/s3_config.h client/stage/s3_config.cc \
	client/stage/s3_xml.h client/stage/s3_xml.cc \
	client/stage/s3_client.h client/stage/s3_client.cc \
	client/stage/location.h client/stage/location.cc \
	client/stage/paths.h \
	client/stage/fs_store.h client/stage/fs_store.cc \
	client/stage/progress.h client/stage/progress.cc \
	client/stage/stage.h client/stage/stage.cc
client_stage_libjobfs_stage_la_CXXFLAGS = $(AM_CXXFLAGS) $(UCX_CFLAGS) $(CURL_CFLAGS) $(OPENSSL_CFLAGS)
client_stage_libjobfs_stage_la_LIBADD = client/libjobfs_client.la $(CURL_LIBS) $(OPENSSL_LIBS)
EXTRA_DIST += client/stage/README.md

# The SigV4 signer against AWS's published test suite; S3 XML and configuration parsing.
check_PROGRAMS += tests/unit/sigv4_test
tests_unit_sigv4_test_SOURCES = tests/unit/sigv4_test.cc
tests_unit_sigv4_test_CXXFLAGS = $(UNIT_FLAGS) $(UCX_CFLAGS)
tests_unit_sigv4_test_LDADD = client/stage/libjobfs_stage.la $(UNIT_LIBS) -lgtest_main
TESTS += tests/unit/sigv4_test

# stage-in/stage-out against a real S3 server (s3rver, scripts/install-deps) and `jobfs local up`.
EXTRA_DIST += tests/stage_test.sh tests/helpers/s3rver.sh tests/helpers/make_dataset.py
TESTS += tests/stage_test.sh
