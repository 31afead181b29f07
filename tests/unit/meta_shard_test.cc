// meta_shard_test: one metadata shard on real SQLite files; every operation, its POSIX errors,
// permissions, persistence and atomicity, read back through the API.
#include <gtest/gtest.h>

#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <set>
#include <thread>

#include <sqlite3.h>

#include "server/meta_shard.h"

namespace jobfs::server {
namespace {

namespace fs = std::filesystem;

const Cred kRoot{0, 0, {}};
const Cred kAlice{1000, 1000, {2000}};
const Cred kBob{1001, 1001, {}};

template <class T>
Code code(const Result<T>& r) { return r.status().code(); }
Code code(const Status& s) { return s.code(); }

// A SetAttr with the fields fill sets (designated initializers would warn about the rest).
template <class F>
SetAttr with(F fill) {
    SetAttr s;
    fill(s);
    return s;
}

class MetaShardTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::string tmpl = (fs::temp_directory_path() / "meta_shard_test.XXXXXX").string();
        ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
        dir_ = tmpl;
        reopen();
    }
    void TearDown() override {
        shard_.reset();
        fs::remove_all(dir_);
    }

    std::string db_path(uint32_t id = 0) const { return (dir_ / ("meta" + std::to_string(id) + ".db")).string(); }

    void reopen() {
        shard_.reset();
        auto s = MetaShard::open(db_path(), 0);
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        shard_ = std::move(*s);
    }

    MetaShard& m() { return *shard_; }

    // A replica of shard 0 beside it, m() shipping its changesets there (term `term`), each
    // one counted in `shipped`. The replica is not in step until it installs a snapshot.
    std::unique_ptr<MetaShard> replica_shipped_to(uint64_t term, int& shipped) {
        auto rep = MetaShard::open((dir_ / "replica0.db").string(), 0);
        EXPECT_TRUE(rep.ok()) << rep.status().to_string();
        if (!rep.ok()) return nullptr;
        MetaShard* r = rep->get();
        Status started = m().start_shipping(term, [r, &shipped](const MetaShard::ReplPosition& prev,
                                                                const MetaShard::ReplPosition& at,
                                                                std::span<const uint8_t> cs) {
            ++shipped;
            return r->apply_changeset(prev, at, cs);
        });
        EXPECT_TRUE(started.ok()) << started.to_string();
        return std::move(*rep);
    }

    // The same replica, in step: it has installed the primary's snapshot.
    std::unique_ptr<MetaShard> replica_in_step(uint64_t term, int& shipped) {
        auto rep = replica_shipped_to(term, shipped);
        if (!rep) return nullptr;
        auto snap = m().snapshot();
        EXPECT_TRUE(snap.ok()) << snap.status().to_string();
        if (!snap.ok() || !rep->install_snapshot(*snap).ok()) return nullptr;
        return rep;
    }

    uint64_t mkdir(uint64_t parent, const std::string& name, uint32_t mode = 0755, const Cred& c = kRoot) {
        auto a = m().mkdir(c, parent, name, mode);
        EXPECT_TRUE(a.ok()) << a.status().to_string();
        return a.ok() ? a->ino : 0;
    }
    uint64_t create(uint64_t parent, const std::string& name, uint32_t mode = 0644, const Cred& c = kRoot) {
        auto a = m().create(c, parent, name, mode, true);
        EXPECT_TRUE(a.ok()) << a.status().to_string();
        return a.ok() ? a->ino : 0;
    }
    Attr attr(uint64_t ino) {
        auto a = m().getattr(ino);
        EXPECT_TRUE(a.ok()) << a.status().to_string();
        return a.ok() ? *a : Attr{};
    }
    std::vector<std::string> names(uint64_t dir) {
        auto r = m().readdir(kRoot, dir, "", 100000);
        EXPECT_TRUE(r.ok()) << r.status().to_string();
        std::vector<std::string> out;
        if (r.ok())
            for (auto& e : r->entries) out.push_back(e.name);
        return out;
    }

    // The whole tree below ino, every attribute of every inode: equal snapshots mean nothing
    // changed, not even a time stamp.
    std::string snapshot(uint64_t ino = kRootIno, const std::string& path = "") {
        Attr a = attr(ino);
        char line[512];
        snprintf(line, sizeof line, "%s ino=%llu mode=%o uid=%u gid=%u size=%llu nlink=%u a=%lld m=%lld c=%lld cs=%u sc=%u t=%s\n",
                 path.c_str(), (unsigned long long)a.ino, a.mode, a.uid, a.gid,
                 (unsigned long long)a.size, a.nlink, (long long)a.atime_ns, (long long)a.mtime_ns,
                 (long long)a.ctime_ns, a.chunk_size, a.stripe_count, a.target.c_str());
        std::string out = line;
        auto x = m().listxattr(kRoot, ino);
        if (x.ok())
            for (auto& n : *x) out += "  xattr " + n + "=" + *m().getxattr(kRoot, ino, n) + "\n";
        if (a.type == FileType::directory) {
            auto r = m().readdir(kRoot, ino, "", 100000);
            EXPECT_TRUE(r.ok());
            for (auto& e : r->entries) out += snapshot(e.ino, path + "/" + e.name);
        }
        return out;
    }

    fs::path dir_;
    std::unique_ptr<MetaShard> shard_;
};

// ---- opening -------------------------------------------------------------------------------

// Step records of another shard's intents go once that shard said their intents are done,
// and only those: a repeat of a step of an intent still in its coordinator's log must still
// find its record (and answer as the first did).
TEST_F(MetaShardTest, StepRecordsGoOnlyBelowWhatTheirCoordinatorSaidIsDone) {
    Attr tmpl;
    tmpl.type = FileType::directory;
    tmpl.mode = S_IFDIR | 0755;
    tmpl.nlink = 2;
    tmpl.parent = kRootIno;
    auto applied = [&] { return m().counts()->applied; };
    ASSERT_TRUE(m().create_inode_once(make_ino(1, 5), tmpl).ok());
    // Shard 1: everything below intent 6 is done. The next step here drops 5's record only.
    m().note_intents_done(make_ino(1, 6));
    auto six = m().create_inode_once(make_ino(1, 6), tmpl);
    ASSERT_TRUE(six.ok()) << six.status().to_string();
    EXPECT_EQ(applied(), 1u);
    auto again = m().create_inode_once(make_ino(1, 6), tmpl);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->ino, six->ino) << "a repeat of a live intent's step made a second inode";
    // An older word changes nothing; a newer one takes 6's record with the next step.
    m().note_intents_done(make_ino(1, 5));
    ASSERT_TRUE(m().create_inode_once(make_ino(1, 7), tmpl).ok());
    EXPECT_EQ(applied(), 2u);
    m().note_intents_done(make_ino(1, 8));
    ASSERT_TRUE(m().create_inode_once(make_ino(1, 8), tmpl).ok());
    EXPECT_EQ(applied(), 1u);
    // Another coordinator's records are not touched by shard 1's word.
    ASSERT_TRUE(m().create_inode_once(make_ino(2, 3), tmpl).ok());
    m().note_intents_done(make_ino(1, 9));
    ASSERT_TRUE(m().create_inode_once(make_ino(1, 9), tmpl).ok());
    EXPECT_EQ(applied(), 2u);
}

TEST_F(MetaShardTest, NewShardZeroHasRoot) {
    Attr root = attr(kRootIno);
    EXPECT_EQ(root.type, FileType::directory);
    EXPECT_EQ(root.mode, uint32_t(S_IFDIR | 0755));
    EXPECT_EQ(root.uid, 0u);
    EXPECT_EQ(root.gid, 0u);
    EXPECT_EQ(root.nlink, 2u);
    EXPECT_GT(root.mtime_ns, 0);
    auto c = m().counts();
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->inodes, 1u);
    EXPECT_EQ(c->dentries, 0u);
    EXPECT_TRUE(names(kRootIno).empty());
}

TEST_F(MetaShardTest, OtherShardsHaveNoRootAndNumberInodesByShard) {
    EXPECT_EQ(shard_of(kRootIno), 0u);
    EXPECT_EQ(shard_of(make_ino(3, 7)), 3u);
    auto s3 = MetaShard::open(db_path(3), 3);
    ASSERT_TRUE(s3.ok()) << s3.status().to_string();
    EXPECT_EQ(code((*s3)->getattr(kRootIno)), Code::not_found);
    Attr t;
    t.type = FileType::directory;
    t.mode = 0755;
    t.nlink = 2;
    auto a = (*s3)->create_inode(t);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_EQ(a->ino, make_ino(3, kFirstSeq));
    EXPECT_EQ(shard_of(a->ino), 3u);
    // Shard 0's first new inode is seq 2 as well, in its own number range.
    EXPECT_EQ(create(kRootIno, "f"), make_ino(0, kFirstSeq));
}

TEST_F(MetaShardTest, OpenRefusesWrongShardBadIdAndBadPath) {
    shard_.reset();
    auto wrong = MetaShard::open(db_path(), 1);
    EXPECT_EQ(code(wrong), Code::invalid);
    EXPECT_NE(wrong.status().message().find("belongs to shard 0"), std::string::npos)
        << wrong.status().message();
    EXPECT_EQ(code(MetaShard::open(db_path(9), kMaxShardId + 1)), Code::invalid);
    EXPECT_EQ(code(MetaShard::open((dir_ / "missing" / "x.db").string(), 0)), Code::io);
    // A file that is not a database.
    std::string junk = (dir_ / "junk.db").string();
    FILE* f = fopen(junk.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("this is not an SQLite database, not at all, and it is long enough to be checked\n", f);
    fclose(f);
    EXPECT_EQ(code(MetaShard::open(junk, 0)), Code::io);
}

// ---- create, mkdir, lookup, getattr ---------------------------------------------------------

TEST_F(MetaShardTest, MkdirCreateLookupGetattr) {
    auto d = m().mkdir(kRoot, kRootIno, "dir", 0750);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(d->type, FileType::directory);
    EXPECT_EQ(d->mode, uint32_t(S_IFDIR | 0750));
    EXPECT_EQ(d->nlink, 2u);
    EXPECT_EQ(attr(kRootIno).nlink, 3u);  // the subdirectory's ".."

    auto f = m().create(kRoot, d->ino, "file", 0640, true);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ(f->type, FileType::regular);
    EXPECT_EQ(f->mode, uint32_t(S_IFREG | 0640));
    EXPECT_EQ(f->nlink, 1u);
    EXPECT_EQ(f->size, 0u);
    EXPECT_EQ(f->chunk_size, kDefaultChunkSize);
    EXPECT_EQ(f->stripe_count, 0u);
    EXPECT_EQ(f->generation, 1u);
    EXPECT_EQ(attr(d->ino).nlink, 2u);  // files do not add links to the directory

    auto l = m().lookup(kRoot, d->ino, "file");
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    EXPECT_EQ(l->ino, f->ino);
    EXPECT_EQ(l->mode, f->mode);
    auto g = m().getattr(f->ino);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->ctime_ns, f->ctime_ns);
    EXPECT_EQ(names(d->ino), std::vector<std::string>{"file"});
    EXPECT_GE(attr(d->ino).mtime_ns, f->ctime_ns);
}

TEST_F(MetaShardTest, CreateExistingExclusiveOrNot) {
    uint64_t f = create(kRootIno, "f");
    auto again = m().create(kRoot, kRootIno, "f", 0600, true);
    EXPECT_EQ(code(again), Code::exists);
    EXPECT_EQ(again.status().message(), "create 'f' in 1: exists");
    auto open = m().create(kRoot, kRootIno, "f", 0600, false);
    ASSERT_TRUE(open.ok());
    EXPECT_EQ(open->ino, f);
    EXPECT_EQ(open->mode, uint32_t(S_IFREG | 0644));  // the existing file, unchanged
    mkdir(kRootIno, "d");
    EXPECT_EQ(code(m().create(kRoot, kRootIno, "d", 0600, false)), Code::is_dir);
    EXPECT_EQ(code(m().create(kRoot, kRootIno, "d", 0600, true)), Code::exists);
    EXPECT_EQ(code(m().mkdir(kRoot, kRootIno, "f", 0755)), Code::exists);
    EXPECT_EQ(code(m().mkdir(kRoot, kRootIno, "d", 0755)), Code::exists);
    EXPECT_EQ(code(m().symlink(kRoot, kRootIno, "d", "x")), Code::exists);
}

