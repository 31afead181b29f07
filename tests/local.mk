# tests/: GoogleTest unit tests, run by `make check`. Test programs without an extension are
# GoogleTest programs and run through tests/gtest-driver, which reports every test case to the
# automake harness, so the summary counts cases, not programs. Shell tests (.sh) come later.
LOG_DRIVER = $(SHELL) $(top_srcdir)/tests/gtest-driver
EXTRA_DIST += tests/gtest-driver tests/README.md

UNIT_LIBS = ucx-transport/libjobfs_transport.la $(GTEST_LIBS) $(ISAL_LIBS)
UNIT_FLAGS = $(AM_CXXFLAGS) $(GTEST_CFLAGS) $(ISAL_CFLAGS)

check_PROGRAMS += tests/unit/wire_test tests/unit/transport_test tests/helpers/transport_peer
tests_unit_wire_test_SOURCES = tests/unit/wire_test.cc tests/unit/test_messages.h
tests_unit_wire_test_CXXFLAGS = $(UNIT_FLAGS)
tests_unit_wire_test_LDADD = $(UNIT_LIBS) -lgtest_main

tests_unit_transport_test_SOURCES = tests/unit/transport_test.cc tests/unit/test_messages.h \
	tests/unit/peer_process.h tests/unit/peer_process.cc
tests_unit_transport_test_CXXFLAGS = $(UNIT_FLAGS)
tests_unit_transport_test_LDADD = $(UNIT_LIBS) -lgtest_main

tests_helpers_transport_peer_SOURCES = tests/helpers/transport_peer.cc tests/unit/test_messages.h
tests_helpers_transport_peer_CXXFLAGS = $(AM_CXXFLAGS) $(ISAL_CFLAGS)
tests_helpers_transport_peer_LDADD = ucx-transport/libjobfs_transport.la $(ISAL_LIBS)

TESTS += tests/unit/wire_test tests/unit/transport_test
