// config_test: jobfs.conf and flags, and every refusal with a message that names the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "hostlist.h"
#include "server/config.h"
#include "server/daemon.h"

namespace jobfs::server {
namespace {

Result<DaemonConfig> parse(std::vector<std::string> args) {
    std::vector<const char*> argv{"jobfsd"};
    for (auto& a : args) argv.push_back(a.c_str());
    return parse_daemon_config(static_cast<int>(argv.size()), argv.data());
}

class ConfFile {
public:
    explicit ConfFile(const std::string& text) {
        char tmpl[] = "/tmp/jobfs-conf-XXXXXX";
        int fd = mkstemp(tmpl);
        path_ = tmpl;
        ::close(fd);
        std::ofstream(path_) << text;
    }
    ~ConfFile() { std::remove(path_.c_str()); }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

TEST(Config, SizesWithUnits) {
    EXPECT_EQ(*parse_size("65536"), 65536u);
    EXPECT_EQ(*parse_size("64k"), 65536u);
    EXPECT_EQ(*parse_size("4M"), 4u << 20);
    EXPECT_EQ(*parse_size("4MiB"), 4u << 20);
    EXPECT_EQ(*parse_size("1G"), 1ull << 30);
    EXPECT_EQ(parse_size("").status().code(), Code::invalid);
    EXPECT_EQ(parse_size("4X").status().code(), Code::invalid);
    EXPECT_EQ(parse_size("M").status().code(), Code::invalid);
    EXPECT_EQ(parse_size("99999999999T").status().code(), Code::range);
}

TEST(Config, FlagsAlone) {
    auto c = parse({"--data-dir", "/d", "--daemons", "a:1, b:2", "--rank", "1", "--chunk-size", "1M"});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->data_dir, "/d");
    EXPECT_EQ(c->daemons, (std::vector<std::string>{"a:1", "b:2"}));
    EXPECT_EQ(c->rank, 1);
    EXPECT_EQ(c->chunk_size, 1u << 20);
    EXPECT_EQ(c->port, 7117); // default
}

TEST(HostList, ExpandsLikeSlurm) {
    using V = std::vector<std::string>;
    EXPECT_EQ(*hostlist_expand("n1"), V{"n1"});
    EXPECT_EQ(*hostlist_expand("n[1-3],gpu5"), (V{"n1", "n2", "n3", "gpu5"}));
    EXPECT_EQ(*hostlist_expand("n[01-03,7]"), (V{"n01", "n02", "n03", "n7"}));
    EXPECT_EQ(*hostlist_expand("n[8-10]"), (V{"n8", "n9", "n10"}));
    EXPECT_EQ(*hostlist_expand("r[1-2]c[1-2]"), (V{"r1c1", "r1c2", "r2c1", "r2c2"}));
    EXPECT_EQ(*hostlist_expand("a-b.example,x"), (V{"a-b.example", "x"}));
    EXPECT_EQ(hostlist_expand("n[1-3").status().code(), Code::invalid);
    EXPECT_EQ(hostlist_expand("n1-3]").status().code(), Code::invalid);
    EXPECT_EQ(hostlist_expand("n[3-1]").status().code(), Code::invalid);
    EXPECT_EQ(hostlist_expand("n[a-b]").status().code(), Code::invalid);
    EXPECT_EQ(hostlist_expand("n[1-99999999]").status().code(), Code::invalid);
}

TEST(Config, DaemonsFromASlurmNodeList) {
    auto c = parse({"--data-dir", "/d", "--daemons", "n[1-3]", "--port", "7070", "--rank", "0"});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->daemons, (std::vector<std::string>{"n1:7070", "n2:7070", "n3:7070"}));
    c = parse({"--data-dir", "/d", "--daemons", "n[1-2]:8000,m5", "--port", "7070", "--rank", "0"});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->daemons, (std::vector<std::string>{"n1:8000", "n2:8000", "m5:7070"}));
    ::setenv("SLURM_JOB_NODELIST", "node[07-08]", 1);
    c = parse({"--data-dir", "/d", "--daemons", "slurm", "--rank", "1"});
    ::unsetenv("SLURM_JOB_NODELIST");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->daemons, (std::vector<std::string>{"node07:7117", "node08:7117"}));
    auto bad = parse({"--data-dir", "/d", "--daemons", "slurm", "--rank", "0"});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("SLURM_JOB_NODELIST"), std::string::npos) << bad.status().to_string();
    bad = parse({"--data-dir", "/d", "--daemons", "n1:notaport", "--rank", "0"});
    EXPECT_EQ(bad.status().code(), Code::invalid);
}