// jobfs stage-in makes each file with its final size and ETag in one call: all of it or none.
TEST_F(MetaShardTest, ExclusiveCreateSetsSizeAndXattrsAtomically) {
    NewFile init{65536, {{"user.jobfs.stage.etag", "abc"}, {"user.other", "x"}}};
    auto f = m().create(kRoot, kRootIno, "f", 0644, true, {}, init);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ(f->size, 65536u);
    EXPECT_EQ(attr(f->ino).size, 65536u);
    EXPECT_EQ(*m().getxattr(kRoot, f->ino, "user.jobfs.stage.etag"), "abc");
    EXPECT_EQ(*m().getxattr(kRoot, f->ino, "user.other"), "x");
    // Only for a file the call makes: an open of an existing one would silently skip them.
    auto again = m().create(kRoot, kRootIno, "f", 0644, false, {}, init);
    EXPECT_EQ(code(again), Code::invalid);
    // A bad attribute fails the create, and nothing of it remains.
    auto bad = m().create(kRoot, kRootIno, "g", 0644, true, {}, NewFile{10, {{"system.posix_acl_access", "x"}}});
    EXPECT_EQ(code(bad), Code::unsupported);
    auto big = m().create(kRoot, kRootIno, "h", 0644, true, {}, NewFile{uint64_t(INT64_MAX) + 1, {}});
    EXPECT_EQ(code(big), Code::too_large);
    EXPECT_EQ(names(kRootIno), std::vector<std::string>{"f"});
}

TEST_F(MetaShardTest, MissingParentsAndWrongTypes) {
    uint64_t f = create(kRootIno, "f");
    EXPECT_EQ(code(m().lookup(kRoot, kRootIno, "nope")), Code::not_found);
    EXPECT_EQ(code(m().lookup(kRoot, f, "x")), Code::not_dir);
    EXPECT_EQ(code(m().create(kRoot, 12345, "x", 0644, true)), Code::not_found);
    EXPECT_EQ(code(m().create(kRoot, f, "x", 0644, true)), Code::not_dir);
    EXPECT_EQ(code(m().mkdir(kRoot, f, "x", 0755)), Code::not_dir);
    EXPECT_EQ(code(m().getattr(12345)), Code::not_found);
    EXPECT_EQ(code(m().readlink(f)), Code::invalid);
    EXPECT_EQ(code(m().readdir(kRoot, f, "", 10)), Code::not_dir);
    EXPECT_EQ(code(m().unlink(kRoot, kRootIno, "nope")), Code::not_found);
    EXPECT_EQ(code(m().rmdir(kRoot, kRootIno, "nope")), Code::not_found);
    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "nope", kRootIno, "x")), Code::not_found);
    auto missing = m().lookup(kRoot, kRootIno, "nope");
    EXPECT_EQ(missing.status().message(), "lookup 'nope' in 1: no entry");
}

TEST_F(MetaShardTest, LayoutInheritance) {
    uint64_t d = mkdir(kRootIno, "d");
    auto l = m().set_layout(kRoot, d, Layout{1u << 20, 2});
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    EXPECT_EQ(attr(d).chunk_size, 1u << 20);
    auto f = m().create(kRoot, d, "inherits", 0644, true);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->chunk_size, 1u << 20);
    EXPECT_EQ(f->stripe_count, 2u);
    auto g = m().create(kRoot, d, "own", 0644, true, Layout{8u << 20, 0});
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->chunk_size, 8u << 20);
    EXPECT_EQ(g->stripe_count, 2u);  // 0 inherits the directory's
    uint64_t sub = mkdir(d, "sub");
    EXPECT_EQ(attr(sub).chunk_size, 1u << 20);
    EXPECT_EQ(attr(sub).stripe_count, 2u);
    EXPECT_EQ(code(m().create(kRoot, d, "bad", 0644, true, Layout{3000, 0})), Code::invalid);
    EXPECT_EQ(code(m().lookup(kRoot, d, "bad")), Code::not_found);
    EXPECT_EQ(code(m().set_layout(kAlice, d, Layout{})), Code::not_permitted);
    ASSERT_TRUE(m().extend_size(g->ino, 10).ok());
    EXPECT_EQ(code(m().set_layout(kRoot, g->ino, Layout{1u << 16, 1})), Code::busy);
    auto empty = m().set_layout(kRoot, f->ino, Layout{1u << 16, 1});
    ASSERT_TRUE(empty.ok());
    EXPECT_EQ(attr(f->ino).chunk_size, 1u << 16);
}

// ---- names ---------------------------------------------------------------------------------

TEST_F(MetaShardTest, BadNamesAreRefusedEverywhere) {
    uint64_t f = create(kRootIno, "f");
    uint64_t d = mkdir(kRootIno, "d");
    const std::string too_long(256, 'x');
    const std::vector<std::string> invalid = {"", ".", "..", "a/b", "/", std::string("a\0b", 3)};
    for (const auto& n : invalid) {
        SCOPED_TRACE("name '" + n + "'");
        EXPECT_EQ(code(m().create(kRoot, kRootIno, n, 0644, true)), Code::invalid);
        EXPECT_EQ(code(m().mkdir(kRoot, kRootIno, n, 0755)), Code::invalid);
        EXPECT_EQ(code(m().symlink(kRoot, kRootIno, n, "t")), Code::invalid);
        EXPECT_EQ(code(m().link(kRoot, f, kRootIno, n)), Code::invalid);
        EXPECT_EQ(code(m().lookup(kRoot, kRootIno, n)), Code::invalid);
        EXPECT_EQ(code(m().unlink(kRoot, kRootIno, n)), Code::invalid);
        EXPECT_EQ(code(m().rmdir(kRoot, kRootIno, n)), Code::invalid);
        EXPECT_EQ(code(m().rename(kRoot, kRootIno, "f", d, n)), Code::invalid);
        EXPECT_EQ(code(m().rename(kRoot, kRootIno, n, d, "x")), Code::invalid);
        EXPECT_EQ(code(m().insert_dentry(kRootIno, n, f, FileType::regular)), Code::invalid);
    }
    EXPECT_EQ(code(m().create(kRoot, kRootIno, too_long, 0644, true)), Code::name_too_long);
    EXPECT_EQ(code(m().mkdir(kRoot, kRootIno, too_long, 0755)), Code::name_too_long);
    EXPECT_EQ(code(m().lookup(kRoot, kRootIno, too_long)), Code::name_too_long);
    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "f", kRootIno, too_long)), Code::name_too_long);
    auto msg = m().mkdir(kRoot, kRootIno, std::string("a\0b", 3), 0755);
    EXPECT_EQ(msg.status().message(), "mkdir 'a\\x00b' in 1: name 'a\\x00b' contains '/' or NUL");
    // Nothing was created, and the longest legal name works.
    EXPECT_EQ((std::vector<std::string>{"d", "f"}), names(kRootIno));
    EXPECT_TRUE(m().create(kRoot, kRootIno, std::string(255, 'y'), 0644, true).ok());
    // Any other byte is fine in a name.
    EXPECT_TRUE(m().create(kRoot, kRootIno, "\xff\x01 é", 0644, true).ok());
    EXPECT_TRUE(m().lookup(kRoot, kRootIno, "\xff\x01 é").ok());
}

// ---- permissions ---------------------------------------------------------------------------

TEST_F(MetaShardTest, PermissionDeniedForOtherUidButNotRoot) {
    uint64_t priv = mkdir(kRootIno, "priv", 0700);
    create(priv, "secret");
    EXPECT_EQ(code(m().lookup(kAlice, priv, "secret")), Code::permission);
    EXPECT_EQ(code(m().create(kAlice, priv, "x", 0644, true)), Code::permission);
    EXPECT_EQ(code(m().create(kAlice, priv, "secret", 0644, false)), Code::permission);
    EXPECT_EQ(code(m().readdir(kAlice, priv, "", 10)), Code::permission);
    EXPECT_EQ(code(m().unlink(kAlice, priv, "secret")), Code::permission);
    EXPECT_TRUE(m().lookup(kRoot, priv, "secret").ok());

    // Readable but not writable: lookup and readdir yes, changes no.
    uint64_t pub = mkdir(kRootIno, "pub", 0755);
    uint64_t file = create(pub, "file");
    EXPECT_TRUE(m().lookup(kAlice, pub, "file").ok());
    EXPECT_TRUE(m().readdir(kAlice, pub, "", 10).ok());
    auto denied = m().create(kAlice, pub, "x", 0644, true);
    EXPECT_EQ(code(denied), Code::permission);
    EXPECT_EQ(denied.status().to_errno(), EACCES);
    EXPECT_EQ(code(m().mkdir(kAlice, pub, "x", 0755)), Code::permission);
    EXPECT_EQ(code(m().symlink(kAlice, pub, "x", "t")), Code::permission);
    EXPECT_EQ(code(m().unlink(kAlice, pub, "file")), Code::permission);
    EXPECT_EQ(code(m().rename(kAlice, pub, "file", pub, "y")), Code::permission);
    EXPECT_EQ(code(m().link(kAlice, file, pub, "y")), Code::permission);
    EXPECT_EQ(code(m().rmdir(kAlice, kRootIno, "pub")), Code::permission);
    EXPECT_TRUE(m().create(kRoot, pub, "x", 0644, true).ok());

    // Search only: lookup yes, listing no.
    uint64_t xonly = mkdir(kRootIno, "xonly", 0711);
    create(xonly, "known");
    EXPECT_TRUE(m().lookup(kAlice, xonly, "known").ok());
    EXPECT_EQ(code(m().readdir(kAlice, xonly, "", 10)), Code::permission);

    // Group bits: alice is in group 2000, bob is not.
    uint64_t team = mkdir(kRootIno, "team", 0770);
    SetAttr chgrp;
    chgrp.gid = 2000;
    ASSERT_TRUE(m().setattr(kRoot, team, chgrp).ok());
    auto mine = m().create(kAlice, team, "alice", 0600, true);
    ASSERT_TRUE(mine.ok()) << mine.status().to_string();
    EXPECT_EQ(mine->uid, kAlice.uid);
    EXPECT_EQ(mine->gid, kAlice.gid);
    EXPECT_EQ(code(m().create(kBob, team, "bob", 0600, true)), Code::permission);
    EXPECT_EQ(code(m().lookup(kBob, team, "alice")), Code::permission);
}

TEST_F(MetaShardTest, SetgidDirectoryPassesItsGroupOn) {
    uint64_t d = mkdir(kRootIno, "shared", 02777);
    SetAttr chgrp;
    chgrp.gid = 3000;
    ASSERT_TRUE(m().setattr(kRoot, d, chgrp).ok());
    EXPECT_EQ(attr(d).mode & 07777, 02777u);
    auto f = m().create(kBob, d, "f", 0644, true);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->gid, 3000u);
    auto sub = m().mkdir(kBob, d, "sub", 0755);
    ASSERT_TRUE(sub.ok());
    EXPECT_EQ(sub->gid, 3000u);
    EXPECT_TRUE(sub->mode & S_ISGID);
}

TEST_F(MetaShardTest, StickyDirectory) {
    uint64_t tmp = mkdir(kRootIno, "tmp", 01777);
    uint64_t a = create(tmp, "alice", 0644, kAlice);
    create(tmp, "bob", 0644, kBob);
    create(tmp, "bob2", 0644, kBob);
    auto u = m().unlink(kBob, tmp, "alice");
    EXPECT_EQ(code(u), Code::not_permitted);
    EXPECT_EQ(u.status().to_errno(), EPERM);
    EXPECT_EQ(code(m().rename(kBob, tmp, "alice", tmp, "mine")), Code::not_permitted);
    // Overwriting someone else's file by rename is removing it, too.
    EXPECT_EQ(code(m().rename(kBob, tmp, "bob", tmp, "alice")), Code::not_permitted);
    EXPECT_EQ(attr(a).nlink, 1u);
    // The owner of the file, the owner of the directory and root may.
    EXPECT_TRUE(m().rename(kAlice, tmp, "alice", tmp, "alice2").ok());
    EXPECT_TRUE(m().unlink(kAlice, tmp, "alice2").ok());
    EXPECT_TRUE(m().unlink(kRoot, tmp, "bob").ok());
    uint64_t owned = mkdir(tmp, "owned", 01777, kAlice);
    create(owned, "bobs", 0644, kBob);
    EXPECT_TRUE(m().unlink(kAlice, owned, "bobs").ok());
    // Sticky rule for directories too.
    mkdir(tmp, "bobdir", 0755, kBob);
    EXPECT_EQ(code(m().rmdir(kAlice, tmp, "bobdir")), Code::not_permitted);
    EXPECT_TRUE(m().rmdir(kBob, tmp, "bobdir").ok());
    EXPECT_EQ(names(tmp), (std::vector<std::string>{"bob2", "owned"}));
}

