// c_api_test: the C API (jobfs.h, libjobfs.so) against three real jobfsd processes on loopback.
// Every function with its real outcome (bytes read back, attributes, listings) and the exact
// -errno of its failures; threads sharing one connection and one file; a large write that
// lands on every daemon.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/jobfs.h"
#include "client/local_cluster.h"
#include "daemon_counts.h"
#include "test_util.h"

namespace {

using jobfs::test::pattern;
namespace fs = std::filesystem;

std::string jobfsd_path() { return jobfs::test::build_tree_program("server/jobfsd"); }

constexpr uint32_t kChunk = 1u << 20;

// One cluster for the whole suite (each test works in its own directory), one connection per
// test.
class CApiTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new jobfs::test::TempDir("jobfs-capi");
        jobfs::client::LocalClusterOptions o;
        o.jobfsd = jobfsd_path();
        o.dir = dir_->path();
        o.daemons = 3; // their chunk size: the default 4 MiB, the largest a layout may use
        auto c = jobfs::client::LocalCluster::start(o);
        if (!c.ok()) {
            start_error_ = c.status().to_string();
            return;
        }
        cluster_ = c->release();
    }
    static void TearDownTestSuite() {
        delete cluster_;
        cluster_ = nullptr;
        delete dir_;
        dir_ = nullptr;
    }
    void SetUp() override {
        ASSERT_NE(cluster_, nullptr) << start_error_;
        ASSERT_EQ(jobfs_connect(cluster_->descriptor_path().c_str(), &fs), 0) << jobfs_last_error();
        top = std::string("/") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
        ASSERT_EQ(jobfs_mkdir(fs, top.c_str(), 0755), 0) << jobfs_last_error();
    }
    void TearDown() override {
        if (fs) {
            EXPECT_EQ(jobfs_disconnect(fs), 0) << jobfs_last_error();
        }
    }

    std::string p(const std::string& rel) const { return top + "/" + rel; }

    int write_file(const std::string& path, const std::vector<uint8_t>& data, const jobfs_layout_t* hint = nullptr) {
        jobfs_file_t* f = nullptr;
        int rc = jobfs_open(fs, path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644, hint, &f);
        if (rc != 0) return rc;
        ssize_t n = jobfs_pwrite(f, data.data(), data.size(), 0);
        rc = jobfs_close(f);
        if (n != static_cast<ssize_t>(data.size())) return n < 0 ? static_cast<int>(n) : -EIO;
        return rc;
    }
    std::vector<uint8_t> read_file(const std::string& path) {
        jobfs_file_t* f = nullptr;
        EXPECT_EQ(jobfs_open(fs, path.c_str(), O_RDONLY, 0, nullptr, &f), 0) << jobfs_last_error();
        if (!f) return {};
        uint64_t size = 0;
        EXPECT_EQ(jobfs_file_get_size(f, &size), 0);
        std::vector<uint8_t> out(size);
        ssize_t n = jobfs_pread(f, out.data(), out.size(), 0);
        EXPECT_EQ(n, static_cast<ssize_t>(size)) << jobfs_last_error();
        EXPECT_EQ(jobfs_close(f), 0);
        out.resize(n > 0 ? static_cast<size_t>(n) : 0);
        return out;
    }
    struct stat st_of(const std::string& path, bool follow = true) {
        struct stat st {};
        EXPECT_EQ(follow ? jobfs_stat(fs, path.c_str(), &st) : jobfs_lstat(fs, path.c_str(), &st), 0)
            << path << ": " << jobfs_last_error();
        return st;
    }
    // Chunk files of inode ino on each daemon (chunk stores name them <ino hex>.<index hex>).
    static std::vector<size_t> chunks_per_daemon(uint64_t ino) {
        char prefix[32];
        std::snprintf(prefix, sizeof prefix, "%016llx.", static_cast<unsigned long long>(ino));
        std::vector<size_t> n(3, 0);
        for (uint32_t r = 0; r < 3; ++r)
            for (auto& e : fs::recursive_directory_iterator(dir_->path() + "/data" + std::to_string(r)))
                if (e.is_regular_file() && e.path().filename().string().rfind(prefix, 0) == 0)
                    ++n[r];
        return n;
    }

    static jobfs::test::TempDir* dir_;
    static jobfs::client::LocalCluster* cluster_;
    static std::string start_error_;
    jobfs_t* fs = nullptr;
    std::string top;
};

jobfs::test::TempDir* CApiTest::dir_ = nullptr;
jobfs::client::LocalCluster* CApiTest::cluster_ = nullptr;
std::string CApiTest::start_error_;

// ---- connection -----------------------------------------------------------------------------

TEST_F(CApiTest, ConnectDisconnectAndTheirErrors) {
    jobfs_t* other = reinterpret_cast<jobfs_t*>(0x1);
    EXPECT_EQ(jobfs_connect(cluster_->descriptor_path().c_str(), nullptr), -EINVAL);
    EXPECT_EQ(jobfs_connect((dir_->path() + "/no-such-descriptor").c_str(), &other), -ENOENT);
    EXPECT_EQ(other, nullptr);
    EXPECT_NE(std::strstr(jobfs_last_error(), "no-such-descriptor"), nullptr) << jobfs_last_error();

    // NULL: the descriptor named by $JOBFS_CLUSTER.
    const char* saved = std::getenv("JOBFS_CLUSTER");
    ::unsetenv("JOBFS_CLUSTER");
    EXPECT_EQ(jobfs_connect(nullptr, &other), -ENOENT);
    EXPECT_NE(std::strstr(jobfs_last_error(), "JOBFS_CLUSTER"), nullptr) << jobfs_last_error();
    ::setenv("JOBFS_CLUSTER", cluster_->descriptor_path().c_str(), 1);
    ASSERT_EQ(jobfs_connect(nullptr, &other), 0) << jobfs_last_error();
    EXPECT_EQ(jobfs_daemon_count(other), 3);
    struct stat st {};
    EXPECT_EQ(jobfs_stat(other, top.c_str(), &st), 0); // both connections see one file system
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(jobfs_disconnect(other), 0);
    if (saved) ::setenv("JOBFS_CLUSTER", saved, 1);
    else ::unsetenv("JOBFS_CLUSTER");

    // A descriptor that names no daemon.
    const std::string empty = dir_->path() + "/empty-cluster";
    ASSERT_TRUE(jobfs::client::write_cluster(empty, jobfs::client::ClusterInfo{{}, "0123"}).ok());
    EXPECT_EQ(jobfs_connect(empty.c_str(), &other), -EINVAL);

    EXPECT_EQ(jobfs_disconnect(nullptr), 0);
    EXPECT_EQ(jobfs_daemon_count(nullptr), -EINVAL);
    EXPECT_EQ(jobfs_daemon_count(fs), 3);
    EXPECT_EQ(jobfs_local_daemon_count(nullptr), -EINVAL);
    EXPECT_EQ(jobfs_local_daemon_count(fs), 3); // the daemons run here
}

// jobfs_sync_namespace: creates this connection answered itself in a directory delegated to
// it are at the daemons when it returns (the daemons' own inode counts, which recall nothing,
// say so; right after the creates most of them are still queued, sent within 2 ms).
TEST_F(CApiTest, SyncNamespaceReturnsOnceDelegatedCreatesAreAtTheDaemons) {
    EXPECT_EQ(jobfs_sync_namespace(nullptr), -EINVAL);
    EXPECT_EQ(jobfs_sync_namespace(fs), 0); // nothing queued
    auto info = jobfs::client::read_cluster(cluster_->descriptor_path());
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    auto counter = jobfs::client::Client::connect(*info);
    ASSERT_TRUE(counter.ok()) << counter.status().to_string();
    auto inodes = [&] { return jobfs::test::inodes_at_daemons((*counter)->daemons()); };
    const uint64_t before = inodes();
    constexpr int kFiles = 200;
    for (int i = 0; i < kFiles; ++i) {
        jobfs_file_t* f = nullptr;
        ASSERT_EQ(jobfs_open(fs, p("s" + std::to_string(i)).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644, nullptr, &f), 0)
            << jobfs_last_error();
        ASSERT_EQ(jobfs_close(f), 0) << jobfs_last_error();
    }
    EXPECT_EQ(jobfs_sync_namespace(fs), 0) << jobfs_last_error();
    EXPECT_EQ(inodes(), before + kFiles);
}