// On a Slurm node list every daemon has the same port: each finds itself by its host name.
TEST(Config, RankFromTheHostNameInANodeList) {
    char name[256] = {};
    ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
    std::string me(name);
    me = me.substr(0, me.find('.'));
    auto c = parse({"--data-dir", "/d", "--daemons", "other1," + me + ",other2", "--port", "7117", "--listen", "0.0.0.0"});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    auto r = find_rank(*c);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(*r, 1u);
    c = parse({"--data-dir", "/d", "--daemons", "other1,other2", "--port", "7117", "--listen", "0.0.0.0"});
    ASSERT_TRUE(c.ok());
    auto none = find_rank(*c);
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.status().message().find("set rank"), std::string::npos);
}

TEST(Config, FileThenFlagsOverride) {
    ConfFile f("# jobfs.conf\n"
               "data_dir = /from/file\n"
               "Chunk_Size=8M   # trailing comment\n"
               "\n"
               "daemons=n1:7000,n2:7000,n3:7000\n"
               "port=7000\n");
    auto c = parse({"--config", f.path(), "--port", "7100"});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->data_dir, "/from/file");
    EXPECT_EQ(c->chunk_size, 8u << 20);
    EXPECT_EQ(c->daemons.size(), 3u);
    EXPECT_EQ(c->port, 7100); // the flag wins over the file
}

TEST(Config, DirectIoFloorFromFileOrFlag) {
    auto d = parse({"--data-dir", "/d", "--daemons", "a:1"});
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_FALSE(d->direct_io);
    EXPECT_EQ(d->direct_io_min, 256u << 10);
    EXPECT_EQ(d->early_writeback_min, 256u << 10);
    ConfFile f("data_dir=/d\ndaemons=a:1\ndirect_io_min=1M\n");
    auto c = parse({"--config", f.path()});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->direct_io_min, 1u << 20);
    c = parse({"--config", f.path(), "--direct-io-min", "0"});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->direct_io_min, 0u);
    EXPECT_FALSE(parse({"--data-dir", "/d", "--daemons", "a:1", "--direct-io-min", "big"}).ok());
    ConfFile g("data_dir=/d\ndaemons=a:1\ndirect_io=true\nearly_writeback_min=0\n");
    c = parse({"--config", g.path()});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_TRUE(c->direct_io);
    EXPECT_EQ(c->early_writeback_min, 0u);
    EXPECT_FALSE(parse({"--data-dir", "/d", "--daemons", "a:1", "--early-writeback-min", "soon"}).ok());
}

TEST(Config, FileErrorsNameFileAndLine) {
    ConfFile f("data_dir=/x\nchunk_size=lots\n");
    auto c = parse({"--config", f.path()});
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), Code::invalid);
    EXPECT_NE(c.status().message().find(f.path() + ":2"), std::string::npos) << c.status().message();

    ConfFile g("data_dir=/x\nno_such_key=1\n");
    auto d = parse({"--config", g.path()});
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.status().message().find(":2"), std::string::npos) << d.status().message();
    EXPECT_NE(d.status().message().find("no-such-key"), std::string::npos) << d.status().message();

    ConfFile h("this line has no equals sign\n");
    EXPECT_EQ(parse({"--config", h.path()}).status().code(), Code::invalid);

    auto missing = parse({"--config", "/no/such/jobfs.conf"});
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().code(), Code::not_found);
}