// ---- symlinks and hard links ---------------------------------------------------------------

TEST_F(MetaShardTest, SymlinkAndReadlink) {
    auto s = m().symlink(kAlice, kRootIno, "ln", "../some/where");
    EXPECT_EQ(code(s), Code::permission);  // root directory is 0755 root
    uint64_t d = mkdir(kRootIno, "d", 0777);
    s = m().symlink(kAlice, d, "ln", "../some/where");
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->type, FileType::symlink);
    EXPECT_EQ(s->mode, uint32_t(S_IFLNK | 0777));
    EXPECT_EQ(s->size, 13u);
    EXPECT_EQ(s->uid, kAlice.uid);
    auto t = m().readlink(s->ino);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(*t, "../some/where");
    auto l = m().lookup(kRoot, d, "ln");
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l->target, "../some/where");
    EXPECT_EQ(code(m().symlink(kRoot, d, "empty", "")), Code::not_found);
    EXPECT_EQ(code(m().symlink(kRoot, d, "long", std::string(4096, 'a'))), Code::name_too_long);
    EXPECT_TRUE(m().symlink(kRoot, d, "longest", std::string(4095, 'a')).ok());
    EXPECT_EQ(code(m().readlink(d)), Code::invalid);
    EXPECT_EQ(code(m().readlink(999)), Code::not_found);
}

TEST_F(MetaShardTest, HardLinkCountsGoUpAndDown) {
    uint64_t d = mkdir(kRootIno, "d");
    uint64_t f = create(kRootIno, "f");
    ASSERT_TRUE(m().setxattr(kRoot, f, "user.tag", "v", 0).ok());
    auto l1 = m().link(kRoot, f, d, "g");
    ASSERT_TRUE(l1.ok()) << l1.status().to_string();
    EXPECT_EQ(l1->nlink, 2u);
    auto l2 = m().link(kRoot, f, kRootIno, "h");
    ASSERT_TRUE(l2.ok());
    EXPECT_EQ(attr(f).nlink, 3u);
    EXPECT_EQ(m().lookup(kRoot, d, "g")->ino, f);
    EXPECT_EQ(m().lookup(kRoot, kRootIno, "h")->ino, f);
    EXPECT_EQ(code(m().link(kRoot, f, d, "g")), Code::exists);
    EXPECT_EQ(code(m().link(kRoot, d, kRootIno, "dirlink")), Code::not_permitted);
    EXPECT_EQ(code(m().link(kRoot, 4242, kRootIno, "ghost")), Code::not_found);
    EXPECT_EQ(attr(f).nlink, 3u);

    auto u1 = m().unlink(kRoot, kRootIno, "f");
    ASSERT_TRUE(u1.ok());
    EXPECT_FALSE(u1->last_link);
    EXPECT_EQ(u1->attr.nlink, 2u);
    EXPECT_EQ(attr(f).nlink, 2u);
    auto u2 = m().unlink(kRoot, d, "g");
    ASSERT_TRUE(u2.ok());
    EXPECT_FALSE(u2->last_link);
    EXPECT_EQ(attr(f).nlink, 1u);
    EXPECT_EQ(*m().getxattr(kRoot, f, "user.tag"), "v");
    auto u3 = m().unlink(kRoot, kRootIno, "h");
    ASSERT_TRUE(u3.ok());
    EXPECT_TRUE(u3->last_link);
    EXPECT_EQ(u3->attr.nlink, 0u);
    EXPECT_EQ(u3->attr.ino, f);
    EXPECT_EQ(code(m().getattr(f)), Code::not_found);
    EXPECT_EQ(code(m().getxattr(kRoot, f, "user.tag")), Code::not_found);
    auto c = m().counts();
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->inodes, 2u);  // root and d
    EXPECT_EQ(c->dentries, 1u);
}

// ---- unlink and rmdir ----------------------------------------------------------------------

TEST_F(MetaShardTest, UnlinkAndRmdir) {
    uint64_t d = mkdir(kRootIno, "d");
    create(d, "f");
    uint64_t e = mkdir(kRootIno, "e");
    EXPECT_EQ(attr(kRootIno).nlink, 4u);
    EXPECT_EQ(code(m().unlink(kRoot, kRootIno, "d")), Code::is_dir);
    EXPECT_EQ(code(m().rmdir(kRoot, d, "f")), Code::not_dir);
    auto ne = m().rmdir(kRoot, kRootIno, "d");
    EXPECT_EQ(code(ne), Code::not_empty);
    EXPECT_EQ(ne.to_errno(), ENOTEMPTY);
    EXPECT_EQ(ne.message(), "rmdir 'd' in 1: directory not empty");
    auto u = m().unlink(kRoot, d, "f");
    ASSERT_TRUE(u.ok());
    EXPECT_TRUE(u->last_link);
    EXPECT_TRUE(m().rmdir(kRoot, kRootIno, "d").ok());
    EXPECT_EQ(code(m().getattr(d)), Code::not_found);
    EXPECT_EQ(attr(kRootIno).nlink, 3u);
    EXPECT_TRUE(m().rmdir(kRoot, kRootIno, "e").ok());
    EXPECT_EQ(code(m().getattr(e)), Code::not_found);
    EXPECT_EQ(attr(kRootIno).nlink, 2u);
    EXPECT_TRUE(names(kRootIno).empty());
}

// ---- readdir -------------------------------------------------------------------------------

TEST_F(MetaShardTest, TenThousandFilesListedInPages) {
    uint64_t d = mkdir(kRootIno, "big");
    std::set<uint64_t> inos;
    for (int i = 0; i < 10000; ++i) {
        char name[32];
        snprintf(name, sizeof name, "file%05d", i);
        inos.insert(create(d, name));
    }
    EXPECT_EQ(inos.size(), 10000u);

    std::vector<std::string> seen;
    std::string after;
    int pages = 0;
    for (;;) {
        auto r = m().readdir(kRoot, d, after, 1000);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        ++pages;
        ASSERT_LE(r->entries.size(), 1000u);
        for (auto& e : r->entries) {
            EXPECT_EQ(e.type, FileType::regular);
            EXPECT_TRUE(inos.count(e.ino));
            seen.push_back(e.name);
        }
        if (!r->more) break;
        ASSERT_FALSE(r->entries.empty());
        after = r->entries.back().name;
        ASSERT_LT(pages, 20);
    }
    EXPECT_EQ(pages, 10);
    ASSERT_EQ(seen.size(), 10000u);
    EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
    EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 10000u);
    EXPECT_EQ(seen.front(), "file00000");
    EXPECT_EQ(seen.back(), "file09999");

    // Resuming after a name, present or not, starts strictly after it.
    auto r = m().readdir(kRoot, d, "file04999", 3);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->entries.size(), 3u);
    EXPECT_EQ(r->entries[0].name, "file05000");
    EXPECT_TRUE(r->more);
    r = m().readdir(kRoot, d, "file04999x", 1);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->entries[0].name, "file05000");
    r = m().readdir(kRoot, d, "file09998", 1000);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->entries.size(), 1u);
    EXPECT_FALSE(r->more);
    r = m().readdir(kRoot, d, "file09999", 1000);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->entries.empty());
    EXPECT_FALSE(r->more);
    // Exactly one page's worth: no phantom "more".
    r = m().readdir(kRoot, d, "file08999", 1000);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->entries.size(), 1000u);
    EXPECT_FALSE(r->more);
    EXPECT_EQ(code(m().readdir(kRoot, d, "", 0)), Code::invalid);
    auto c = m().counts();
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->inodes, 10002u);
    EXPECT_EQ(c->dentries, 10001u);
}

// ---- rename --------------------------------------------------------------------------------

TEST_F(MetaShardTest, RenameWithinAndAcrossDirectories) {
    uint64_t a = mkdir(kRootIno, "a");
    uint64_t b = mkdir(kRootIno, "b");
    uint64_t f = create(a, "f");
    int64_t before = attr(f).ctime_ns;
    auto r = m().rename(kRoot, a, "f", a, "g");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_FALSE(r->replaced);
    EXPECT_EQ(code(m().lookup(kRoot, a, "f")), Code::not_found);
    EXPECT_EQ(m().lookup(kRoot, a, "g")->ino, f);
    EXPECT_GE(attr(f).ctime_ns, before);

    ASSERT_TRUE(m().rename(kRoot, a, "g", b, "h").ok());
    EXPECT_TRUE(names(a).empty());
    EXPECT_EQ(names(b), std::vector<std::string>{"h"});
    EXPECT_EQ(attr(a).nlink, 2u);
    EXPECT_EQ(attr(b).nlink, 2u);

    // A directory moving between parents moves a link from one to the other.
    uint64_t sub = mkdir(a, "sub");
    create(sub, "inside");
    EXPECT_EQ(attr(a).nlink, 3u);
    ASSERT_TRUE(m().rename(kRoot, a, "sub", b, "sub2").ok());
    EXPECT_EQ(attr(a).nlink, 2u);
    EXPECT_EQ(attr(b).nlink, 3u);
    EXPECT_EQ(attr(sub).nlink, 2u);
    EXPECT_EQ(m().lookup(kRoot, b, "sub2")->ino, sub);
    EXPECT_EQ(names(sub), std::vector<std::string>{"inside"});
    EXPECT_EQ(attr(kRootIno).nlink, 4u);
}

TEST_F(MetaShardTest, RenameOverwritesFiles) {
    uint64_t src = create(kRootIno, "src");
    uint64_t dst = create(kRootIno, "dst");
    ASSERT_TRUE(m().setxattr(kRoot, dst, "user.x", "1", 0).ok());
    auto r = m().rename(kRoot, kRootIno, "src", kRootIno, "dst");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(r->replaced);
    EXPECT_EQ(r->replaced->attr.ino, dst);
    EXPECT_TRUE(r->replaced->last_link);
    EXPECT_EQ(code(m().getattr(dst)), Code::not_found);
    EXPECT_EQ(m().lookup(kRoot, kRootIno, "dst")->ino, src);
    EXPECT_EQ(names(kRootIno), std::vector<std::string>{"dst"});
    EXPECT_EQ(m().counts()->inodes, 2u);

    // A target with another link survives with one link fewer.
    uint64_t other = create(kRootIno, "other");
    ASSERT_TRUE(m().link(kRoot, other, kRootIno, "other2").ok());
    uint64_t mover = create(kRootIno, "mover");
    r = m().rename(kRoot, kRootIno, "mover", kRootIno, "other");
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(r->replaced);
    EXPECT_FALSE(r->replaced->last_link);
    EXPECT_EQ(r->replaced->attr.nlink, 1u);
    EXPECT_EQ(attr(other).nlink, 1u);
    EXPECT_EQ(m().lookup(kRoot, kRootIno, "other")->ino, mover);
    EXPECT_EQ(m().lookup(kRoot, kRootIno, "other2")->ino, other);
}

TEST_F(MetaShardTest, RenameOverwritesOnlyEmptyDirectories) {
    uint64_t a = mkdir(kRootIno, "a");
    uint64_t empty = mkdir(kRootIno, "empty");
    uint64_t full = mkdir(kRootIno, "full");
    create(full, "x");
    EXPECT_EQ(attr(kRootIno).nlink, 5u);
    auto r = m().rename(kRoot, kRootIno, "a", kRootIno, "empty");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(r->replaced);
    EXPECT_EQ(r->replaced->attr.ino, empty);
    EXPECT_TRUE(r->replaced->last_link);
    EXPECT_EQ(code(m().getattr(empty)), Code::not_found);
    EXPECT_EQ(m().lookup(kRoot, kRootIno, "empty")->ino, a);
    EXPECT_EQ(attr(kRootIno).nlink, 4u);

    auto ne = m().rename(kRoot, kRootIno, "empty", kRootIno, "full");
    EXPECT_EQ(code(ne), Code::not_empty);
    EXPECT_EQ(m().lookup(kRoot, kRootIno, "empty")->ino, a);
    EXPECT_EQ(attr(kRootIno).nlink, 4u);
    uint64_t file = create(kRootIno, "file");
    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "empty", kRootIno, "file")), Code::not_dir);
    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "file", kRootIno, "empty")), Code::is_dir);
    EXPECT_EQ(attr(file).nlink, 1u);
    EXPECT_EQ(names(full), std::vector<std::string>{"x"});
}