// Tuning through the environment: write behind, the directory cache, the attribute cache.
TEST_F(CApiTest, ConnectTakesTuningFromTheEnvironment) {
    jobfs_t* tuned = nullptr;
    ::setenv("JOBFS_WRITE_BEHIND_MIB", "lots", 1);
    EXPECT_EQ(jobfs_connect(cluster_->descriptor_path().c_str(), &tuned), -EINVAL);
    EXPECT_NE(std::strstr(jobfs_last_error(), "JOBFS_WRITE_BEHIND_MIB"), nullptr) << jobfs_last_error();
    ::unsetenv("JOBFS_WRITE_BEHIND_MIB");
    ::setenv("JOBFS_ATTR_CACHE", "yes", 1);
    EXPECT_EQ(jobfs_connect(cluster_->descriptor_path().c_str(), &tuned), -EINVAL);
    EXPECT_NE(std::strstr(jobfs_last_error(), "JOBFS_ATTR_CACHE"), nullptr) << jobfs_last_error();
    ::setenv("JOBFS_ATTR_CACHE", "0", 1);
    ::setenv("JOBFS_DIR_DELEGATION", "on", 1);
    EXPECT_EQ(jobfs_connect(cluster_->descriptor_path().c_str(), &tuned), -EINVAL);
    EXPECT_NE(std::strstr(jobfs_last_error(), "JOBFS_DIR_DELEGATION"), nullptr) << jobfs_last_error();
    ::setenv("JOBFS_DIR_DELEGATION", "0", 1);
    ::setenv("JOBFS_WRITE_BEHIND_MIB", "8", 1);
    ::setenv("JOBFS_DIR_CACHE_MS", "0", 1);
    ASSERT_EQ(jobfs_connect(cluster_->descriptor_path().c_str(), &tuned), 0) << jobfs_last_error();
    ::unsetenv("JOBFS_WRITE_BEHIND_MIB");
    ::unsetenv("JOBFS_DIR_CACHE_MS");
    ::unsetenv("JOBFS_ATTR_CACHE");
    ::unsetenv("JOBFS_DIR_DELEGATION");
    const auto data = pattern(5 << 20, 9);
    jobfs_file_t* f = nullptr;
    ASSERT_EQ(jobfs_open(tuned, p("wb").c_str(), O_RDWR | O_CREAT, 0644, nullptr, &f), 0) << jobfs_last_error();
    for (size_t off = 0; off < data.size(); off += 1 << 20)
        ASSERT_EQ(jobfs_pwrite(f, data.data() + off, 1 << 20, off), 1 << 20);
    ASSERT_EQ(jobfs_close(f), 0) << jobfs_last_error();
    std::vector<uint8_t> back(data.size());
    ASSERT_EQ(jobfs_open(fs, p("wb").c_str(), O_RDONLY, 0, nullptr, &f), 0);
    EXPECT_EQ(jobfs_pread(f, back.data(), back.size(), 0), static_cast<ssize_t>(back.size()));
    EXPECT_EQ(back, data);
    EXPECT_EQ(jobfs_close(f), 0);
    EXPECT_EQ(jobfs_disconnect(tuned), 0);
}

TEST_F(CApiTest, DisconnectWaitsForEveryHandle) {
    jobfs_file_t* f = nullptr;
    jobfs_dir_t* d = nullptr;
    ASSERT_EQ(jobfs_open(fs, p("f").c_str(), O_RDWR | O_CREAT, 0644, nullptr, &f), 0);
    ASSERT_EQ(jobfs_opendir(fs, top.c_str(), &d), 0);
    EXPECT_EQ(jobfs_disconnect(fs), -EBUSY);
    EXPECT_NE(std::strstr(jobfs_last_error(), "still open"), nullptr) << jobfs_last_error();
    EXPECT_EQ(jobfs_close(f), 0);
    EXPECT_EQ(jobfs_disconnect(fs), -EBUSY);
    EXPECT_EQ(jobfs_closedir(d), 0);
    EXPECT_EQ(jobfs_pwrite(nullptr, "x", 1, 0), -EINVAL); // the connection is still usable here
    EXPECT_EQ(jobfs_close(nullptr), 0);
    EXPECT_EQ(jobfs_closedir(nullptr), 0);
    // TearDown disconnects: it must succeed now.
}

// ---- files ----------------------------------------------------------------------------------

TEST_F(CApiTest, WriteReadSizeAndLayoutOfAFile) {
    const auto data = pattern((3 << 20) + 4567, 1);
    jobfs_layout_t hint{kChunk, 2};
    jobfs_file_t* f = nullptr;
    ASSERT_EQ(jobfs_open(fs, p("f").c_str(), O_RDWR | O_CREAT | O_EXCL, 0640, &hint, &f), 0) << jobfs_last_error();
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(jobfs_pwrite(f, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));

    // The writer sees its own length at once; others only once it is settled.
    uint64_t size = 0;
    EXPECT_EQ(jobfs_file_get_size(f, &size), 0);
    EXPECT_EQ(size, data.size());
    EXPECT_EQ(st_of(p("f")).st_size, 0);
    ASSERT_EQ(jobfs_fsync(f), 0) << jobfs_last_error();
    EXPECT_EQ(static_cast<uint64_t>(st_of(p("f")).st_size), data.size());

    struct stat st {};
    ASSERT_EQ(jobfs_fstat(f, &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), data.size());
    EXPECT_EQ(st.st_nlink, 1u);
    EXPECT_EQ(st.st_uid, ::getuid());
    EXPECT_EQ(st.st_blksize, static_cast<blksize_t>(kChunk));
    EXPECT_EQ(st.st_ino, st_of(p("f")).st_ino);
    EXPECT_GT(st.st_mtim.tv_sec, 1700000000);

    jobfs_layout_t got{};
    ASSERT_EQ(jobfs_file_get_layout(f, &got), 0);
    EXPECT_EQ(got.chunk_size, kChunk);
    EXPECT_EQ(got.stripe_count, 2u);
    ASSERT_EQ(jobfs_layout_get(fs, p("f").c_str(), &got), 0);
    EXPECT_EQ(got.chunk_size, kChunk);
    EXPECT_EQ(got.stripe_count, 2u);

    // Reads: whole, across a chunk boundary, short at the end, nothing past it.
    std::vector<uint8_t> back(data.size());
    EXPECT_EQ(jobfs_pread(f, back.data(), back.size(), 0), static_cast<ssize_t>(data.size()));
    EXPECT_EQ(back, data);
    std::vector<uint8_t> mid(1000);
    EXPECT_EQ(jobfs_pread(f, mid.data(), mid.size(), kChunk - 500), 1000);
    EXPECT_TRUE(std::equal(mid.begin(), mid.end(), data.begin() + kChunk - 500));
    EXPECT_EQ(jobfs_pread(f, back.data(), back.size(), data.size() - 10), 10);
    EXPECT_EQ(jobfs_pread(f, back.data(), back.size(), data.size()), 0);
    EXPECT_EQ(jobfs_pread(f, back.data(), 0, 0), 0);
    ASSERT_EQ(jobfs_close(f), 0);
    EXPECT_EQ(read_file(p("f")), data);

    // A file with no layout hint: the defaults, stripe count resolved to every daemon.
    ASSERT_EQ(jobfs_open(fs, p("plain").c_str(), O_WRONLY | O_CREAT, 0644, nullptr, &f), 0);
    ASSERT_EQ(jobfs_file_get_layout(f, &got), 0);
    EXPECT_EQ(got.chunk_size, 4u << 20);
    EXPECT_EQ(got.stripe_count, 3u);
    EXPECT_EQ(jobfs_close(f), 0);
}