TEST(Config, RefusesBadValues) {
    auto msg = [](std::vector<std::string> a) { return parse(std::move(a)).status().message(); };
    EXPECT_NE(msg({"--daemons", "a:1"}).find("data-dir"), std::string::npos);
    EXPECT_NE(msg({"--data-dir", "/d"}).find("daemons"), std::string::npos);
    EXPECT_NE(msg({"--data-dir", "/d", "--daemons", "a:1", "--replicas", "4"}).find("replicas"), std::string::npos);
    EXPECT_NE(msg({"--data-dir", "/d", "--daemons", "a:1", "--chunk-size", "100k"}).find("chunk-size"), std::string::npos);
    EXPECT_NE(msg({"--data-dir", "/d", "--daemons", "host:70000"}).find("bad port"), std::string::npos);
    EXPECT_NE(msg({"--data-dir", "/d", "--daemons", "a:1", "--rank", "3"}).find("rank"), std::string::npos);
    EXPECT_NE(msg({"--data-dir", "/d", "--bootstrap", "dns"}).find("bootstrap"), std::string::npos);
    EXPECT_EQ(parse({"--data-dir", "/d", "--daemons", "a:1", "--port", "99999"}).status().code(), Code::invalid);
    EXPECT_EQ(parse({"--bogus"}).status().code(), Code::invalid);
    EXPECT_NE(msg({"--data-dir", "/d", "--daemons", "a:1", "--nice", "-21"}).find("nice must be -20 to 19"), std::string::npos);
    EXPECT_NE(msg({"--data-dir", "/d", "--daemons", "a:1", "--nice", "20"}).find("nice must be -20 to 19"), std::string::npos);
    EXPECT_NE(msg({"--data-dir", "/d", "--daemons", "a:1", "--attr-lease-ms", "20001"}).find("attr-lease-ms must be 0 to 20000"),
              std::string::npos);
    EXPECT_NE(msg({"--data-dir", "/d", "--daemons", "a:1", "--attr-lease-ms", "-1"}).find("attr-lease-ms"), std::string::npos);
    auto ok = parse({"--data-dir", "/d", "--daemons", "a:1", "--attr-lease-ms", "0"});
    ASSERT_TRUE(ok.ok()) << ok.status().to_string();
    EXPECT_EQ(ok->attr_lease.count(), 0);
}

TEST(Config, NiceRunsTheDaemonAheadOfTheJobByDefault) {
    auto c = parse({"--data-dir", "/d", "--daemons", "a:1"});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->nice, -10);
    ConfFile f("nice = 3\n");
    auto d = parse({"--config", f.path(), "--data-dir", "/d", "--daemons", "a:1"});
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(d->nice, 3);
}

TEST(Config, PmixNeedsNoDaemonList) {
    auto c = parse({"--data-dir", "/d", "--bootstrap", "pmix"});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_TRUE(c->daemons.empty());
}

TEST(Config, PmixRefusesStaticSettingsAndStaticRefusesPortZero) {
    auto msg = [](std::vector<std::string> a) { return parse(std::move(a)).status().message(); };
    EXPECT_NE(msg({"--data-dir", "/d", "--bootstrap", "pmix", "--daemons", "a:1"}).find("daemons"), std::string::npos);
    EXPECT_NE(msg({"--data-dir", "/d", "--bootstrap", "pmix", "--rank", "0"}).find("rank"), std::string::npos);
    EXPECT_NE(msg({"--data-dir", "/d", "--daemons", "a:1", "--port", "0"}).find("port=0"), std::string::npos);
    auto c = parse({"--data-dir", "/d/%r", "--bootstrap", "pmix", "--port", "0", "--cluster-file", "/j/cluster"});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->port, 0);
    EXPECT_EQ(c->data_dir, "/d/%r"); // expanded once the rank is known
    EXPECT_EQ(c->cluster_file, "/j/cluster");
}

TEST(Config, ClusterFileFromConfFile) {
    ConfFile f("data_dir = /d\ndaemons = a:1\ncluster_file = /shared/job/cluster\n");
    auto c = parse({"--config", f.path()});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->cluster_file, "/shared/job/cluster");
}

TEST(Config, RankSubstitution) {
    EXPECT_EQ(expand_rank("/scratch/jobfs/%r", 7), "/scratch/jobfs/7");
    EXPECT_EQ(expand_rank("/d/r%r/x%r", 12), "/d/r12/x12");
    EXPECT_EQ(expand_rank("/d/100%%/%r", 0), "/d/100%/0");
    EXPECT_EQ(expand_rank("/d/%x/%", 3), "/d/%x/%"); // other '%' stay
    EXPECT_EQ(expand_rank("/plain", 3), "/plain");
}

TEST(Config, HelpListsEveryOption) {
    std::string help;
    std::vector<const char*> argv{"jobfsd", "--help"};
    auto c = parse_daemon_config(2, argv.data(), &help);
    ASSERT_TRUE(c.ok());
    for (const char* opt : {"--data-dir", "--chunk-size", "--replicas", "--daemons", "--secret-file", "--bootstrap", "--cluster-file", "--nice"})
        EXPECT_NE(help.find(opt), std::string::npos) << opt;
}

} // namespace
} // namespace jobfs::server