TEST_F(MetaShardTest, RenameNoReplaceAndExchange) {
    uint64_t a = create(kRootIno, "a");
    uint64_t b = create(kRootIno, "b");
    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "a", kRootIno, "b", kRenameNoReplace)), Code::exists);
    EXPECT_EQ(m().lookup(kRoot, kRootIno, "b")->ino, b);
    ASSERT_TRUE(m().rename(kRoot, kRootIno, "a", kRootIno, "c", kRenameNoReplace).ok());
    EXPECT_EQ(m().lookup(kRoot, kRootIno, "c")->ino, a);

    auto x = m().rename(kRoot, kRootIno, "b", kRootIno, "c", kRenameExchange);
    ASSERT_TRUE(x.ok()) << x.status().to_string();
    EXPECT_FALSE(x->replaced);
    EXPECT_EQ(m().lookup(kRoot, kRootIno, "b")->ino, a);
    EXPECT_EQ(m().lookup(kRoot, kRootIno, "c")->ino, b);
    EXPECT_EQ(attr(a).nlink, 1u);
    EXPECT_EQ(attr(b).nlink, 1u);
    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "b", kRootIno, "nope", kRenameExchange)), Code::not_found);
    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "b", kRootIno, "c", kRenameExchange | kRenameNoReplace)),
              Code::invalid);
    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "b", kRootIno, "c", 4)), Code::invalid);

    // Exchanging a directory and a file across parents moves the subdirectory link too.
    uint64_t p = mkdir(kRootIno, "p");
    uint64_t q = mkdir(kRootIno, "q");
    uint64_t dir = mkdir(p, "dir");
    uint64_t file = create(q, "file");
    EXPECT_EQ(attr(p).nlink, 3u);
    ASSERT_TRUE(m().rename(kRoot, p, "dir", q, "file", kRenameExchange).ok());
    EXPECT_EQ(m().lookup(kRoot, p, "dir")->ino, file);
    EXPECT_EQ(m().lookup(kRoot, q, "file")->ino, dir);
    EXPECT_EQ(attr(p).nlink, 2u);
    EXPECT_EQ(attr(q).nlink, 3u);
    EXPECT_EQ(m().lookup(kRoot, p, "dir")->type, FileType::regular);
    EXPECT_EQ(m().readdir(kRoot, q, "", 10)->entries[0].type, FileType::directory);
}

TEST_F(MetaShardTest, RenameIntoOwnSubtreeIsInvalid) {
    uint64_t a = mkdir(kRootIno, "a");
    uint64_t b = mkdir(a, "b");
    uint64_t c = mkdir(b, "c");
    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "a", c, "x")), Code::invalid);
    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "a", a, "x")), Code::invalid);
    EXPECT_EQ(code(m().rename(kRoot, a, "b", c, "x")), Code::invalid);
    EXPECT_EQ(code(m().rename(kRoot, b, "c", a, "b", kRenameExchange)), Code::invalid);
    // A directory onto its own non-empty ancestor.
    EXPECT_EQ(code(m().rename(kRoot, b, "c", kRootIno, "a")), Code::not_empty);
    EXPECT_EQ(names(c), std::vector<std::string>{});
    EXPECT_EQ(m().lookup(kRoot, b, "c")->ino, c);
    // Moving up is fine.
    ASSERT_TRUE(m().rename(kRoot, b, "c", kRootIno, "c").ok());
    EXPECT_EQ(attr(b).nlink, 2u);
    EXPECT_EQ(attr(kRootIno).nlink, 4u);
}

TEST_F(MetaShardTest, RenameOfOneInodeOntoItselfDoesNothing) {
    uint64_t f = create(kRootIno, "x");
    ASSERT_TRUE(m().link(kRoot, f, kRootIno, "y").ok());
    std::string before = snapshot();
    auto r = m().rename(kRoot, kRootIno, "x", kRootIno, "y");
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->replaced);
    ASSERT_TRUE(m().rename(kRoot, kRootIno, "x", kRootIno, "x").ok());
    EXPECT_EQ(snapshot(), before);
    EXPECT_EQ(attr(f).nlink, 2u);
}

TEST_F(MetaShardTest, DirectoryMoveNeedsWriteOnTheDirectory) {
    uint64_t pub = mkdir(kRootIno, "pub", 0777);
    mkdir(pub, "rootdir", 0755);  // root's, alice may not write it
    mkdir(pub, "other", 0777);
    EXPECT_EQ(code(m().rename(kAlice, pub, "rootdir", m().lookup(kRoot, pub, "other")->ino, "moved")),
              Code::permission);
    // Within one directory ".." does not change.
    EXPECT_TRUE(m().rename(kAlice, pub, "rootdir", pub, "renamed").ok());
}

// ---- atomicity -----------------------------------------------------------------------------

TEST_F(MetaShardTest, FailedOperationsLeaveTheDatabaseUnchanged) {
    uint64_t a = mkdir(kRootIno, "a");
    create(a, "f");
    uint64_t full = mkdir(kRootIno, "full");
    create(full, "x");
    uint64_t g = create(kRootIno, "g");
    ASSERT_TRUE(m().setxattr(kRoot, g, "user.k", "v", 0).ok());
    mkdir(kRootIno, "tmp", 01777);
    create(m().lookup(kRoot, kRootIno, "tmp")->ino, "rootfile");
    const std::string before = snapshot();
    const Counts counts_before = *m().counts();

    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "a", kRootIno, "full")), Code::not_empty);
    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "a", a, "x")), Code::invalid);
    EXPECT_EQ(code(m().rename(kRoot, kRootIno, "g", kRootIno, "a")), Code::is_dir);
    EXPECT_EQ(code(m().rmdir(kRoot, kRootIno, "full")), Code::not_empty);
    EXPECT_EQ(code(m().create(kRoot, kRootIno, "g", 0644, true)), Code::exists);
    EXPECT_EQ(code(m().mkdir(kAlice, kRootIno, "nope", 0755)), Code::permission);
    EXPECT_EQ(code(m().unlink(kAlice, m().lookup(kRoot, kRootIno, "tmp")->ino, "rootfile")),
              Code::not_permitted);
    EXPECT_EQ(code(m().setxattr(kRoot, g, "user.k", "w", kXattrCreate)), Code::exists);
    EXPECT_EQ(code(m().setattr(kAlice, g, with([&](SetAttr& s) { s.mode = 0777; }))), Code::not_permitted);
    EXPECT_EQ(code(m().link(kRoot, a, kRootIno, "alink")), Code::not_permitted);
    EXPECT_EQ(code(m().insert_dentry(kRootIno, "g", 77, FileType::regular)), Code::exists);
    EXPECT_EQ(code(m().adjust_nlink(g, -2)), Code::invalid);
    EXPECT_EQ(code(m().delete_inode(full)), Code::not_empty);

    EXPECT_EQ(snapshot(), before);
    EXPECT_EQ(m().counts()->inodes, counts_before.inodes);
    EXPECT_EQ(m().counts()->dentries, counts_before.dentries);
    // And the inode counter did not move either: no number was used up.
    uint64_t next = create(kRootIno, "next");
    EXPECT_EQ(next, make_ino(0, kFirstSeq + 7));
}

// ---- setattr, extend_size ------------------------------------------------------------------

TEST_F(MetaShardTest, SetattrModeOwnerAndTimes) {
    uint64_t d = mkdir(kRootIno, "d", 0777);
    auto f = m().create(kAlice, d, "f", 04755, true);
    ASSERT_TRUE(f.ok());
    uint64_t ino = f->ino;
    EXPECT_EQ(f->mode & 07777, 04755u);

    // chmod: owner yes, others no.
    EXPECT_EQ(code(m().setattr(kBob, ino, with([&](SetAttr& s) { s.mode = 0777; }))), Code::not_permitted);
    auto r = m().setattr(kAlice, ino, with([&](SetAttr& s) { s.mode = 04700; }));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(attr(ino).mode, uint32_t(S_IFREG | 04700));
    EXPECT_GE(attr(ino).ctime_ns, f->ctime_ns);
    // A writer who is not the owner may drop setuid and setgid (the kernel does so in its name
    // before the write), and nothing else; one without write permission may not.
    ASSERT_TRUE(m().setattr(kAlice, ino, with([&](SetAttr& s) { s.mode = 06776; })).ok());
    EXPECT_EQ(code(m().setattr(kBob, ino, with([&](SetAttr& s) { s.mode = 0774; }))), Code::not_permitted);
    EXPECT_EQ(code(m().setattr(kBob, ino, with([&](SetAttr& s) { s.mode = 07776; }))), Code::not_permitted);
    ASSERT_TRUE(m().setattr(kBob, ino, with([&](SetAttr& s) { s.mode = 04776; })).ok());
    EXPECT_EQ(attr(ino).mode & 07777, 04776u);
    ASSERT_TRUE(m().setattr(kBob, ino, with([&](SetAttr& s) { s.mode = 0776; })).ok());
    EXPECT_EQ(attr(ino).mode & 07777, 0776u);
    ASSERT_TRUE(m().setattr(kAlice, ino, with([&](SetAttr& s) { s.mode = 06774; })).ok());
    EXPECT_EQ(code(m().setattr(kBob, ino, with([&](SetAttr& s) { s.mode = 0774; }))), Code::not_permitted);
    EXPECT_EQ(attr(ino).mode & 07777, 06774u);
    ASSERT_TRUE(m().setattr(kAlice, ino, with([&](SetAttr& s) { s.mode = 04700; })).ok());

    // chown: only root gives a file away.
    EXPECT_EQ(code(m().setattr(kAlice, ino, with([&](SetAttr& s) { s.uid = kBob.uid; }))), Code::not_permitted);
    EXPECT_TRUE(m().setattr(kAlice, ino, with([&](SetAttr& s) { s.uid = kAlice.uid; })).ok());  // no change
    // chgrp: owner to a group it is in; that clears setuid.
    EXPECT_EQ(code(m().setattr(kAlice, ino, with([&](SetAttr& s) { s.gid = 5555; }))), Code::not_permitted);
    EXPECT_EQ(code(m().setattr(kBob, ino, with([&](SetAttr& s) { s.gid = kBob.gid; }))), Code::not_permitted);
    r = m().setattr(kAlice, ino, with([&](SetAttr& s) { s.gid = 2000; }));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(attr(ino).gid, 2000u);
    EXPECT_EQ(attr(ino).mode & 07777, 0700u);
    // Root may do anything and keeps the bits.
    ASSERT_TRUE(m().setattr(kRoot, ino, with([&](SetAttr& s) { s.mode = 06755; })).ok());
    r = m().setattr(kRoot, ino, with([&](SetAttr& s) { s.uid = kBob.uid; s.gid = kBob.gid; }));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(attr(ino).uid, kBob.uid);
    EXPECT_EQ(attr(ino).gid, kBob.gid);
    EXPECT_EQ(attr(ino).mode & 07777, 06755u);

    // Explicit times: owner only. "now": anyone who may write.
    EXPECT_EQ(code(m().setattr(kAlice, ino, with([&](SetAttr& s) { s.mtime_ns = 5; }))), Code::not_permitted);
    r = m().setattr(kBob, ino, with([&](SetAttr& s) { s.atime_ns = 1000; s.mtime_ns = 2000; }));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(attr(ino).atime_ns, 1000);
    EXPECT_EQ(attr(ino).mtime_ns, 2000);
    EXPECT_EQ(code(m().setattr(kAlice, ino, with([&](SetAttr& s) { s.mtime_now = true; }))), Code::permission);
    ASSERT_TRUE(m().setattr(kRoot, ino, with([&](SetAttr& s) { s.mode = 0666; })).ok());
    r = m().setattr(kAlice, ino, with([&](SetAttr& s) { s.atime_now = true; s.mtime_now = true; }));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_GT(attr(ino).mtime_ns, 2000);
    EXPECT_EQ(code(m().setattr(kRoot, ino, with([&](SetAttr& s) { s.mtime_ns = 1; s.mtime_now = true; }))), Code::invalid);
    EXPECT_EQ(code(m().setattr(kRoot, 9999, with([&](SetAttr& s) { s.mode = 0; }))), Code::not_found);
}

