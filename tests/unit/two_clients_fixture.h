// two_clients_fixture.h: a test fixture of three real jobfsd processes on loopback
// (LocalCluster, in a temporary directory) and two libjobfs clients, a and b: the tests of
// what one client keeps or answers itself while another changes or reads the same files
// (attr_lease_test, dir_delegation_test).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/local_cluster.h"
#include "test_util.h"

namespace jobfs::test {

class TwoClients : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/jobfs-two-clients-XXXXXX";
        dir = ::mkdtemp(tmpl);
    }
    // Starts the daemons (args: more jobfsd options) and connects a and b.
    void start(const std::vector<std::string>& args = {}) {
        client::LocalClusterOptions o;
        o.jobfsd = build_tree_program("server/jobfsd");
        o.dir = dir;
        o.daemons = 3;
        o.extra_args = args;
        auto c = client::LocalCluster::start(o);
        ASSERT_TRUE(c.ok()) << c.status().to_string();
        cluster = std::move(*c);
        a = connect();
        b = connect();
        ASSERT_TRUE(a && b);
    }
    std::unique_ptr<client::Client> connect(client::ClientOptions o = {}) {
        auto c = client::Client::connect(cluster->info(), o);
        EXPECT_TRUE(c.ok()) << c.status().to_string();
        return c.ok() ? std::move(*c) : nullptr;
    }
    void TearDown() override {
        a.reset();
        b.reset();
        cluster.reset();
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }

    std::string dir;
    std::unique_ptr<client::LocalCluster> cluster;
    std::unique_ptr<client::Client> a, b;
};

} // namespace jobfs::test
