// fuse_session_io_test: jobfs-fuse's reads and writes of /dev/fuse (client/fuse_session_io.h),
// fed the kernel's messages through a pipe, as the kernel would hand them: the INIT reply
// grants FUSE_DIRECT_IO_ALLOW_MMAP only when the INIT request offered it, no other message is
// changed, and a write flagged FUSE_WRITE_KILL_SUIDGID is noted for the thread that read it.
// (Whether a real kernel maps direct-io files: posix_check's mmap cases through a mount.)
//
// The INIT exchange happens once per process: each case that needs one runs in a child
// (EXPECT_EXIT), so that every case starts before its INIT.
#include "client/fuse_session_io.h"

#include <gtest/gtest.h>
#include <linux/fuse.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using namespace jobfs::fuse;

constexpr uint64_t kAllowMmap = 1ULL << 36; // FUSE_DIRECT_IO_ALLOW_MMAP (FUSE 7.39)

struct Pipe {
    int fd[2];
    Pipe() { EXPECT_EQ(::pipe(fd), 0); }
    ~Pipe() {
        ::close(fd[0]);
        ::close(fd[1]);
    }
};

template <typename Arg>
std::vector<char> request(uint32_t opcode, uint64_t unique, const Arg& arg, size_t tail = 0) {
    fuse_in_header h{};
    h.len = static_cast<uint32_t>(sizeof h + sizeof arg + tail);
    h.opcode = opcode;
    h.unique = unique;
    std::vector<char> m(h.len, 'x');
    std::memcpy(m.data(), &h, sizeof h);
    std::memcpy(m.data() + sizeof h, &arg, sizeof arg);
    return m;
}

// Writes `m` into the pipe and reads it back through session_io_read, as libfuse would.
void kernel_sends(const Pipe& p, const std::vector<char>& m) {
    ASSERT_EQ(::write(p.fd[1], m.data(), m.size()), static_cast<ssize_t>(m.size()));
    std::vector<char> buf(m.size() + 4096);
    ASSERT_EQ(session_io_read(p.fd[0], buf.data(), buf.size(), nullptr), static_cast<ssize_t>(m.size()));
    ASSERT_EQ(std::memcmp(buf.data(), m.data(), m.size()), 0) << "read changed the request";
}

// Sends an INIT reply (flags as libfuse 3.14 makes them) through session_io_writev and returns
// what reached the "kernel".
fuse_init_out reply_init(const Pipe& p, uint64_t unique, uint32_t flags) {
    fuse_out_header h{};
    h.len = sizeof h + sizeof(fuse_init_out);
    h.unique = unique;
    fuse_init_out out{};
    out.major = FUSE_KERNEL_VERSION;
    out.minor = 38;
    out.flags = flags;
    out.max_write = 1 << 20;
    iovec iov[2] = {{&h, sizeof h}, {&out, sizeof out}};
    EXPECT_EQ(session_io_writev(p.fd[1], iov, 2, nullptr), static_cast<ssize_t>(h.len));
    fuse_out_header got_h{};
    fuse_init_out got{};
    EXPECT_EQ(::read(p.fd[0], &got_h, sizeof got_h), static_cast<ssize_t>(sizeof got_h));
    EXPECT_EQ(::read(p.fd[0], &got, sizeof got), static_cast<ssize_t>(sizeof got));
    EXPECT_EQ(got_h.unique, unique);
    fuse_init_out without_flags2 = got, sent_without_flags2 = out;
    without_flags2.flags2 = sent_without_flags2.flags2 = 0;
    EXPECT_EQ(std::memcmp(&without_flags2, &sent_without_flags2, sizeof got), 0) << "more than flags2 changed";
    return got;
}

fuse_init_in init_request(uint64_t flags) {
    fuse_init_in in{};
    in.major = FUSE_KERNEL_VERSION;
    in.minor = 39;
    in.max_readahead = 1 << 20;
    in.flags = static_cast<uint32_t>(flags) | FUSE_INIT_EXT;
    in.flags2 = static_cast<uint32_t>(flags >> 32);
    return in;
}

// Runs `exchange` in a child process, where no INIT has been read yet: it passes when the
// child's exchange returns 0 (else which check failed) and no expectation failed (99).
void in_a_fresh_process(int (*exchange)()) {
    EXPECT_EXIT(
        {
            const int failed = exchange();
            std::_Exit(failed ? failed : ::testing::Test::HasFailure() ? 99 : 0);
        },
        ::testing::ExitedWithCode(0), "");
}

TEST(FuseSessionIo, TheInitReplyGrantsDirectIoMmapWhenTheKernelOffersIt) {
    in_a_fresh_process([] {
        Pipe p;
        kernel_sends(p, request(FUSE_INIT, 7, init_request(FUSE_ASYNC_READ | kAllowMmap)));
        if (!session_direct_mmap_offered()) return 2;
        if (reply_init(p, 7, FUSE_ASYNC_READ | FUSE_INIT_EXT).flags2 != (kAllowMmap >> 32)) return 3;
        // Later replies go out as they are.
        return reply_init(p, 7, FUSE_ASYNC_READ | FUSE_INIT_EXT).flags2 == 0 ? 0 : 4;
    });
}

TEST(FuseSessionIo, AKernelThatDoesNotOfferItGetsTheReplyUnchanged) {
    in_a_fresh_process([] {
        Pipe p;
        kernel_sends(p, request(FUSE_INIT, 9, init_request(FUSE_ASYNC_READ)));
        if (session_direct_mmap_offered()) return 2;
        return reply_init(p, 9, FUSE_ASYNC_READ | FUSE_INIT_EXT).flags2 == 0 ? 0 : 3;
    });
}

TEST(FuseSessionIo, AnotherRequestsReplyIsNotTouchedBeforeTheInitReply) {
    in_a_fresh_process([] {
        Pipe p;
        kernel_sends(p, request(FUSE_INIT, 11, init_request(kAllowMmap)));
        // A reply with another unique (none can come before INIT's; still never changed).
        if (reply_init(p, 12, FUSE_INIT_EXT).flags2 != 0) return 2;
        return reply_init(p, 11, FUSE_INIT_EXT).flags2 == (kAllowMmap >> 32) ? 0 : 3;
    });
}

TEST(FuseSessionIo, AWriteFlaggedToDropSetidIsNotedForTheThreadThatReadIt) {
    Pipe p;
    fuse_write_in w{};
    w.offset = 4096;
    w.size = 100;
    w.write_flags = FUSE_WRITE_KILL_SUIDGID;
    kernel_sends(p, request(FUSE_WRITE, 21, w, 100));
    EXPECT_TRUE(session_write_kills_setid());
    bool other_thread = true;
    std::thread([&] { other_thread = session_write_kills_setid(); }).join();
    EXPECT_FALSE(other_thread) << "another thread's request";
    // The next request read on this thread clears it: a write without the flag, any other op.
    w.write_flags = 0;
    kernel_sends(p, request(FUSE_WRITE, 22, w, 100));
    EXPECT_FALSE(session_write_kills_setid());
    w.write_flags = FUSE_WRITE_KILL_SUIDGID;
    kernel_sends(p, request(FUSE_WRITE, 23, w, 100));
    fuse_getattr_in g{};
    kernel_sends(p, request(FUSE_GETATTR, 24, g));
    EXPECT_FALSE(session_write_kills_setid());
}

} // namespace