TEST_F(MetaShardTest, SetattrSizeAndExtendSize) {
    uint64_t d = mkdir(kRootIno, "d", 0777);
    uint64_t f = create(d, "f", 0644, kAlice);
    auto r = m().setattr(kAlice, f, with([&](SetAttr& s) { s.size = 1000; }));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(attr(f).size, 1000u);
    EXPECT_EQ(code(m().setattr(kBob, f, with([&](SetAttr& s) { s.size = 0; }))), Code::permission);
    EXPECT_EQ(code(m().setattr(kRoot, d, with([&](SetAttr& s) { s.size = 0; }))), Code::is_dir);
    ASSERT_TRUE(m().setattr(kAlice, f, with([&](SetAttr& s) { s.size = 10; })).ok());
    EXPECT_EQ(attr(f).size, 10u);

    int64_t mtime = attr(f).mtime_ns;
    auto e = m().extend_size(f, 5000);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->size, 5000u);
    EXPECT_GE(attr(f).mtime_ns, mtime);
    e = m().extend_size(f, 100);  // a writer that wrote less does not shrink the file
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(attr(f).size, 5000u);
    EXPECT_EQ(code(m().extend_size(d, 1)), Code::is_dir);
    EXPECT_EQ(code(m().extend_size(777777, 1)), Code::not_found);
    EXPECT_EQ(code(m().extend_size(f, uint64_t(1) << 63)), Code::too_large);
}

// An O_APPEND write's place: at the end, or past what the writer's node holds unsettled; the
// size covers it at once, so the next append goes after it.
TEST_F(MetaShardTest, ReserveAppendPlacesEachAppendAtTheEndAndCountsIt) {
    uint64_t d = mkdir(kRootIno, "d", 0777);
    uint64_t f = create(d, "log", 0644, kAlice);
    auto a = m().reserve_append(f, 0, 57);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_EQ(a->size, 57u); // written at 0
    a = m().reserve_append(f, 0, 43);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->size, 100u); // at 57, whatever the writer thought the end was
    a = m().reserve_append(f, 1000, 10); // its node wrote up to 1000 and has not settled that yet
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->size, 1010u);
    EXPECT_EQ(attr(f).size, 1010u);
    EXPECT_EQ(code(m().reserve_append(d, 0, 1)), Code::is_dir);
    EXPECT_EQ(code(m().reserve_append(777777, 0, 1)), Code::not_found);
    EXPECT_EQ(code(m().reserve_append(f, 0, uint64_t(INT64_MAX))), Code::too_large);
    EXPECT_EQ(attr(f).size, 1010u); // a refused one takes nothing
    // An append drops setuid, setgid with group execute and file capabilities, as a write does.
    ASSERT_TRUE(m().setattr(kAlice, f, with([&](SetAttr& s) { s.mode = 06755; })).ok());
    ASSERT_TRUE(m().setxattr(kRoot, f, "security.capability", "caps", 0).ok());
    ASSERT_TRUE(m().setxattr(kRoot, f, "user.keep", "yes", 0).ok());
    ASSERT_TRUE(m().reserve_append(f, 0, 1).ok());
    EXPECT_EQ(attr(f).mode & 07777, 0755u);
    EXPECT_EQ(code(m().getxattr(kRoot, f, "security.capability")), Code::no_data);
    EXPECT_TRUE(m().getxattr(kRoot, f, "user.keep").ok());
}

// A reservation asked again with its token, on the same primary or on the replica that took
// over after the primary failed (its answer lost), gets the place it got the first time and
// changes nothing: without the token the retry reserved a second place (a hole of zeros).
// A reservation is remembered for about the file's last 256 others.
TEST_F(MetaShardTest, AReservationAskedAgainWithItsTokenGetsItsFirstPlace) {
    int shipped = 0;
    auto rep = replica_in_step(3, shipped);
    ASSERT_TRUE(rep);
    MetaShard& r = *rep;
    const uint64_t f = create(kRootIno, "log");
    auto a = m().reserve_append(f, 0, 57, 1111);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_EQ(a->size, 57u);
    a = m().reserve_append(f, 0, 57, 1111); // its answer was lost: asked again, same primary
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->size, 57u);
    EXPECT_EQ(attr(f).size, 57u);
    a = m().reserve_append(f, 0, 10, 2222);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->size, 67u);

    // The primary is lost; the replica serves the shard (term 9) and is asked again.
    ASSERT_TRUE(m().start_shipping(3, {}).ok());
    ASSERT_TRUE(r.start_shipping(9, {}).ok());
    a = r.reserve_append(f, 0, 10, 2222);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_EQ(a->size, 67u) << "the retry was given a second place";
    auto on_r = r.getattr(f);
    ASSERT_TRUE(on_r.ok());
    EXPECT_EQ(on_r->size, 67u);
    a = r.reserve_append(f, 0, 5, 3333);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->size, 72u);
    a = r.reserve_append(f, 0, 5, 0); // no token: always a new place
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->size, 77u);

    // Many reservations later (tokens that prune: multiples of 64) the first is forgotten.
    for (uint64_t i = 1; i <= 400; ++i) ASSERT_TRUE(r.reserve_append(f, 0, 1, 64 * i).ok());
    a = r.reserve_append(f, 0, 57, 1111);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->size, 77u + 400u + 57u);
    a = r.reserve_append(f, 0, 1, 64 * 400); // the latest are still known
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->size, 77u + 400u);

    // At most about 256 are kept per file, and none once the file is gone.
    auto g = r.create(kRoot, kRootIno, "gone", 0644, true);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(r.reserve_append(g->ino, 0, 1, 7).ok());
    ASSERT_TRUE(r.reserve_append(g->ino, 0, 1, 8).ok());
    ASSERT_TRUE(r.unlink(kRoot, kRootIno, "gone").ok());
    rep.reset(); // (the shard holds its database's lock while open)
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ / "replica0.db").c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT count(*) FROM append_tokens", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int64(st, 0), 257) << "256 of log's after the last pruning and 1111's new one; none of gone's";
    sqlite3_finalize(st);
    sqlite3_close(db);
}

// ---- xattrs --------------------------------------------------------------------------------

TEST_F(MetaShardTest, ExtendedAttributes) {
    uint64_t d = mkdir(kRootIno, "d", 0777);
    uint64_t f = create(d, "f", 0644, kAlice);
    ASSERT_TRUE(m().setxattr(kAlice, f, "user.b", "two", 0).ok());
    ASSERT_TRUE(m().setxattr(kAlice, f, "user.a", std::string("o\0ne", 4), kXattrCreate).ok());
    ASSERT_TRUE(m().setxattr(kAlice, f, "user.empty", "", 0).ok());
    EXPECT_EQ(*m().getxattr(kAlice, f, "user.a"), std::string("o\0ne", 4));
    EXPECT_EQ(*m().getxattr(kBob, f, "user.b"), "two");  // 0644: others may read
    EXPECT_EQ(*m().getxattr(kAlice, f, "user.empty"), "");
    EXPECT_EQ(*m().listxattr(kAlice, f), (std::vector<std::string>{"user.a", "user.b", "user.empty"}));

    EXPECT_EQ(code(m().setxattr(kAlice, f, "user.a", "x", kXattrCreate)), Code::exists);
    EXPECT_EQ(code(m().setxattr(kAlice, f, "user.zz", "x", kXattrReplace)), Code::no_data);
    ASSERT_TRUE(m().setxattr(kAlice, f, "user.a", "replaced", kXattrReplace).ok());
    EXPECT_EQ(*m().getxattr(kAlice, f, "user.a"), "replaced");
    auto missing = m().getxattr(kAlice, f, "user.missing");
    EXPECT_EQ(code(missing), Code::no_data);
    EXPECT_EQ(missing.status().to_errno(), ENODATA);
    EXPECT_EQ(code(m().removexattr(kAlice, f, "user.missing")), Code::no_data);

    EXPECT_EQ(code(m().setxattr(kBob, f, "user.c", "x", 0)), Code::permission);
    EXPECT_EQ(code(m().removexattr(kBob, f, "user.a")), Code::permission);
    EXPECT_EQ(code(m().setxattr(kAlice, f, "trusted.t", "x", 0)), Code::not_permitted);
    ASSERT_TRUE(m().setxattr(kRoot, f, "trusted.t", "x", 0).ok());
    EXPECT_EQ(code(m().getxattr(kAlice, f, "trusted.t")), Code::no_data);
    EXPECT_EQ(m().listxattr(kAlice, f)->size(), 3u);  // trusted.* hidden from non-root
    EXPECT_EQ(m().listxattr(kRoot, f)->size(), 4u);
    EXPECT_EQ(code(m().setxattr(kAlice, f, "", "x", 0)), Code::range);
    EXPECT_EQ(code(m().setxattr(kAlice, f, "user." + std::string(251, 'n'), "x", 0)), Code::range);
    EXPECT_EQ(code(m().setxattr(kAlice, f, "bogus.x", "x", 0)), Code::unsupported);
    EXPECT_EQ(code(m().setxattr(kAlice, f, "user.big", std::string(65537, 'v'), 0)), Code::too_large);
    EXPECT_TRUE(m().setxattr(kAlice, f, "user.big", std::string(65536, 'v'), 0).ok());
    EXPECT_EQ(code(m().setxattr(kAlice, f, "user.a", "x", 4)), Code::invalid);
    EXPECT_EQ(code(m().getxattr(kAlice, 4242, "user.a")), Code::not_found);

    ASSERT_TRUE(m().removexattr(kAlice, f, "user.a").ok());
    EXPECT_EQ(code(m().getxattr(kAlice, f, "user.a")), Code::no_data);
    EXPECT_EQ(*m().listxattr(kAlice, f), (std::vector<std::string>{"user.b", "user.big", "user.empty"}));
    // Symlinks carry no user xattrs.
    auto s = m().symlink(kAlice, d, "s", "f");
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(code(m().setxattr(kAlice, s->ino, "user.x", "v", 0)), Code::not_permitted);
}

// ---- primitives for cross-shard work -------------------------------------------------------