TEST_F(CApiTest, SizeIsSettledAtCloseAndSeenThroughOtherHandles) {
    jobfs_file_t *w = nullptr, *r = nullptr;
    ASSERT_EQ(jobfs_open(fs, p("f").c_str(), O_WRONLY | O_CREAT, 0644, nullptr, &w), 0);
    ASSERT_EQ(jobfs_open(fs, p("f").c_str(), O_RDONLY, 0, nullptr, &r), 0);
    const auto data = pattern(100000, 2);
    ASSERT_EQ(jobfs_pwrite(w, data.data(), data.size(), 5000), static_cast<ssize_t>(data.size()));
    uint64_t size = 1;
    ASSERT_EQ(jobfs_file_get_size(r, &size), 0);
    EXPECT_EQ(size, 0u); // not settled yet
    ASSERT_EQ(jobfs_close(w), 0);
    ASSERT_EQ(jobfs_file_get_size(r, &size), 0);
    EXPECT_EQ(size, 105000u);
    // The reader's view grew with the size it was told: it reads the new bytes, zeros before.
    std::vector<uint8_t> back(200000, 0xff);
    ASSERT_EQ(jobfs_pread(r, back.data(), back.size(), 0), 105000);
    EXPECT_TRUE(std::all_of(back.begin(), back.begin() + 5000, [](uint8_t c) { return c == 0; }));
    EXPECT_TRUE(std::equal(data.begin(), data.end(), back.begin() + 5000));
    EXPECT_EQ(jobfs_close(r), 0);
}

// jobfs_flush: another connection sees the writes and their length, also those that were
// still on their way (write behind), without a close or fsync (MPI-IO's atomic mode).
TEST_F(CApiTest, FlushShowsBufferedWritesToOtherConnections) {
    ::setenv("JOBFS_WRITE_BEHIND_MIB", "64", 1);
    jobfs_t* writer_fs = nullptr;
    const int rc = jobfs_connect(cluster_->descriptor_path().c_str(), &writer_fs);
    ::unsetenv("JOBFS_WRITE_BEHIND_MIB");
    ASSERT_EQ(rc, 0) << jobfs_last_error();
    jobfs_file_t *w = nullptr, *r = nullptr;
    ASSERT_EQ(jobfs_open(writer_fs, p("flushed").c_str(), O_WRONLY | O_CREAT, 0644, nullptr, &w), 0);
    ASSERT_EQ(jobfs_open(fs, p("flushed").c_str(), O_RDONLY, 0, nullptr, &r), 0);
    const auto data = pattern(9 << 20, 6); // more than two chunks, all buffered
    for (size_t off = 0; off < data.size(); off += 1 << 20)
        ASSERT_EQ(jobfs_pwrite(w, data.data() + off, 1 << 20, off), 1 << 20);
    ASSERT_EQ(jobfs_flush(w), 0) << jobfs_last_error();
    std::vector<uint8_t> back(data.size() + 10);
    ASSERT_EQ(jobfs_pread(r, back.data(), back.size(), 0), static_cast<ssize_t>(data.size()));
    back.resize(data.size());
    EXPECT_TRUE(back == data);
    EXPECT_EQ(jobfs_flush(nullptr), -EINVAL);
    EXPECT_EQ(jobfs_flush(r), 0); // nothing written: nothing to do
    EXPECT_EQ(jobfs_close(r), 0);
    EXPECT_EQ(jobfs_close(w), 0);
    EXPECT_EQ(jobfs_disconnect(writer_fs), 0);
}

TEST_F(CApiTest, OpenFlagsTruncateAndFtruncate) {
    ASSERT_EQ(write_file(p("f"), pattern(3 << 20, 3)), 0);
    jobfs_file_t* f = nullptr;
    EXPECT_EQ(jobfs_open(fs, p("f").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644, nullptr, &f), -EEXIST);
    EXPECT_EQ(f, nullptr);
    // O_CREAT without O_EXCL opens the existing file and keeps its bytes.
    ASSERT_EQ(jobfs_open(fs, p("f").c_str(), O_RDWR | O_CREAT, 0644, nullptr, &f), 0);
    uint64_t size = 0;
    EXPECT_EQ(jobfs_file_get_size(f, &size), 0);
    EXPECT_EQ(size, 3u << 20);
    // ftruncate: shorter drops the bytes, longer reads zeros.
    ASSERT_EQ(jobfs_ftruncate(f, 1000), 0) << jobfs_last_error();
    EXPECT_EQ(jobfs_file_get_size(f, &size), 0);
    EXPECT_EQ(size, 1000u);
    EXPECT_EQ(st_of(p("f")).st_size, 1000);
    ASSERT_EQ(jobfs_ftruncate(f, 2 << 20), 0);
    std::vector<uint8_t> back(3 << 20);
    ASSERT_EQ(jobfs_pread(f, back.data(), back.size(), 0), 2 << 20);
    const auto orig = pattern(3 << 20, 3);
    EXPECT_TRUE(std::equal(back.begin(), back.begin() + 1000, orig.begin()));
    EXPECT_TRUE(std::all_of(back.begin() + 1000, back.begin() + (2 << 20), [](uint8_t c) { return c == 0; }));
    // Written-but-unsettled bytes past a cut go too.
    ASSERT_EQ(jobfs_pwrite(f, orig.data(), 5000, 4 << 20), 5000);
    ASSERT_EQ(jobfs_ftruncate(f, 100), 0);
    ASSERT_EQ(jobfs_ftruncate(f, 5 << 20), 0);
    ASSERT_EQ(jobfs_pread(f, back.data(), 5000, 4 << 20), 5000);
    EXPECT_TRUE(std::all_of(back.begin(), back.begin() + 5000, [](uint8_t c) { return c == 0; }));
    EXPECT_EQ(jobfs_close(f), 0);

    // O_TRUNC empties it; ftruncate needs a writable handle.
    ASSERT_EQ(jobfs_open(fs, p("f").c_str(), O_WRONLY | O_TRUNC, 0, nullptr, &f), 0);
    EXPECT_EQ(jobfs_close(f), 0);
    EXPECT_EQ(st_of(p("f")).st_size, 0);
    ASSERT_EQ(jobfs_open(fs, p("f").c_str(), O_RDONLY, 0, nullptr, &f), 0);
    EXPECT_EQ(jobfs_ftruncate(f, 10), -EBADF);
    EXPECT_EQ(jobfs_pwrite(f, "x", 1, 0), -EBADF);
    EXPECT_EQ(jobfs_close(f), 0);
    ASSERT_EQ(jobfs_open(fs, p("f").c_str(), O_WRONLY, 0, nullptr, &f), 0);
    char c;
    EXPECT_EQ(jobfs_pread(f, &c, 1, 0), -EBADF);
    EXPECT_EQ(jobfs_close(f), 0);

    // truncate by path.
    ASSERT_EQ(write_file(p("g"), pattern(10000, 4)), 0);
    ASSERT_EQ(jobfs_truncate(fs, p("g").c_str(), 10), 0);
    const auto g = pattern(10000, 4);
    EXPECT_EQ(read_file(p("g")), std::vector<uint8_t>(g.begin(), g.begin() + 10));
    EXPECT_EQ(jobfs_truncate(fs, top.c_str(), 0), -EISDIR);
    EXPECT_EQ(jobfs_truncate(fs, p("none").c_str(), 0), -ENOENT);
}

