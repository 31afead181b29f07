// daemon_counts.h: what the daemons' metadata shards hold, asked of them directly.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "daemon_protocol.h"
#include "rpc.h"

namespace jobfs::test {

// The inodes the shards the daemons serve hold now, summed (MetaCounts). It recalls nothing,
// so it shows what reached the daemons, not what a delegation holder answered and still queues.
inline uint64_t inodes_at_daemons(const std::vector<transport::Endpoint>& daemons) {
    uint64_t n = 0;
    for (const auto& ep : daemons) {
        auto c = transport::rpc::call<proto::MetaCounts>(ep, proto::Empty{});
        EXPECT_TRUE(c.ok()) << c.status().to_string();
        if (c.ok()) n += c->inodes;
    }
    return n;
}

} // namespace jobfs::test