TEST_F(MetaShardTest, CrossShardPrimitives) {
    // mkdir of "remote" in the root, its inode placed on shard 1.
    auto s1r = MetaShard::open(db_path(1), 1);
    ASSERT_TRUE(s1r.ok());
    MetaShard& s1 = **s1r;
    Attr t;
    t.type = FileType::directory;
    t.mode = 0750;
    t.uid = kAlice.uid;
    t.gid = kAlice.gid;
    t.nlink = 2;
    auto dir = s1.create_inode(t);
    ASSERT_TRUE(dir.ok()) << dir.status().to_string();
    EXPECT_EQ(shard_of(dir->ino), 1u);
    EXPECT_EQ(dir->mode, uint32_t(S_IFDIR | 0750));
    ASSERT_TRUE(m().insert_dentry(kRootIno, "remote", dir->ino, FileType::directory).ok());
    EXPECT_EQ(attr(kRootIno).nlink, 3u);
    EXPECT_EQ(code(m().insert_dentry(kRootIno, "remote", dir->ino, FileType::directory)), Code::exists);
    EXPECT_EQ(code(m().insert_dentry(12345, "x", dir->ino, FileType::directory)), Code::not_found);

    // This shard knows the name, not the inode.
    auto e = m().lookup_dentry(kRoot, kRootIno, "remote");
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->ino, dir->ino);
    EXPECT_EQ(e->type, FileType::directory);
    EXPECT_EQ(code(m().lookup(kRoot, kRootIno, "remote")), Code::cross_device);
    EXPECT_EQ(code(m().rmdir(kRoot, kRootIno, "remote")), Code::cross_device);
    EXPECT_EQ(code(m().lookup_dentry(kRoot, kRootIno, "none")), Code::not_found);
    // Children of the remote directory live on shard 1.
    auto child = s1.create(kAlice, dir->ino, "child", 0644, true);
    ASSERT_TRUE(child.ok()) << child.status().to_string();
    EXPECT_EQ(shard_of(child->ino), 1u);
    EXPECT_EQ(code(s1.delete_inode(dir->ino)), Code::not_empty);
    EXPECT_EQ(code(s1.adjust_nlink(dir->ino, -2)), Code::not_empty);

    // A hard link across shards: the name here, the count there.
    auto up = s1.adjust_nlink(child->ino, +1);
    ASSERT_TRUE(up.ok());
    EXPECT_EQ(up->attr.nlink, 2u);
    ASSERT_TRUE(m().insert_dentry(kRootIno, "xlink", child->ino, FileType::regular).ok());
    EXPECT_EQ(code(m().unlink(kRoot, kRootIno, "xlink")), Code::cross_device);
    auto removed = m().remove_dentry(kRootIno, "xlink");
    ASSERT_TRUE(removed.ok());
    EXPECT_EQ(removed->ino, child->ino);
    auto down = s1.adjust_nlink(child->ino, -1);
    ASSERT_TRUE(down.ok());
    EXPECT_FALSE(down->last_link);
    EXPECT_EQ(s1.getattr(child->ino)->nlink, 1u);
    ASSERT_TRUE(s1.unlink(kAlice, dir->ino, "child").ok());

    // rmdir across shards: the inode there, then the name here.
    ASSERT_TRUE(s1.delete_inode(dir->ino).ok());
    EXPECT_EQ(code(s1.getattr(dir->ino)), Code::not_found);
    EXPECT_EQ(code(s1.delete_inode(dir->ino)), Code::not_found);
    ASSERT_TRUE(m().remove_dentry(kRootIno, "remote").ok());
    EXPECT_EQ(attr(kRootIno).nlink, 2u);
    EXPECT_EQ(code(m().remove_dentry(kRootIno, "remote")), Code::not_found);

    // adjust_nlink deletes at zero, and reports it.
    Attr ft;
    ft.type = FileType::regular;
    ft.mode = 0600;
    ft.nlink = 1;
    auto file = s1.create_inode(ft);
    ASSERT_TRUE(file.ok());
    EXPECT_EQ(file->chunk_size, kDefaultChunkSize);
    auto gone = s1.adjust_nlink(file->ino, -1);
    ASSERT_TRUE(gone.ok());
    EXPECT_TRUE(gone->last_link);
    EXPECT_EQ(code(s1.getattr(file->ino)), Code::not_found);
    ft.nlink = 0;
    EXPECT_EQ(code(s1.create_inode(ft)), Code::invalid);
    EXPECT_EQ(s1.counts()->inodes, 0u);
}

// ---- persistence ---------------------------------------------------------------------------

TEST_F(MetaShardTest, ReopenServesTheSameTreeAndNeverReusesNumbers) {
    uint64_t d = mkdir(kRootIno, "d", 0700);
    uint64_t f = create(d, "f");
    ASSERT_TRUE(m().extend_size(f, 123456).ok());
    ASSERT_TRUE(m().setxattr(kRoot, f, "user.k", "value", 0).ok());
    ASSERT_TRUE(m().symlink(kRoot, d, "s", "f").ok());
    ASSERT_TRUE(m().link(kRoot, f, kRootIno, "hard").ok());
    uint64_t last = create(kRootIno, "last");
    ASSERT_TRUE(m().unlink(kRoot, kRootIno, "last").ok());  // the highest number, now free
    const std::string before = snapshot();

    reopen();
    EXPECT_EQ(snapshot(), before);
    EXPECT_EQ(m().lookup(kRoot, d, "f")->size, 123456u);
    EXPECT_EQ(*m().readlink(m().lookup(kRoot, d, "s")->ino), "f");
    EXPECT_EQ(attr(f).nlink, 2u);
    uint64_t next = create(kRootIno, "next");
    EXPECT_EQ(next, last + 1);

    reopen();
    EXPECT_EQ(mkdir(kRootIno, "after"), next + 1);
    EXPECT_EQ(m().counts()->inodes, 6u);
}

// ---- a full disk ---------------------------------------------------------------------------

// A small tmpfs that a test mounts at DIR/small (root only), unmounted however the test ends
// (declared before the shard on it, so after the shard is closed).
struct SmallTmpfs {
    fs::path path;
    int error = 0;  // errno of a failed mount
    SmallTmpfs(const fs::path& dir, const std::string& size) : path(dir / "small") {
        fs::create_directory(path);
        if (::mount("jobfs-test", path.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) error = errno;
    }
    ~SmallTmpfs() {
        if (!error) ::umount2(path.c_str(), MNT_DETACH);
    }
};

// The database on a 256 KiB tmpfs that the test mounts (root only; skipped elsewhere): writes
// run into SQLITE_FULL, which must come back as no_space and leave nothing behind.
TEST_F(MetaShardTest, FullDiskGivesNoSpaceAndLosesNothing) {
    shard_.reset();
    SmallTmpfs tmpfs(dir_, "256k");
    if (tmpfs.error) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(tmpfs.error);
    const fs::path& small = tmpfs.path;
    {
        auto opened = MetaShard::open((small / "meta0.db").string(), 0);
        ASSERT_TRUE(opened.ok()) << opened.status().to_string();
        MetaShard& s = **opened;
        auto f = s.create(kRoot, kRootIno, "f", 0644, true);
        ASSERT_TRUE(f.ok());
        const std::string value(kMaxXattrValueLen, 'v');
        Status full;
        int stored = 0;
        for (; stored < 64; ++stored) {
            full = s.setxattr(kRoot, f->ino, "user.v" + std::to_string(stored), value, 0);
            if (!full.ok()) break;
        }
        ASSERT_FALSE(full.ok()) << "256 KiB never filled up";
        EXPECT_GT(stored, 0);  // the space ran out during the test, not before it
        EXPECT_EQ(full.code(), Code::no_space) << full.to_string();
        EXPECT_EQ(full.to_errno(), ENOSPC);
        EXPECT_EQ(full.message().rfind("setxattr 'user.v", 0), 0u) << full.message();
        // The failed attribute is absent, the ones before it are intact, the shard still reads.
        EXPECT_EQ(code(s.getxattr(kRoot, f->ino, "user.v" + std::to_string(stored))), Code::no_data);
        auto names = s.listxattr(kRoot, f->ino);
        ASSERT_TRUE(names.ok()) << names.status().to_string();
        EXPECT_EQ(names->size(), size_t(stored));
        for (int i = 0; i < stored; ++i)
            EXPECT_EQ(*s.getxattr(kRoot, f->ino, "user.v" + std::to_string(i)), value);
        EXPECT_EQ(s.lookup(kRoot, kRootIno, "f")->ino, f->ino);
    }
}

// A batch rename (one transaction, a savepoint per entry) on a database that has no room
// left: each entry either reports success and is renamed, or fails with no_space and keeps its
// name; if the transaction fails as a whole (here: its commit, which writes the WAL), the
// whole batch fails and nothing is renamed. Either way the outcomes say what is there, also
// after the shard is opened again.
TEST_F(MetaShardTest, ABatchRenameOnAFullDiskSaysWhatItDidAndLosesNothing) {
    shard_.reset();
    SmallTmpfs tmpfs(dir_, "1m");
    if (tmpfs.error) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(tmpfs.error);
    const fs::path& small = tmpfs.path;
    constexpr int kFiles = 12;
    std::vector<std::pair<std::string, std::string>> names;
    for (int i = 0; i < kFiles; ++i)  // long new names: the renamed rows need pages of their own
        names.emplace_back("t" + std::to_string(i), "renamed-" + std::to_string(i) + "-" + std::string(200, 'n'));
    std::vector<bool> renamed(kFiles, false);
    uint64_t d = 0;
    {
        auto opened = MetaShard::open((small / "meta0.db").string(), 0);
        ASSERT_TRUE(opened.ok()) << opened.status().to_string();
        MetaShard& s = **opened;
        auto dir = s.mkdir(kRoot, kRootIno, "d", 0755);
        ASSERT_TRUE(dir.ok());
        d = dir->ino;
        for (const auto& [from, to] : names) ASSERT_TRUE(s.create(kRoot, d, from, 0644, true).ok()) << from;
        auto filler = s.create(kRoot, kRootIno, "filler", 0644, true);
        ASSERT_TRUE(filler.ok());
        // Filled with large values, then smaller ones, until not even 100 bytes fit.
        int n = 0;
        for (size_t len : {size_t(kMaxXattrValueLen), size_t(4096), size_t(100)}) {
            Status full;
            for (int i = 0; i < 1000 && full.ok(); ++i)
                full = s.setxattr(kRoot, filler->ino, "user.v" + std::to_string(n++), std::string(len, 'v'), 0);
            ASSERT_EQ(full.code(), Code::no_space) << "1 MiB never filled up: " << full.to_string();
        }

        auto out = s.rename_in_dir(kRoot, d, names);
        int failed = 0;
        if (!out.ok()) {
            EXPECT_EQ(out.status().code(), Code::no_space) << out.status().to_string();
            failed = kFiles;
        } else {
            ASSERT_EQ(out->size(), names.size());
            for (int i = 0; i < kFiles; ++i) {
                if ((*out)[i].ok()) {
                    renamed[i] = true;
                } else {
                    EXPECT_EQ(code((*out)[i]), Code::no_space) << (*out)[i].status().to_string();
                    ++failed;
                }
            }
        }
        EXPECT_GT(failed, 0) << "the full disk took every rename";
        // What the outcomes say is what the directory holds.
        for (int i = 0; i < kFiles; ++i) {
            EXPECT_EQ(s.lookup(kRoot, d, names[i].first).ok(), !renamed[i]) << names[i].first;
            EXPECT_EQ(s.lookup(kRoot, d, names[i].second).ok(), renamed[i]) << names[i].second;
        }
    }
    auto reopened = MetaShard::open((small / "meta0.db").string(), 0);
    ASSERT_TRUE(reopened.ok()) << reopened.status().to_string();
    for (int i = 0; i < kFiles; ++i) {
        EXPECT_EQ((*reopened)->lookup(kRoot, d, names[i].first).ok(), !renamed[i]) << "reopened: " << names[i].first;
        EXPECT_EQ((*reopened)->lookup(kRoot, d, names[i].second).ok(), renamed[i]) << "reopened: " << names[i].second;
    }
}

// ---- threads -------------------------------------------------------------------------------

TEST_F(MetaShardTest, ConcurrentCreatesIntoOneDirectory) {
    uint64_t d = mkdir(kRootIno, "d", 0777);
    constexpr int kThreads = 4, kPerThread = 250;
    std::vector<std::vector<uint64_t>> got(kThreads);
    std::vector<int> failures(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            Cred c{uint32_t(2000 + t), 100, {}};
            for (int i = 0; i < kPerThread; ++i) {
                auto a = m().create(c, d, "t" + std::to_string(t) + "-" + std::to_string(i), 0644, true);
                if (a.ok())
                    got[t].push_back(a->ino);
                else
                    ++failures[t];
            }
        });
    }
    for (auto& th : threads) th.join();
    std::set<uint64_t> all;
    for (int t = 0; t < kThreads; ++t) {
        EXPECT_EQ(failures[t], 0);
        all.insert(got[t].begin(), got[t].end());
    }
    EXPECT_EQ(all.size(), size_t(kThreads * kPerThread));
    auto r = m().readdir(kRoot, d, "", 10000);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->entries.size(), size_t(kThreads * kPerThread));
    for (auto& e : r->entries) {
        EXPECT_TRUE(all.count(e.ino)) << e.name;
        EXPECT_EQ(attr(e.ino).uid, uint32_t(2000 + (e.name[1] - '0')));
    }
}

// ---- replication: changesets and snapshots (docs/replication.md, "Metadata shards") -------