TEST_F(CApiTest, OpenErrors) {
    ASSERT_EQ(write_file(p("file"), pattern(10, 5)), 0);
    jobfs_file_t* f = reinterpret_cast<jobfs_file_t*>(0x1);
    EXPECT_EQ(jobfs_open(fs, p("none").c_str(), O_RDONLY, 0, nullptr, &f), -ENOENT);
    EXPECT_EQ(f, nullptr);
    EXPECT_NE(std::strstr(jobfs_last_error(), p("none").c_str()), nullptr) << jobfs_last_error();
    EXPECT_EQ(jobfs_open(fs, p("nodir/x").c_str(), O_WRONLY | O_CREAT, 0644, nullptr, &f), -ENOENT);
    EXPECT_EQ(jobfs_open(fs, top.c_str(), O_RDONLY, 0, nullptr, &f), -EISDIR);
    EXPECT_EQ(jobfs_open(fs, top.c_str(), O_WRONLY | O_CREAT, 0644, nullptr, &f), -EISDIR);
    EXPECT_EQ(jobfs_open(fs, p("file/x").c_str(), O_WRONLY | O_CREAT, 0644, nullptr, &f), -ENOTDIR);
    EXPECT_EQ(jobfs_open(fs, p("file/x").c_str(), O_RDONLY, 0, nullptr, &f), -ENOTDIR);
    EXPECT_EQ(jobfs_open(fs, p("file").c_str(), O_ACCMODE, 0, nullptr, &f), -EINVAL);
    EXPECT_EQ(jobfs_open(fs, "relative/path", O_RDONLY, 0, nullptr, &f), -EINVAL);
    EXPECT_EQ(jobfs_open(fs, nullptr, O_RDONLY, 0, nullptr, &f), -EINVAL);
    EXPECT_EQ(jobfs_open(nullptr, p("file").c_str(), O_RDONLY, 0, nullptr, &f), -EINVAL);
    EXPECT_EQ(jobfs_open(fs, p("file").c_str(), O_RDONLY, 0, nullptr, nullptr), -EINVAL);
    EXPECT_EQ(jobfs_open(fs, p(std::string(256, 'n')).c_str(), O_WRONLY | O_CREAT, 0644, nullptr, &f), -ENAMETOOLONG);
    EXPECT_EQ(jobfs_open(fs, ("/" + std::string(PATH_MAX, 'p')).c_str(), O_RDONLY, 0, nullptr, &f), -ENAMETOOLONG);
    // A name of 255 bytes is fine.
    ASSERT_EQ(jobfs_open(fs, p(std::string(255, 'n')).c_str(), O_WRONLY | O_CREAT, 0644, nullptr, &f), 0);
    EXPECT_EQ(jobfs_close(f), 0);
    // Layout hints the daemons refuse: not a power of two, below 4 KiB.
    jobfs_layout_t bad{1000, 0};
    EXPECT_EQ(jobfs_open(fs, p("bad").c_str(), O_WRONLY | O_CREAT, 0644, &bad, &f), -EINVAL);
    bad = jobfs_layout_t{3 << 20, 0};
    EXPECT_EQ(jobfs_open(fs, p("bad").c_str(), O_WRONLY | O_CREAT, 0644, &bad, &f), -EINVAL);
    struct stat st {};
    EXPECT_EQ(jobfs_stat(fs, p("bad").c_str(), &st), -ENOENT);
}

TEST_F(CApiTest, DataCallsRefuseBadArguments) {
    jobfs_file_t* f = nullptr;
    ASSERT_EQ(jobfs_open(fs, p("f").c_str(), O_RDWR | O_CREAT, 0644, nullptr, &f), 0);
    EXPECT_EQ(jobfs_pwrite(f, nullptr, 10, 0), -EINVAL);
    EXPECT_EQ(jobfs_pread(f, nullptr, 10, 0), -EINVAL);
    EXPECT_EQ(jobfs_pread(nullptr, &f, 1, 0), -EINVAL);
    EXPECT_EQ(jobfs_pwrite(f, nullptr, 0, 0), 0); // writing nothing is fine
    EXPECT_EQ(jobfs_pwrite(f, "x", 1, uint64_t(INT64_MAX)), -EFBIG);
    EXPECT_EQ(jobfs_pwrite(f, "x", 1, UINT64_MAX), -EFBIG);
    EXPECT_EQ(jobfs_ftruncate(f, UINT64_MAX), -EFBIG);
    EXPECT_EQ(jobfs_fsync(nullptr), -EINVAL);
    EXPECT_EQ(jobfs_fstat(f, nullptr), -EINVAL);
    EXPECT_EQ(jobfs_fstat(nullptr, nullptr), -EINVAL);
    EXPECT_EQ(jobfs_file_get_size(f, nullptr), -EINVAL);
    EXPECT_EQ(jobfs_file_get_layout(f, nullptr), -EINVAL);
    EXPECT_EQ(jobfs_ftruncate(nullptr, 0), -EINVAL);
    EXPECT_EQ(jobfs_close(f), 0);
    uint64_t size = 1;
    ASSERT_EQ(jobfs_open(fs, p("f").c_str(), O_RDONLY, 0, nullptr, &f), 0);
    EXPECT_EQ(jobfs_file_get_size(f, &size), 0);
    EXPECT_EQ(size, 0u); // the refused writes left nothing behind
    EXPECT_EQ(jobfs_close(f), 0);
}

// ---- namespace ------------------------------------------------------------------------------

TEST_F(CApiTest, DirectoriesAndTheirErrors) {
    ASSERT_EQ(jobfs_mkdir(fs, p("a").c_str(), 0750), 0);
    struct stat st = st_of(p("a"));
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0750u);
    EXPECT_EQ(st.st_nlink, 2u);
    EXPECT_EQ(jobfs_mkdir(fs, p("a").c_str(), 0755), -EEXIST);
    EXPECT_EQ(jobfs_mkdir(fs, p("x/y").c_str(), 0755), -ENOENT);
    ASSERT_EQ(write_file(p("a/file"), pattern(10, 6)), 0);
    EXPECT_EQ(jobfs_mkdir(fs, p("a/file/sub").c_str(), 0755), -ENOTDIR);
    EXPECT_EQ(jobfs_mkdir(fs, p(std::string(300, 'd')).c_str(), 0755), -ENAMETOOLONG);
    EXPECT_EQ(jobfs_mkdir(fs, "/", 0755), -EINVAL); // the root has no parent to make it in
    ASSERT_EQ(jobfs_mkdir(fs, p("a/../b").c_str(), 0755), 0); // ".." is lexical: this is top/b
    EXPECT_TRUE(S_ISDIR(st_of(p("b")).st_mode));
    ASSERT_EQ(jobfs_rmdir(fs, p("b").c_str()), 0);
    EXPECT_EQ(jobfs_mkdir(fs, "no/slash", 0755), -EINVAL);
    EXPECT_EQ(jobfs_mkdir(nullptr, p("q").c_str(), 0755), -EINVAL);
    EXPECT_EQ(jobfs_rmdir(fs, p("a").c_str()), -ENOTEMPTY);
    EXPECT_EQ(jobfs_rmdir(fs, p("a/file").c_str()), -ENOTDIR);
    EXPECT_EQ(jobfs_rmdir(fs, p("none").c_str()), -ENOENT);
    // Directories land on any daemon, their entry's or another: unlink refuses them alike.
    for (const char* d : {"d0", "d1", "d2", "d3", "d4", "d5"}) {
        ASSERT_EQ(jobfs_mkdir(fs, p(d).c_str(), 0755), 0);
        EXPECT_EQ(jobfs_unlink(fs, p(d).c_str()), -EISDIR) << d << ": " << jobfs_last_error();
    }
    EXPECT_EQ(jobfs_unlink(fs, p("a").c_str()), -EISDIR);
    EXPECT_EQ(jobfs_unlink(fs, p("none").c_str()), -ENOENT);
    // "." components and doubled slashes name the same thing.
    EXPECT_EQ(st_of(top + "//a/./file").st_ino, st_of(p("a/file")).st_ino);
    ASSERT_EQ(jobfs_unlink(fs, p("a/file").c_str()), 0);
    struct stat none {};
    EXPECT_EQ(jobfs_stat(fs, p("a/file").c_str(), &none), -ENOENT);
    ASSERT_EQ(jobfs_rmdir(fs, p("a").c_str()), 0);
    EXPECT_EQ(jobfs_lstat(fs, p("a").c_str(), &none), -ENOENT);
    EXPECT_EQ(jobfs_stat(fs, p("a").c_str(), nullptr), -EINVAL);
}