// Everything a client could see of a shard whose entries are all local, as text: the tree from
// the root (names, inodes, attributes but atime, xattrs), the counts and the intent log.
std::string dump(MetaShard& sh) {
    std::string out;
    std::vector<uint64_t> dirs{kRootIno};
    while (!dirs.empty()) {
        const uint64_t d = dirs.back();
        dirs.pop_back();
        auto a = sh.getattr(d);
        if (!a.ok()) return "getattr failed: " + a.status().to_string();
        auto list = sh.readdir(kRoot, d, "", 100000);
        if (!list.ok()) return "readdir failed: " + list.status().to_string();
        out += "dir " + std::to_string(d) + " nlink " + std::to_string(a->nlink) + " mtime " + std::to_string(a->mtime_ns) + "\n";
        for (const auto& e : list->entries) {
            auto c = sh.getattr(e.ino);
            if (!c.ok()) return "getattr failed: " + c.status().to_string();
            out += "  " + e.name + " " + std::to_string(e.ino) + " mode " + std::to_string(c->mode) + " size " +
                   std::to_string(c->size) + " nlink " + std::to_string(c->nlink) + " ctime " + std::to_string(c->ctime_ns) + "\n";
            auto xs = sh.listxattr(kRoot, e.ino);
            if (xs.ok())
                for (const auto& x : *xs) {
                    auto v = sh.getxattr(kRoot, e.ino, x);
                    out += "    xattr " + x + "=" + (v.ok() ? *v : "?") + "\n";
                }
            if (e.type == FileType::directory) dirs.push_back(e.ino);
        }
    }
    auto n = sh.counts();
    if (n.ok()) out += "inodes " + std::to_string(n->inodes) + " dentries " + std::to_string(n->dentries) + "\n";
    auto in = sh.intents();
    if (in.ok())
        for (const auto& i : *in) out += "intent " + std::to_string(i.id) + " " + i.name + "\n";
    return out;
}

// A primary shipping to a replica that applies each changeset: after any mix of operations,
// failed ones included, the replica shows exactly what the primary shows and is at its
// position. Until the replica took a snapshot it refuses the changesets (it is not in step),
// and the primary's operation fails with nothing committed.
TEST_F(MetaShardTest, ChangesetsKeepAReplicaIdenticalAndARefusalRollsBack) {
    int shipped = 0;
    auto rep = replica_shipped_to(7, shipped);
    ASSERT_TRUE(rep);
    MetaShard& r = *rep;
    // A fresh replica is not in step: refused, rolled back here.
    auto refused = m().mkdir(kRoot, kRootIno, "a", 0755);
    EXPECT_EQ(code(refused), Code::again) << refused.status().to_string();
    EXPECT_EQ(code(m().lookup(kRoot, kRootIno, "a")), Code::not_found);
    // Reads are never shipped.
    const int before = shipped;
    EXPECT_TRUE(m().getattr(kRootIno).ok());
    EXPECT_EQ(shipped, before);

    auto snap = m().snapshot();
    ASSERT_TRUE(snap.ok()) << snap.status().to_string();
    Status installed = r.install_snapshot(*snap);
    ASSERT_TRUE(installed.ok()) << installed.to_string();
    EXPECT_EQ(dump(r), dump(m()));

    const uint64_t a = mkdir(kRootIno, "a");
    const uint64_t f = create(a, "f");
    ASSERT_TRUE(m().setxattr(kRoot, f, "user.k", "v1", 0).ok());
    ASSERT_TRUE(m().extend_size(f, 12345).ok());
    ASSERT_TRUE(m().link(kRoot, f, kRootIno, "hard").ok());
    ASSERT_TRUE(m().rename(kRoot, a, "f", kRootIno, "g").ok());
    ASSERT_TRUE(m().symlink(kRoot, a, "s", "../g").ok());
    const uint64_t b = mkdir(a, "b");
    create(b, "x");
    ASSERT_TRUE(m().unlink(kRoot, b, "x").ok());
    EXPECT_EQ(code(m().mkdir(kRoot, kRootIno, "a", 0755)), Code::exists); // a failure ships nothing
    Intent in;
    in.op = IntentOp::rename;
    in.parent = kRootIno;
    in.name = "pending";
    auto id = m().intent_begin(in);
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    EXPECT_EQ(dump(r), dump(m()));
    auto pp = m().position(), rp = r.position();
    ASSERT_TRUE(pp.ok() && rp.ok());
    EXPECT_EQ(pp->term, 7u);
    EXPECT_EQ(*pp, *rp);
    EXPECT_EQ(pp->seq, 11u); // one per successful change (the refused and failed ones moved nothing)

    // A changeset the replica already has is ok and changes nothing; a gap is refused.
    struct Shipped {
        MetaShard::ReplPosition prev, at;
        std::vector<uint8_t> cs;
    };
    std::vector<Shipped> log;
    ASSERT_TRUE(m().start_shipping(7, [&](const MetaShard::ReplPosition& prev, const MetaShard::ReplPosition& at,
                                          std::span<const uint8_t> cs) {
                       log.push_back({prev, at, {cs.begin(), cs.end()}});
                       return Status::OK(); // the replica misses these
                   }).ok());
    create(kRootIno, "missed");
    create(kRootIno, "missed2");
    create(kRootIno, "missed3");
    ASSERT_EQ(log.size(), 3u);
    EXPECT_EQ(code(r.lookup(kRoot, kRootIno, "missed")), Code::not_found);
    ASSERT_TRUE(r.apply_changeset(log[0].prev, log[0].at, log[0].cs).ok());
    EXPECT_TRUE(r.lookup(kRoot, kRootIno, "missed").ok());
    EXPECT_TRUE(r.apply_changeset(log[0].prev, log[0].at, log[0].cs).ok()); // again: a no-op
    EXPECT_EQ(code(r.apply_changeset(log[2].prev, log[2].at, log[2].cs)), Code::again); // log[1] missing
    EXPECT_EQ(code(r.lookup(kRoot, kRootIno, "missed3")), Code::not_found);
    // A snapshot brings it back in step.
    snap = m().snapshot();
    ASSERT_TRUE(snap.ok());
    ASSERT_TRUE(r.install_snapshot(*snap).ok());
    EXPECT_EQ(dump(r), dump(m()));
    EXPECT_TRUE(r.lookup(kRoot, kRootIno, "missed3").ok());
}

// Renames inside one directory by the batch: one transaction, so one changeset goes to the
// replica; each entry as rename() alone would do it; a failed one is undone alone and stops
// none of the others, and the replica ends identical.
TEST_F(MetaShardTest, RenamesInOneDirectoryGoInOneTransactionWithAnOutcomeEach) {
    int shipped = 0;
    auto rep = replica_in_step(3, shipped);
    ASSERT_TRUE(rep);
    MetaShard& r = *rep;
    const uint64_t d = mkdir(kRootIno, "d");
    const uint64_t t1 = create(d, "t1"), t2 = create(d, "t2"), t3 = create(d, "t3");
    const uint64_t old = create(d, "old");
    mkdir(d, "sub");
    const int before = shipped;
    const std::vector<std::pair<std::string, std::string>> names = {
        {"t1", "f1"}, {"missing", "x"}, {"t2", "sub"}, {"t3", "old"}, {"f1", "f1b"}, {"t2", "f2"}, {"t2", "f3"},
    };
    auto out = m().rename_in_dir(kRoot, d, names);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ASSERT_EQ(out->size(), names.size());
    EXPECT_TRUE((*out)[0].ok());
    EXPECT_EQ(code((*out)[1]), Code::not_found);
    EXPECT_NE((*out)[1].status().message().find("missing"), std::string::npos) << (*out)[1].status().message();
    EXPECT_EQ(code((*out)[2]), Code::is_dir);   // a file over a directory
    ASSERT_TRUE((*out)[3].ok());                // over a file: it says which
    ASSERT_TRUE((*out)[3]->replaced.has_value());
    EXPECT_EQ((*out)[3]->replaced->attr.ino, old);
    EXPECT_TRUE((*out)[4].ok());                // renames what entry 0 made
    EXPECT_TRUE((*out)[5].ok());
    EXPECT_EQ(code((*out)[6]), Code::not_found); // t2 is f2 by now
    EXPECT_EQ(shipped, before + 1);
    EXPECT_EQ(m().lookup(kRoot, d, "f1b")->ino, t1);
    EXPECT_EQ(m().lookup(kRoot, d, "f2")->ino, t2);
    EXPECT_EQ(m().lookup(kRoot, d, "old")->ino, t3);
    for (const char* gone : {"t1", "t2", "t3", "f1", "f3", "x"}) EXPECT_EQ(code(m().lookup(kRoot, d, gone)), Code::not_found) << gone;
    EXPECT_EQ(dump(r), dump(m()));
}

// The try_ operations (for the transport's progress thread) do the work at once or not at
// all: nothing while the shard is held (here: from inside a shipping, which runs under its
// lock), no write while it ships changes or when the commit would checkpoint the WAL; such a
// checkpoint is left to the next ordinary commit, after which they work again.
TEST_F(MetaShardTest, TryOperationsWorkAtOnceOrLeaveItToOthers) {
    const uint64_t d = mkdir(kRootIno, "d");
    auto made = m().try_create(kRoot, d, "now", 0644, true);
    ASSERT_TRUE(made.has_value());
    ASSERT_TRUE(made->ok()) << made->status().to_string();
    EXPECT_EQ(m().lookup(kRoot, d, "now")->ino, (*made)->ino);
    auto looked = m().try_lookup(kRoot, d, "now");
    ASSERT_TRUE(looked.has_value() && looked->ok());
    EXPECT_EQ((*looked)->ino, (*made)->ino);
    EXPECT_EQ(code(*m().try_create(kRoot, d, "now", 0644, true)), Code::exists); // errors are answers too
    auto gone = m().try_unlink(kRoot, d, "now");
    ASSERT_TRUE(gone.has_value() && gone->ok());
    EXPECT_TRUE((*gone)->last_link);
    EXPECT_EQ(code(m().lookup(kRoot, d, "now")), Code::not_found);

    // Creates at once until the WAL is due for a checkpoint: then they decline, and an
    // ordinary create checkpoints and they work again.
    int at_once = 0;
    for (; at_once < 20000; ++at_once) {
        auto c = m().try_create(kRoot, d, "f" + std::to_string(at_once), 0644, true);
        if (!c) break;
        ASSERT_TRUE(c->ok()) << c->status().to_string();
    }
    ASSERT_LT(at_once, 20000) << "the WAL never came due for a checkpoint";
    EXPECT_GT(at_once, 10);
    EXPECT_FALSE(m().try_unlink(kRoot, d, "f0").has_value());
    EXPECT_TRUE(m().try_getattr(d).has_value()); // reads need no checkpoint
    create(d, "ordinary");
    ASSERT_TRUE(m().try_create(kRoot, d, "again", 0644, true).has_value());
    for (int i = 0; i < at_once; ++i) ASSERT_TRUE(m().lookup(kRoot, d, "f" + std::to_string(i)).ok()) << i;

    // While the shard ships its changes, writes go elsewhere; reads still work at once, but not
    // while the shard is held.
    std::vector<bool> inside;
    ASSERT_TRUE(m().start_shipping(1, [&](const MetaShard::ReplPosition&, const MetaShard::ReplPosition&,
                                          std::span<const uint8_t>) {
                       inside.push_back(m().try_getattr(d).has_value());
                       return Status::OK();
                   }).ok());
    EXPECT_FALSE(m().try_create(kRoot, d, "shipped", 0644, true).has_value());
    EXPECT_FALSE(m().try_unlink(kRoot, d, "again").has_value());
    EXPECT_TRUE(m().try_lookup(kRoot, d, "again").has_value());
    create(d, "shipped");
    EXPECT_EQ(inside, std::vector<bool>{false});
}

// A replica that becomes primary (a new term) goes on from where the old primary stopped: its
// inode numbers and intent ids were never handed out by the old one, and its first changeset
// applies on a replica that followed the old primary (the same history) but not on one that
// had a change the new primary never got (a history it does not share).
TEST_F(MetaShardTest, APromotedReplicaContinuesTheHistoryAndRefusesDivergedReplicas) {
    auto ra = MetaShard::open((dir_ / "replicaA.db").string(), 0);
    auto rb = MetaShard::open((dir_ / "replicaB.db").string(), 0);
    ASSERT_TRUE(ra.ok() && rb.ok());
    MetaShard &a = **ra, &b = **rb;
    auto snap = m().snapshot();
    ASSERT_TRUE(snap.ok());
    ASSERT_TRUE(a.install_snapshot(*snap).ok() && b.install_snapshot(*snap).ok());
    bool to_b = true;
    ASSERT_TRUE(m().start_shipping(3, [&](const MetaShard::ReplPosition& prev, const MetaShard::ReplPosition& at,
                                          std::span<const uint8_t> cs) {
                       JOBFS_RETURN_IF_ERROR(a.apply_changeset(prev, at, cs));
                       return to_b ? b.apply_changeset(prev, at, cs) : Status::OK();
                   }).ok());
    const uint64_t old_file = create(kRootIno, "old");
    Intent in;
    in.op = IntentOp::link;
    in.parent = kRootIno;
    in.name = "i";
    auto old_intent = m().intent_begin(in);
    ASSERT_TRUE(old_intent.ok());
    ASSERT_TRUE(m().intent_end(*old_intent).ok());
    to_b = false; // the old primary dies while shipping: A has the last change, B not
    create(kRootIno, "only-on-a");
    ASSERT_TRUE(m().start_shipping(3, {}).ok());

    // B becomes primary in term 9, shipping to A (which has a change B lacks): refused.
    ASSERT_TRUE(b.start_shipping(9, [&](const MetaShard::ReplPosition& prev, const MetaShard::ReplPosition& at,
                                        std::span<const uint8_t> cs) { return a.apply_changeset(prev, at, cs); }).ok());
    auto refused = b.create(kRoot, kRootIno, "new", 0644, true);
    EXPECT_EQ(code(refused), Code::again);
    // After A took B's snapshot, B's changes apply on A.
    auto bs = b.snapshot();
    ASSERT_TRUE(bs.ok());
    ASSERT_TRUE(a.install_snapshot(*bs).ok());
    EXPECT_EQ(code(a.lookup(kRoot, kRootIno, "only-on-a")), Code::not_found); // not acknowledged: gone
    auto made = b.create(kRoot, kRootIno, "new", 0644, true);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    EXPECT_GT(made->ino, old_file);
    auto new_intent = b.intent_begin(in);
    ASSERT_TRUE(new_intent.ok());
    EXPECT_GT(*new_intent, *old_intent);
    EXPECT_EQ(dump(a), dump(b));
    auto pa = a.position();
    ASSERT_TRUE(pa.ok());
    EXPECT_EQ(pa->term, 9u);
}

// A primary that lost its shard to another keeps a refusing ship (so that nothing commits on
// it any more), and is then the new primary's replica: the changesets it applies are not its
// own transactions and must never go through that ship (they did: every one was refused).
TEST_F(MetaShardTest, AReplicaAppliesChangesetsWhatEverItsOwnShipping) {
    auto rep = MetaShard::open((dir_ / "replica0.db").string(), 0);
    ASSERT_TRUE(rep.ok());
    MetaShard& r = **rep;
    auto snap = m().snapshot();
    ASSERT_TRUE(snap.ok());
    ASSERT_TRUE(r.install_snapshot(*snap).ok());
    ASSERT_TRUE(r.start_shipping(3, [](const MetaShard::ReplPosition&, const MetaShard::ReplPosition&,
                                       std::span<const uint8_t>) { return Status(Code::again, "no longer the primary"); })
                    .ok());
    EXPECT_EQ(code(r.create(kRoot, kRootIno, "own", 0644, true)), Code::again); // its own: refused
    ASSERT_TRUE(m().start_shipping(4, [&](const MetaShard::ReplPosition& prev, const MetaShard::ReplPosition& at,
                                          std::span<const uint8_t> cs) { return r.apply_changeset(prev, at, cs); })
                    .ok());
    create(kRootIno, "shipped");
    EXPECT_TRUE(r.lookup(kRoot, kRootIno, "shipped").ok());
    EXPECT_EQ(code(r.lookup(kRoot, kRootIno, "own")), Code::not_found);
}

// A snapshot of another shard is refused and changes nothing.
TEST_F(MetaShardTest, SnapshotOfAnotherShardIsRefused) {
    auto other = MetaShard::open(db_path(4), 4);
    ASSERT_TRUE(other.ok());
    auto snap = (*other)->snapshot();
    ASSERT_TRUE(snap.ok());
    const uint64_t keep = create(kRootIno, "keep");
    EXPECT_EQ(code(m().install_snapshot(*snap)), Code::invalid);
    EXPECT_EQ(attr(keep).ino, keep);
    MetaShard::Snapshot junk{{0, 0}, {1, 2, 3}};
    EXPECT_NE(code(m().install_snapshot(junk)), Code::ok);
    EXPECT_TRUE(m().lookup(kRoot, kRootIno, "keep").ok());
}

} // namespace
} // namespace jobfs::server

namespace jobfs::server {
namespace {

// Runs SQL on a closed shard's database directly (to make one as an older jobfsd left it).
void run_sql(const std::string& path, const char* sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
}

// Schema 3 added inodes.replicas (chain replication). A version-2 database is migrated when
// opened: its files were stored once (replicas 1), its directories get 0 (the default); a
// version this build does not know is refused with a clear error.
TEST(MetaShardSchema, Version2IsMigratedUnknownVersionsRefused) {
    const std::string dir = (fs::temp_directory_path() / "meta_shard_schema.XXXXXX").string();
    std::string tmpl = dir;
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    const std::string db = tmpl + "/meta.db";
    uint64_t file = 0, sub = 0;
    {
        auto s = MetaShard::open(db, 0, Layout{kDefaultChunkSize, 0, 2});
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        auto d = (*s)->mkdir(kRoot, kRootIno, "d", 0755);
        ASSERT_TRUE(d.ok());
        sub = d->ino;
        auto f = (*s)->create(kRoot, kRootIno, "f", 0644, true);
        ASSERT_TRUE(f.ok());
        EXPECT_EQ(f->replicas, 2u); // the shard's default
        file = f->ino;
    }
    // What a version-2 jobfsd left: no replicas column.
    run_sql(db, "ALTER TABLE inodes DROP COLUMN replicas; UPDATE meta SET value = 2 WHERE key = 'schema_version';");
    {
        auto s = MetaShard::open(db, 0, Layout{kDefaultChunkSize, 0, 2});
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        EXPECT_EQ((*s)->getattr(file)->replicas, 1u);
        EXPECT_EQ((*s)->getattr(sub)->replicas, 0u);
        auto g = (*s)->create(kRoot, kRootIno, "g", 0644, true);
        ASSERT_TRUE(g.ok());
        EXPECT_EQ(g->replicas, 2u);
    }
    {
        auto s = MetaShard::open(db, 0); // migrated once: opens as version 3
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        EXPECT_EQ((*s)->getattr(file)->replicas, 1u);
    }
    run_sql(db, "UPDATE meta SET value = 7 WHERE key = 'schema_version';");
    auto s = MetaShard::open(db, 0);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), Code::unsupported);
    EXPECT_NE(s.status().message().find("schema version 7"), std::string::npos) << s.status().to_string();
    fs::remove_all(tmpl);
}

// A batch of delegated unlinks deletes no extended attributes when the shard holds none (it
// asks once per batch): those of a file made with some in the same batch, or given some
// before it, still go with the file's last link. Fails when the batch asks only at its start
// and a create in it adds some (the second batch), or when it does not ask and skips.
TEST_F(MetaShardTest, DelegatedUnlinksTakeTheFilesAttributesWithThem) {
    auto d = m().mkdir(kRoot, kRootIno, "d", 0755);
    ASSERT_TRUE(d.ok());
    auto set_before = m().create(kRoot, d->ino, "given", 0644, true);
    ASSERT_TRUE(set_before.ok());
    ASSERT_TRUE(m().setxattr(kRoot, set_before->ino, "user.k", "v", 0).ok());
    auto g = m().delegate_dir(kRoot, d->ino, 7, 100, 16);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    using Op = MetaShard::DirOp;
    // Batch 1: a plain file and one made with attributes, both unlinked again; the file with
    // attributes from before is unlinked too.
    std::vector<Op> ops;
    ops.push_back(Op{MetaShard::kDirOpCreate, "plain", g->ino_first, 0644, 0, {}, {}});
    ops.push_back(Op{MetaShard::kDirOpCreate, "tagged", g->ino_first + 1, 0644, 0, NewFile{0, {{"user.a", "1"}, {"user.b", "2"}}}, {}});
    ops.push_back(Op{MetaShard::kDirOpUnlink, "plain", g->ino_first, 0, 0, {}, {}});
    ops.push_back(Op{MetaShard::kDirOpUnlink, "tagged", g->ino_first + 1, 0, 0, {}, {}});
    ops.push_back(Op{MetaShard::kDirOpUnlink, "given", set_before->ino, 0, 0, {}, {}});
    auto r = m().dir_ops(kRoot, d->ino, 7, ops, false, 0);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    for (const auto& o : r->outcomes) ASSERT_TRUE(o.ok()) << o.status().to_string();
    EXPECT_EQ(m().counts()->xattrs, 0u);
    // Batch 2, the shard without attributes at its start: one made with attributes, then gone.
    ops.clear();
    ops.push_back(Op{MetaShard::kDirOpCreate, "late", g->ino_first + 2, 0644, 0, NewFile{0, {{"user.c", "3"}}}, {}});
    ops.push_back(Op{MetaShard::kDirOpUnlink, "late", g->ino_first + 2, 0, 0, {}, {}});
    r = m().dir_ops(kRoot, d->ino, 7, ops, true, 0);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    for (const auto& o : r->outcomes) ASSERT_TRUE(o.ok()) << o.status().to_string();
    EXPECT_EQ(m().counts()->xattrs, 0u);
    EXPECT_EQ(m().counts()->inodes, 2u); // the root and d
}

// A delegated create whose inode number is taken (a holder that reused one) is refused with
// exists and changes nothing: the file that has the number keeps it, the name is not made.
TEST_F(MetaShardTest, ADelegatedCreateWithATakenInodeNumberChangesNothing) {
    auto d = m().mkdir(kRoot, kRootIno, "d", 0755);
    ASSERT_TRUE(d.ok());
    auto g = m().delegate_dir(kRoot, d->ino, 9, 100, 16);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    using Op = MetaShard::DirOp;
    std::vector<Op> ops;
    ops.push_back(Op{MetaShard::kDirOpCreate, "first", g->ino_first, 0600, 0, {}, {}});
    ops.push_back(Op{MetaShard::kDirOpCreate, "second", g->ino_first, 0644, 0, NewFile{5, {}}, {}});
    auto r = m().dir_ops(kRoot, d->ino, 9, ops, true, 0);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->outcomes.size(), 2u);
    EXPECT_TRUE(r->outcomes[0].ok());
    ASSERT_FALSE(r->outcomes[1].ok());
    EXPECT_EQ(r->outcomes[1].status().code(), Code::exists) << r->outcomes[1].status().to_string();
    auto first = m().lookup(kRoot, d->ino, "first");
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(first->ino, g->ino_first);
    EXPECT_EQ(first->mode & 07777, 0600u);
    EXPECT_EQ(first->size, 0u);
    EXPECT_EQ(m().lookup(kRoot, d->ino, "second").status().code(), Code::not_found);
}

// A shard made with the index of entries by inode that earlier versions kept opens with its
// entries and without the index (it answered no query and cost every change of an entry).
TEST_F(MetaShardTest, AnEarlierShardLosesItsIndexOfEntriesByInode) {
    auto d = m().mkdir(kRoot, kRootIno, "d", 0755);
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE(m().create(kRoot, d->ino, "f", 0644, true).ok());
    shard_.reset();
    const auto indexes = [&] {
        sqlite3* db = nullptr;
        EXPECT_EQ(sqlite3_open(db_path().c_str(), &db), SQLITE_OK);
        sqlite3_stmt* st = nullptr;
        EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'dentries_by_ino'", -1, &st,
                                     nullptr),
                  SQLITE_OK);
        EXPECT_EQ(sqlite3_step(st), SQLITE_ROW);
        const int n = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
        sqlite3_close(db);
        return n;
    };
    {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open(db_path().c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db, "CREATE INDEX dentries_by_ino ON dentries(ino)", nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(db);
    }
    ASSERT_EQ(indexes(), 1);
    reopen();
    auto f = m().lookup(kRoot, d->ino, "f");
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_TRUE(m().unlink(kRoot, d->ino, "f").ok());
    shard_.reset();
    EXPECT_EQ(indexes(), 0);
}

} // namespace
} // namespace jobfs::server