TEST_F(CApiTest, RenameWithFlags) {
    ASSERT_EQ(write_file(p("a"), pattern(100, 7)), 0);
    ASSERT_EQ(write_file(p("b"), pattern(200, 8)), 0);
    EXPECT_EQ(jobfs_rename(fs, p("a").c_str(), p("b").c_str(), JOBFS_RENAME_NOREPLACE), -EEXIST);
    ASSERT_EQ(jobfs_rename(fs, p("a").c_str(), p("b").c_str(), JOBFS_RENAME_EXCHANGE), 0);
    EXPECT_EQ(read_file(p("a")), pattern(200, 8));
    EXPECT_EQ(read_file(p("b")), pattern(100, 7));
    ASSERT_EQ(jobfs_rename(fs, p("a").c_str(), p("c").c_str(), 0), 0);
    struct stat st {};
    EXPECT_EQ(jobfs_stat(fs, p("a").c_str(), &st), -ENOENT);
    EXPECT_EQ(read_file(p("c")), pattern(200, 8));
    ASSERT_EQ(jobfs_rename(fs, p("c").c_str(), p("b").c_str(), 0), 0); // replaces b
    EXPECT_EQ(read_file(p("b")), pattern(200, 8));
    EXPECT_EQ(jobfs_rename(fs, p("none").c_str(), p("d").c_str(), 0), -ENOENT);
    EXPECT_EQ(jobfs_rename(fs, p("b").c_str(), p("d").c_str(), 4), -EINVAL);
    EXPECT_EQ(jobfs_rename(fs, p("b").c_str(), p("d").c_str(), JOBFS_RENAME_NOREPLACE | JOBFS_RENAME_EXCHANGE),
              -EINVAL);
    EXPECT_EQ(jobfs_rename(fs, p("b").c_str(), "d", 0), -EINVAL);
    // Between directories, which may live on different daemons: each one of several.
    for (const char* d : {"d0", "d1", "d2", "d3", "d4"}) {
        ASSERT_EQ(jobfs_mkdir(fs, p(d).c_str(), 0755), 0);
        ASSERT_EQ(jobfs_rename(fs, p("b").c_str(), (p(d) + "/moved").c_str(), 0), 0) << d << ": " << jobfs_last_error();
        EXPECT_EQ(read_file(p(d) + "/moved"), pattern(200, 8));
        ASSERT_EQ(jobfs_rename(fs, (p(d) + "/moved").c_str(), p("b").c_str(), 0), 0) << jobfs_last_error();
        // A file cannot replace a directory, a directory cannot move into itself.
        EXPECT_EQ(jobfs_rename(fs, p("b").c_str(), p(d).c_str(), 0), -EISDIR) << d;
        EXPECT_EQ(jobfs_rename(fs, p(d).c_str(), (p(d) + "/in").c_str(), 0), -EINVAL) << d;
    }
    // Directories move with what they hold.
    ASSERT_EQ(write_file(p("d0/x"), pattern(10, 17)), 0);
    ASSERT_EQ(jobfs_rename(fs, p("d0").c_str(), p("d1/d0").c_str(), 0), 0) << jobfs_last_error();
    EXPECT_EQ(read_file(p("d1/d0/x")), pattern(10, 17));
    EXPECT_EQ(jobfs_rmdir(fs, p("d1").c_str()), -ENOTEMPTY);
}

TEST_F(CApiTest, SymlinksAndHardLinks) {
    ASSERT_EQ(write_file(p("target"), pattern(5000, 10)), 0);
    ASSERT_EQ(jobfs_symlink(fs, "target", p("rel").c_str()), 0);
    ASSERT_EQ(jobfs_symlink(fs, p("target").c_str(), p("abs").c_str()), 0);
    EXPECT_EQ(jobfs_symlink(fs, "x", p("rel").c_str()), -EEXIST);
    EXPECT_EQ(jobfs_symlink(fs, "", p("empty").c_str()), -EINVAL);
    EXPECT_EQ(jobfs_symlink(fs, nullptr, p("null").c_str()), -EINVAL);
    // stat follows, lstat does not.
    EXPECT_EQ(st_of(p("rel")).st_ino, st_of(p("target")).st_ino);
    EXPECT_EQ(st_of(p("abs")).st_size, 5000);
    struct stat l = st_of(p("rel"), false);
    EXPECT_TRUE(S_ISLNK(l.st_mode));
    EXPECT_EQ(l.st_size, 6); // strlen("target")
    EXPECT_EQ(read_file(p("rel")), pattern(5000, 10));

    char buf[64];
    EXPECT_EQ(jobfs_readlink(fs, p("rel").c_str(), buf, sizeof buf), 6);
    EXPECT_STREQ(buf, "target");
    EXPECT_EQ(jobfs_readlink(fs, p("abs").c_str(), nullptr, 0), static_cast<ssize_t>(p("target").size()));
    EXPECT_EQ(jobfs_readlink(fs, p("rel").c_str(), buf, 6), -ERANGE); // no room for the NUL
    EXPECT_EQ(jobfs_readlink(fs, p("rel").c_str(), buf, 7), 6);
    EXPECT_EQ(jobfs_readlink(fs, p("target").c_str(), buf, sizeof buf), -EINVAL);
    EXPECT_EQ(jobfs_readlink(fs, p("none").c_str(), buf, sizeof buf), -ENOENT);
    EXPECT_EQ(jobfs_readlink(fs, p("rel").c_str(), nullptr, 10), -EINVAL);

    // Hard links share the inode and its bytes; the data stays until the last name goes.
    ASSERT_EQ(jobfs_link(fs, p("target").c_str(), p("second").c_str()), 0) << jobfs_last_error();
    EXPECT_EQ(st_of(p("second")).st_ino, st_of(p("target")).st_ino);
    EXPECT_EQ(st_of(p("target")).st_nlink, 2u);
    EXPECT_EQ(jobfs_link(fs, p("target").c_str(), p("second").c_str()), -EEXIST);
    EXPECT_EQ(jobfs_link(fs, p("none").c_str(), p("third").c_str()), -ENOENT);
    EXPECT_EQ(jobfs_link(fs, top.c_str(), p("dirlink").c_str()), -EPERM);
    // A link to a symlink is to the symlink itself.
    ASSERT_EQ(jobfs_link(fs, p("rel").c_str(), p("rel2").c_str()), 0);
    // Links from other directories, wherever they live.
    for (const char* d : {"d0", "d1", "d2", "d3"}) {
        ASSERT_EQ(jobfs_mkdir(fs, p(d).c_str(), 0755), 0);
        ASSERT_EQ(jobfs_link(fs, p("target").c_str(), (p(d) + "/l").c_str()), 0) << d << ": " << jobfs_last_error();
    }
    EXPECT_EQ(st_of(p("target")).st_nlink, 6u);
    for (const char* d : {"d0", "d1", "d2", "d3"}) ASSERT_EQ(jobfs_unlink(fs, (p(d) + "/l").c_str()), 0);
    EXPECT_TRUE(S_ISLNK(st_of(p("rel2"), false).st_mode));
    ASSERT_EQ(jobfs_unlink(fs, p("target").c_str()), 0);
    EXPECT_EQ(st_of(p("second")).st_nlink, 1u);
    EXPECT_EQ(read_file(p("second")), pattern(5000, 10));
    struct stat st {};
    EXPECT_EQ(jobfs_stat(fs, p("rel").c_str(), &st), -ENOENT); // dangling now
    EXPECT_EQ(jobfs_lstat(fs, p("rel").c_str(), &st), 0);
}

TEST_F(CApiTest, ChmodChownUtimens) {
    ASSERT_EQ(write_file(p("f"), pattern(10, 11)), 0);
    ASSERT_EQ(jobfs_symlink(fs, "f", p("link").c_str()), 0);
    ASSERT_EQ(jobfs_chmod(fs, p("f").c_str(), 04711), 0);
    EXPECT_EQ(st_of(p("f")).st_mode & 07777, 04711u);
    EXPECT_TRUE(S_ISREG(st_of(p("f")).st_mode));
    ASSERT_EQ(jobfs_chmod(fs, p("link").c_str(), 0600), 0); // follows the link
    EXPECT_EQ(st_of(p("f")).st_mode & 07777, 0600u);
    EXPECT_EQ(jobfs_chmod(fs, p("f").c_str(), S_IFDIR | 0755), -EINVAL);
    EXPECT_EQ(jobfs_chmod(fs, p("none").c_str(), 0755), -ENOENT);

    if (::getuid() == 0) { // only root gives files away
        ASSERT_EQ(jobfs_chown(fs, p("f").c_str(), 1234, 5678, 0), 0) << jobfs_last_error();
        struct stat st = st_of(p("f"));
        EXPECT_EQ(st.st_uid, 1234u);
        EXPECT_EQ(st.st_gid, 5678u);
        ASSERT_EQ(jobfs_chown(fs, p("f").c_str(), static_cast<uid_t>(-1), 42, 0), 0);
        st = st_of(p("f"));
        EXPECT_EQ(st.st_uid, 1234u); // -1 left it
        EXPECT_EQ(st.st_gid, 42u);
        ASSERT_EQ(jobfs_chown(fs, p("link").c_str(), 77, static_cast<gid_t>(-1), 1), 0); // lchown
        EXPECT_EQ(st_of(p("link"), false).st_uid, 77u);
        EXPECT_EQ(st_of(p("f")).st_uid, 1234u);
    } else {
        EXPECT_EQ(jobfs_chown(fs, p("f").c_str(), ::getuid() + 1, static_cast<gid_t>(-1), 0), -EPERM);
    }
    EXPECT_EQ(jobfs_chown(fs, p("none").c_str(), 1, 1, 0), -ENOENT);

    const int64_t t1 = 1000000000LL * 1600000000 + 123456789, t2 = -1500000000LL; // one before the epoch
    ASSERT_EQ(jobfs_utimens(fs, p("f").c_str(), t1, t2), 0) << jobfs_last_error();
    struct stat st = st_of(p("f"));
    EXPECT_EQ(st.st_atim.tv_sec, 1600000000);
    EXPECT_EQ(st.st_atim.tv_nsec, 123456789);
    EXPECT_EQ(st.st_mtim.tv_sec, -2);
    EXPECT_EQ(st.st_mtim.tv_nsec, 500000000);
    ASSERT_EQ(jobfs_utimens(fs, p("f").c_str(), JOBFS_UTIME_OMIT, JOBFS_UTIME_NOW), 0);
    st = st_of(p("f"));
    EXPECT_EQ(st.st_atim.tv_sec, 1600000000); // omitted: unchanged
    EXPECT_GE(st.st_mtim.tv_sec, ::time(nullptr) - 60);
    EXPECT_EQ(jobfs_utimens(fs, p("none").c_str(), JOBFS_UTIME_NOW, JOBFS_UTIME_NOW), -ENOENT);
}

// ---- directories ----------------------------------------------------------------------------

TEST_F(CApiTest, ReaddirPagesThroughALargeDirectory) {
    constexpr int kFiles = 1234; // more than one page (1000) of the daemon
    std::map<std::string, uint64_t> made;
    for (int i = 0; i < kFiles; ++i) {
        char name[32];
        std::snprintf(name, sizeof name, "f%05d", i);
        jobfs_file_t* f = nullptr;
        ASSERT_EQ(jobfs_open(fs, p(name).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644, nullptr, &f), 0);
        ASSERT_EQ(jobfs_close(f), 0);
    }
    ASSERT_EQ(jobfs_mkdir(fs, p("sub").c_str(), 0755), 0);
    ASSERT_EQ(jobfs_symlink(fs, "f00000", p("ln").c_str()), 0);

    jobfs_dir_t* d = nullptr;
    ASSERT_EQ(jobfs_opendir(fs, top.c_str(), &d), 0);
    std::vector<std::string> names;
    std::map<std::string, uint32_t> types;
    jobfs_dirent_t e;
    int rc;
    while ((rc = jobfs_readdir(d, &e)) == 1) {
        names.push_back(e.name);
        types[e.name] = e.type;
        if (names.size() == 1) {
            EXPECT_EQ(e.ino, st_of(p(e.name)).st_ino);
        }
    }
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(jobfs_readdir(d, &e), 0); // stays at the end
    EXPECT_EQ(jobfs_closedir(d), 0);
    ASSERT_EQ(names.size(), static_cast<size_t>(kFiles + 2));
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()); // no repeats
    EXPECT_EQ(types["f00000"], static_cast<uint32_t>(JOBFS_TYPE_REGULAR));
    EXPECT_EQ(types["f01233"], static_cast<uint32_t>(JOBFS_TYPE_REGULAR));
    EXPECT_EQ(types["sub"], static_cast<uint32_t>(JOBFS_TYPE_DIRECTORY));
    EXPECT_EQ(types["ln"], static_cast<uint32_t>(JOBFS_TYPE_SYMLINK));

    // An empty directory; errors.
    ASSERT_EQ(jobfs_opendir(fs, p("sub").c_str(), &d), 0);
    EXPECT_EQ(jobfs_readdir(d, &e), 0);
    EXPECT_EQ(jobfs_readdir(d, nullptr), -EINVAL);
    EXPECT_EQ(jobfs_closedir(d), 0);
    d = reinterpret_cast<jobfs_dir_t*>(0x1);
    EXPECT_EQ(jobfs_opendir(fs, p("f00001").c_str(), &d), -ENOTDIR);
    EXPECT_EQ(d, nullptr);
    EXPECT_EQ(jobfs_opendir(fs, p("none").c_str(), &d), -ENOENT);
    EXPECT_EQ(jobfs_opendir(fs, p("sub").c_str(), nullptr), -EINVAL);
    EXPECT_EQ(jobfs_readdir(nullptr, &e), -EINVAL);
}

// ---- extended attributes --------------------------------------------------------------------

TEST_F(CApiTest, XattrsWithGetxattrBufferSemantics) {
    ASSERT_EQ(write_file(p("f"), pattern(10, 12)), 0);
    const std::string f = p("f");
    const std::string big(1000, 'v');
    ASSERT_EQ(jobfs_setxattr(fs, f.c_str(), "user.big", big.data(), big.size(), 0), 0) << jobfs_last_error();
    ASSERT_EQ(jobfs_setxattr(fs, f.c_str(), "user.a", "1", 1, JOBFS_XATTR_CREATE), 0);
    ASSERT_EQ(jobfs_setxattr(fs, f.c_str(), "user.empty", nullptr, 0, 0), 0);

    // getxattr: size 0 asks for the size, too small is -ERANGE, else the value.
    EXPECT_EQ(jobfs_getxattr(fs, f.c_str(), "user.big", nullptr, 0), 1000);
    std::vector<char> buf(2000);
    EXPECT_EQ(jobfs_getxattr(fs, f.c_str(), "user.big", buf.data(), 999), -ERANGE);
    ASSERT_EQ(jobfs_getxattr(fs, f.c_str(), "user.big", buf.data(), buf.size()), 1000);
    EXPECT_EQ(std::string(buf.data(), 1000), big);
    EXPECT_EQ(jobfs_getxattr(fs, f.c_str(), "user.empty", buf.data(), buf.size()), 0);
    EXPECT_EQ(jobfs_getxattr(fs, f.c_str(), "user.none", buf.data(), buf.size()), -ENODATA);
    EXPECT_EQ(jobfs_getxattr(fs, p("none").c_str(), "user.a", buf.data(), buf.size()), -ENOENT);

    // Flags.
    EXPECT_EQ(jobfs_setxattr(fs, f.c_str(), "user.a", "2", 1, JOBFS_XATTR_CREATE), -EEXIST);
    EXPECT_EQ(jobfs_setxattr(fs, f.c_str(), "user.new", "2", 1, JOBFS_XATTR_REPLACE), -ENODATA);
    ASSERT_EQ(jobfs_setxattr(fs, f.c_str(), "user.a", "22", 2, JOBFS_XATTR_REPLACE), 0);
    EXPECT_EQ(jobfs_getxattr(fs, f.c_str(), "user.a", buf.data(), buf.size()), 2);
    EXPECT_EQ(std::string(buf.data(), 2), "22");
    EXPECT_EQ(jobfs_setxattr(fs, f.c_str(), "user.a", "2", 1, 3), -EINVAL);
    EXPECT_EQ(jobfs_setxattr(fs, f.c_str(), nullptr, "2", 1, 0), -EINVAL);
    EXPECT_EQ(jobfs_setxattr(fs, f.c_str(), "user.a", nullptr, 1, 0), -EINVAL);
    EXPECT_EQ(jobfs_setxattr(fs, f.c_str(), "", "2", 1, 0), -ERANGE);
    EXPECT_EQ(jobfs_setxattr(fs, f.c_str(), ("user." + std::string(300, 'n')).c_str(), "2", 1, 0), -ERANGE);
    const std::string huge(65537, 'h');
    EXPECT_EQ(jobfs_setxattr(fs, f.c_str(), "user.huge", huge.data(), huge.size(), 0), -E2BIG);
    ASSERT_EQ(jobfs_setxattr(fs, f.c_str(), "user.max", huge.data(), huge.size() - 1, 0), 0); // 64 KiB is fine
    EXPECT_EQ(jobfs_getxattr(fs, f.c_str(), "user.max", nullptr, 0), 65536);
    ASSERT_EQ(jobfs_removexattr(fs, f.c_str(), "user.max"), 0);
    EXPECT_EQ(jobfs_setxattr(fs, f.c_str(), "bogus.ns", "2", 1, 0), -ENOTSUP);

    // listxattr: NUL-separated names, same buffer rules.
    const std::string expect = std::string("user.a") + '\0' + "user.big" + '\0' + "user.empty" + '\0';
    EXPECT_EQ(jobfs_listxattr(fs, f.c_str(), nullptr, 0), static_cast<ssize_t>(expect.size()));
    EXPECT_EQ(jobfs_listxattr(fs, f.c_str(), buf.data(), expect.size() - 1), -ERANGE);
    ASSERT_EQ(jobfs_listxattr(fs, f.c_str(), buf.data(), buf.size()), static_cast<ssize_t>(expect.size()));
    EXPECT_EQ(std::string(buf.data(), expect.size()), expect);
    EXPECT_EQ(jobfs_listxattr(fs, p("none").c_str(), buf.data(), buf.size()), -ENOENT);

    // removexattr.
    ASSERT_EQ(jobfs_removexattr(fs, f.c_str(), "user.big"), 0);
    EXPECT_EQ(jobfs_removexattr(fs, f.c_str(), "user.big"), -ENODATA);
    EXPECT_EQ(jobfs_getxattr(fs, f.c_str(), "user.big", nullptr, 0), -ENODATA);
    EXPECT_EQ(jobfs_listxattr(fs, f.c_str(), nullptr, 0), static_cast<ssize_t>(expect.size() - 9));
    EXPECT_EQ(jobfs_removexattr(fs, f.c_str(), nullptr), -EINVAL);

    // A directory has xattrs too; an empty list is 0 bytes.
    EXPECT_EQ(jobfs_listxattr(fs, top.c_str(), nullptr, 0), 0);
    ASSERT_EQ(jobfs_setxattr(fs, top.c_str(), "user.d", "x", 1, 0), 0);
    EXPECT_EQ(jobfs_getxattr(fs, top.c_str(), "user.d", buf.data(), buf.size()), 1);
}

// ---- layout ---------------------------------------------------------------------------------

TEST_F(CApiTest, LayoutOfDirectoriesAndFiles) {
    jobfs_layout_t l{};
    ASSERT_EQ(jobfs_layout_get(fs, top.c_str(), &l), 0);
    EXPECT_EQ(l.chunk_size, 0u); // no default of its own
    EXPECT_EQ(l.stripe_count, 0u);
    const jobfs_layout_t dflt{2u << 20, 1};
    ASSERT_EQ(jobfs_layout_set(fs, top.c_str(), &dflt), 0) << jobfs_last_error();
    ASSERT_EQ(jobfs_layout_get(fs, top.c_str(), &l), 0);
    EXPECT_EQ(l.chunk_size, 2u << 20);
    EXPECT_EQ(l.stripe_count, 1u);

    // New files inherit the directory's default; a hint wins over it.
    ASSERT_EQ(write_file(p("inherits"), pattern(3 << 20, 13)), 0);
    ASSERT_EQ(jobfs_layout_get(fs, p("inherits").c_str(), &l), 0);
    EXPECT_EQ(l.chunk_size, 2u << 20);
    EXPECT_EQ(l.stripe_count, 1u);
    const jobfs_layout_t hint{kChunk, 3};
    ASSERT_EQ(write_file(p("hinted"), pattern(10, 14), &hint), 0);
    ASSERT_EQ(jobfs_layout_get(fs, p("hinted").c_str(), &l), 0);
    EXPECT_EQ(l.chunk_size, kChunk);
    EXPECT_EQ(l.stripe_count, 3u);
    // The inherited layout is the one the bytes use: all chunks of the file on one daemon.
    auto per = chunks_per_daemon(st_of(p("inherits")).st_ino);
    EXPECT_EQ(std::count(per.begin(), per.end(), 0u), 2) << per[0] << " " << per[1] << " " << per[2];
    EXPECT_EQ(read_file(p("inherits")), pattern(3 << 20, 13));

    // An empty file's layout can change, a file with data's cannot.
    jobfs_file_t* f = nullptr;
    ASSERT_EQ(jobfs_open(fs, p("empty").c_str(), O_WRONLY | O_CREAT, 0644, nullptr, &f), 0);
    ASSERT_EQ(jobfs_close(f), 0);
    ASSERT_EQ(jobfs_layout_set(fs, p("empty").c_str(), &hint), 0);
    ASSERT_EQ(jobfs_layout_get(fs, p("empty").c_str(), &l), 0);
    EXPECT_EQ(l.chunk_size, kChunk);
    EXPECT_EQ(jobfs_layout_set(fs, p("inherits").c_str(), &hint), -EBUSY);
    const jobfs_layout_t bad{12345, 0};
    EXPECT_EQ(jobfs_layout_set(fs, top.c_str(), &bad), -EINVAL);
    EXPECT_EQ(jobfs_layout_set(fs, p("none").c_str(), &hint), -ENOENT);
    EXPECT_EQ(jobfs_layout_set(fs, top.c_str(), nullptr), -EINVAL);
    EXPECT_EQ(jobfs_layout_get(fs, top.c_str(), nullptr), -EINVAL);
}

// ---- threads and fan-out --------------------------------------------------------------------

TEST_F(CApiTest, ThreadsWriteDisjointRegionsOfOneFileThroughOneHandle) {
    constexpr size_t kThreads = 8, kBlock = (2 << 20) + 333; // blocks straddle chunk boundaries
    jobfs_layout_t hint{kChunk, 0};
    jobfs_file_t* f = nullptr;
    ASSERT_EQ(jobfs_open(fs, p("shared").c_str(), O_RDWR | O_CREAT, 0644, &hint, &f), 0);
    std::vector<std::thread> ts;
    std::vector<ssize_t> results(kThreads, -1);
    for (size_t t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
            auto data = pattern(kBlock, 100 + t);
            // Each thread writes its block in uneven pieces, interleaving with the others.
            size_t done = 0;
            ssize_t rc = 0;
            while (done < kBlock && rc >= 0) {
                const size_t n = std::min<size_t>(kBlock - done, 300000 + 1000 * t);
                rc = jobfs_pwrite(f, data.data() + done, n, t * kBlock + done);
                if (rc == static_cast<ssize_t>(n)) done += n;
                else if (rc >= 0) rc = -EIO;
            }
            results[t] = rc < 0 ? rc : static_cast<ssize_t>(done);
        });
    for (auto& t : ts) t.join();
    for (size_t t = 0; t < kThreads; ++t) EXPECT_EQ(results[t], static_cast<ssize_t>(kBlock)) << "thread " << t;
    ASSERT_EQ(jobfs_close(f), 0);
    EXPECT_EQ(static_cast<size_t>(st_of(p("shared")).st_size), kThreads * kBlock);

    // Read back concurrently too, each thread through its own handle, then all at once here.
    ts.clear();
    std::vector<int> same(kThreads, 0);
    for (size_t t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
            jobfs_file_t* r = nullptr;
            if (jobfs_open(fs, p("shared").c_str(), O_RDONLY, 0, nullptr, &r) != 0) return;
            std::vector<uint8_t> back(kBlock);
            same[t] = jobfs_pread(r, back.data(), kBlock, t * kBlock) == static_cast<ssize_t>(kBlock) &&
                      back == pattern(kBlock, 100 + t);
            jobfs_close(r);
        });
    for (auto& t : ts) t.join();
    for (size_t t = 0; t < kThreads; ++t) EXPECT_TRUE(same[t]) << "block of thread " << t;
    auto all = read_file(p("shared"));
    ASSERT_EQ(all.size(), kThreads * kBlock);
    for (size_t t = 0; t < kThreads; ++t)
        EXPECT_TRUE(std::equal(all.begin() + t * kBlock, all.begin() + (t + 1) * kBlock, pattern(kBlock, 100 + t).begin()))
            << "block " << t;
}

// Threads of two connections (two nodes) append records of different lengths to one file,
// each through its own handle, holding it open: every record lands whole at the offset it was
// told, none overlaps another, and the length covers them all before any close.
TEST_F(CApiTest, AppendsOfTwoConnectionsLandWholeWhereTheyAreToldAndNeverOverlap) {
    jobfs_t* fs2 = nullptr;
    ASSERT_EQ(jobfs_connect(cluster_->descriptor_path().c_str(), &fs2), 0) << jobfs_last_error();
    constexpr int kThreads = 4, kRecords = 40;
    auto record = [](int t, int i) { return pattern(100 + 37 * t + i, 1000 * t + i); };
    struct Placed {
        int t, i;
        uint64_t at;
    };
    std::vector<std::vector<Placed>> placed(kThreads);
    std::vector<std::string> errors(kThreads);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
            jobfs_file_t* f = nullptr;
            if (jobfs_open(t < 2 ? fs : fs2, p("log").c_str(), O_WRONLY | O_CREAT, 0644, nullptr, &f) != 0) {
                errors[t] = jobfs_last_error();
                return;
            }
            for (int i = 0; i < kRecords; ++i) {
                const auto r = record(t, i);
                uint64_t at = ~0ull;
                if (jobfs_append(f, r.data(), r.size(), &at) != static_cast<ssize_t>(r.size())) {
                    errors[t] = jobfs_last_error();
                    break;
                }
                placed[t].push_back({t, i, at});
            }
            if (jobfs_close(f) != 0) errors[t] = jobfs_last_error();
        });
    for (auto& t : ts) t.join();
    for (int t = 0; t < kThreads; ++t) ASSERT_EQ(errors[t], "") << "thread " << t;
    std::vector<Placed> all;
    uint64_t total = 0;
    for (auto& v : placed)
        for (auto& pl : v) {
            all.push_back(pl);
            total += record(pl.t, pl.i).size();
        }
    std::sort(all.begin(), all.end(), [](const Placed& a, const Placed& b) { return a.at < b.at; });
    uint64_t next = 0;
    for (auto& pl : all) {
        EXPECT_EQ(pl.at, next) << "record " << pl.t << "/" << pl.i << ": a gap or an overlap";
        next = pl.at + record(pl.t, pl.i).size();
    }
    EXPECT_EQ(next, total);
    auto back = read_file(p("log"));
    ASSERT_EQ(back.size(), total);
    for (auto& pl : all) {
        const auto r = record(pl.t, pl.i);
        EXPECT_TRUE(std::equal(r.begin(), r.end(), back.begin() + pl.at)) << "record " << pl.t << "/" << pl.i;
    }

    // This handle's own write past the end, not settled yet, comes before its next append.
    jobfs_file_t* f = nullptr;
    ASSERT_EQ(jobfs_open(fs2, p("log").c_str(), O_RDWR, 0, nullptr, &f), 0);
    ASSERT_EQ(jobfs_pwrite(f, "gap", 3, total + 10), 3);
    uint64_t at = 0;
    ASSERT_EQ(jobfs_append(f, "end", 3, &at), 3) << jobfs_last_error();
    EXPECT_EQ(at, total + 13);
    struct stat st {};
    ASSERT_EQ(jobfs_stat(fs, p("log").c_str(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), total + 16) << "seen by the other connection before the close";
    ASSERT_EQ(jobfs_close(f), 0);
    // Errors: a read-only handle, bad arguments.
    ASSERT_EQ(jobfs_open(fs, p("log").c_str(), O_RDONLY, 0, nullptr, &f), 0);
    EXPECT_EQ(jobfs_append(f, "x", 1, nullptr), -EBADF);
    EXPECT_EQ(jobfs_append(f, nullptr, 1, nullptr), -EINVAL);
    EXPECT_EQ(jobfs_append(nullptr, "x", 1, nullptr), -EINVAL);
    ASSERT_EQ(jobfs_close(f), 0);
    EXPECT_EQ(st_of(p("log")).st_size, static_cast<off_t>(total + 16)) << "a refused append changed the length";
    ASSERT_EQ(jobfs_disconnect(fs2), 0);
}

TEST_F(CApiTest, ThreadsShareOneConnectionAndKeepTheirOwnLastError) {
    constexpr int kThreads = 6, kRounds = 20;
    std::vector<int> wrong(kThreads, 0);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
            const std::string mine = p("t" + std::to_string(t));
            if (jobfs_mkdir(fs, mine.c_str(), 0755) != 0) ++wrong[t];
            for (int i = 0; i < kRounds; ++i) {
                const std::string name = mine + "/f" + std::to_string(i);
                jobfs_file_t* f = nullptr;
                if (jobfs_open(fs, name.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644, nullptr, &f) != 0) ++wrong[t];
                else if (jobfs_pwrite(f, name.data(), name.size(), 0) != static_cast<ssize_t>(name.size()) ||
                         jobfs_close(f) != 0)
                    ++wrong[t];
                // A failure of this thread: its message names this thread's path, whatever the
                // others fail at meanwhile.
                const std::string missing = mine + "/missing" + std::to_string(i);
                struct stat st;
                if (jobfs_stat(fs, missing.c_str(), &st) != -ENOENT) ++wrong[t];
                if (std::strstr(jobfs_last_error(), missing.c_str()) == nullptr) ++wrong[t];
            }
        });
    for (auto& t : ts) t.join();
    for (int t = 0; t < kThreads; ++t) {
        EXPECT_EQ(wrong[t], 0) << "thread " << t;
        jobfs_dir_t* d = nullptr;
        ASSERT_EQ(jobfs_opendir(fs, p("t" + std::to_string(t)).c_str(), &d), 0);
        jobfs_dirent_t e;
        int n = 0;
        while (jobfs_readdir(d, &e) == 1) ++n;
        EXPECT_EQ(n, kRounds);
        jobfs_closedir(d);
        const std::string name = p("t" + std::to_string(t)) + "/f7";
        auto back = read_file(name);
        EXPECT_EQ(std::string(back.begin(), back.end()), name);
    }
}

TEST_F(CApiTest, LargeWriteLandsOnEveryDaemon) {
    constexpr size_t kSize = 24 << 20; // 24 chunks of 1 MiB over 3 daemons
    const auto data = pattern(kSize, 15);
    jobfs_layout_t hint{kChunk, 0};
    jobfs_file_t* f = nullptr;
    ASSERT_EQ(jobfs_open(fs, p("big").c_str(), O_RDWR | O_CREAT, 0644, &hint, &f), 0);
    ASSERT_EQ(jobfs_pwrite(f, data.data(), data.size(), 0), static_cast<ssize_t>(kSize)); // one call
    ASSERT_EQ(jobfs_fsync(f), 0);
    struct stat st {};
    ASSERT_EQ(jobfs_fstat(f, &st), 0);
    EXPECT_EQ(static_cast<size_t>(st.st_size), kSize);
    auto per = chunks_per_daemon(st.st_ino);
    EXPECT_EQ(per, (std::vector<size_t>{8, 8, 8}));
    std::vector<uint8_t> back(kSize);
    ASSERT_EQ(jobfs_pread(f, back.data(), back.size(), 0), static_cast<ssize_t>(kSize)); // one call
    EXPECT_TRUE(back == data);
    ASSERT_EQ(jobfs_close(f), 0);
    ASSERT_EQ(jobfs_unlink(fs, p("big").c_str()), 0);
    EXPECT_EQ(chunks_per_daemon(st.st_ino), (std::vector<size_t>{0, 0, 0}));
}

TEST_F(CApiTest, ADaemonGoneGivesAnErrnoNotAHang) {
    // Last in this file (it kills a daemon of the shared cluster): gtest runs tests in order.
    const jobfs_layout_t hint{kChunk, 0}; // six chunks: some on every daemon
    ASSERT_EQ(write_file(p("f"), pattern(6 << 20, 16), &hint), 0);
    jobfs_file_t* f = nullptr;
    ASSERT_EQ(jobfs_open(fs, p("f").c_str(), O_RDONLY, 0, nullptr, &f), 0);
    cluster_->kill(1);
    std::vector<uint8_t> back(6 << 20);
    const auto t0 = std::chrono::steady_clock::now();
    const ssize_t rc = jobfs_pread(f, back.data(), back.size(), 0);
    EXPECT_TRUE(rc == -ENOTCONN || rc == -ECONNREFUSED || rc == -EIO || rc == -ECANCELED || rc == -ETIMEDOUT)
        << rc << ": " << jobfs_last_error();
    EXPECT_NE(std::string(jobfs_last_error()), "");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(35));
    EXPECT_EQ(jobfs_close(f), 0);
}

} // namespace
