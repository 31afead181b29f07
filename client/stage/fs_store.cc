// fs_store.cc: FileStore over POSIX and over libjobfs.
#include "client/stage/fs_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>

#include "client/client.h"
#include "client/stage/paths.h"

namespace jobfs::stage {
namespace {

// A temporary name in the target's directory, so the final rename stays in one directory.
std::string temp_name(const std::string& path) {
    thread_local std::mt19937_64 rng(std::random_device{}());
    char tag[24];
    std::snprintf(tag, sizeof tag, "%016llx", static_cast<unsigned long long>(rng()));
    return dir_prefix_of(path) + ".jobfs-stage." + tag + "." + basename_of(path).substr(0, 100);
}

// ---- POSIX -------------------------------------------------------------------------------

class LocalWrite : public WriteHandle {
public:
    LocalWrite(int fd, std::string tmp, std::string final, std::string etag)
        : fd_(fd), tmp_(std::move(tmp)), final_(std::move(final)), etag_(std::move(etag)) {}
    ~LocalWrite() override { discard(); }
    Status pwrite(uint64_t offset, std::span<const uint8_t> data) override {
        size_t done = 0;
        while (done < data.size()) {
            ssize_t n = ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
            if (n < 0) {
                if (errno == EINTR) continue;
                return Status::from_errno(errno, "write " + tmp_);
            }
            done += static_cast<size_t>(n);
        }
        return Status::OK();
    }
    Status commit() override {
        // A file system without user xattrs only loses resume (the file is copied again).
        if (!etag_.empty()) (void)fsetxattr(fd_, kEtagXattr, etag_.data(), etag_.size(), 0);
        if (::close(fd_) != 0) {
            fd_ = -1;
            return Status::from_errno(errno, "close " + tmp_);
        }
        fd_ = -1;
        if (::rename(tmp_.c_str(), final_.c_str()) != 0) return Status::from_errno(errno, "rename " + tmp_ + " to " + final_);
        tmp_.clear();
        return Status::OK();
    }
    void discard() override {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        if (!tmp_.empty()) ::unlink(tmp_.c_str());
        tmp_.clear();
    }

private:
    int fd_;
    std::string tmp_, final_, etag_;
};

class LocalRead : public ReadHandle {
public:
    explicit LocalRead(int fd) : fd_(fd) {}
    ~LocalRead() override { ::close(fd_); }
    Result<size_t> pread(uint64_t offset, std::span<uint8_t> out) override {
        size_t done = 0;
        while (done < out.size()) {
            ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return Status::from_errno(errno, "read");
            if (n == 0) break;
            done += static_cast<size_t>(n);
        }
        return done;
    }

private:
    int fd_;
};

class LocalStore : public FileStore {
public:
    std::string display(const std::string& path) const override { return path; }
    Result<FileInfo> stat(const std::string& path) override {
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) return Status::from_errno(errno, "stat " + path);
        return FileInfo{"", static_cast<uint64_t>(st.st_size), st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
                        S_ISDIR(st.st_mode)};
    }
    Result<std::vector<FileInfo>> list_files(const std::string& dir) override {
        std::vector<FileInfo> out;
        JOBFS_RETURN_IF_ERROR(walk(dir, "", out));
        return out;
    }
    Status mkdirs(const std::string& dir) override {
        if (dir.empty() || dir == "/" || dir == ".") return Status::OK();
        struct stat st {};
        if (::stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? Status::OK() : Status(Code::not_dir, dir + " is not a directory");
        JOBFS_RETURN_IF_ERROR(mkdirs(dirname_of(dir)));
        if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Status::from_errno(errno, "mkdir " + dir);
        return Status::OK();
    }
    Result<std::vector<std::string>> names(const std::string& dir) override {
        std::vector<std::string> out;
        DIR* d = ::opendir(dir.c_str());
        if (!d) {
            if (errno == ENOENT) return out;
            return Status::from_errno(errno, "opendir " + dir);
        }
        while (dirent* e = ::readdir(d)) out.emplace_back(e->d_name);
        ::closedir(d);
        return out;
    }
    std::string recorded_etag(const std::string& path) override {
        char buf[256];
        ssize_t n = ::getxattr(path.c_str(), kEtagXattr, buf, sizeof buf);
        return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    }
    Result<std::unique_ptr<WriteHandle>> create(const std::string& path, uint64_t, const std::string& etag) override {
        const std::string tmp = temp_name(path);
        int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) return Status::from_errno(errno, "create " + tmp);
        return std::unique_ptr<WriteHandle>(new LocalWrite(fd, tmp, path, etag));
    }
    Result<std::unique_ptr<ReadHandle>> open(const std::string& path) override {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return Status::from_errno(errno, "open " + path);
        return std::unique_ptr<ReadHandle>(new LocalRead(fd));
    }

private:
    Status walk(const std::string& dir, const std::string& rel, std::vector<FileInfo>& out) {
        DIR* d = ::opendir(dir.c_str());
        if (!d) return Status::from_errno(errno, "opendir " + dir);
        while (dirent* e = ::readdir(d)) {
            const std::string name = e->d_name;
            if (name == "." || name == "..") continue;
            const std::string full = dir + "/" + name, r = rel.empty() ? name : rel + "/" + name;
            struct stat st {};
            if (::lstat(full.c_str(), &st) != 0) continue;  // gone meanwhile
            if (S_ISDIR(st.st_mode)) {
                Status s = walk(full, r, out);
                if (!s.ok()) {
                    ::closedir(d);
                    return s;
                }
            } else if (S_ISREG(st.st_mode)) {
                out.push_back({r, static_cast<uint64_t>(st.st_size), st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec, false});
            }
        }
        ::closedir(d);
        return Status::OK();
    }
};

// ---- jobfs -------------------------------------------------------------------------------

// Files written whole under temporary names, waiting to be renamed into place: by directory,
// kBatch to a request (Client::rename_in_dir) instead of one request each. Stage-in of small
// objects made three requests per object (create, write, rename); the rename's share goes.
// The files are visible under their temporary names meanwhile, as while they are written.
class RenameBatches {
public:
    static constexpr size_t kBatch = 32;
    explicit RenameBatches(client::Client& c) : c_(c) {}
    ~RenameBatches() { flush(); }
    // tmp and final in the same directory; done(outcome) runs once the batch went.
    void add(const std::string& tmp, const std::string& final, std::function<void(Status)> done) {
        const std::string dir = dirname_of(final);
        std::vector<Pending> full;
        {
            std::lock_guard lk(mu_);
            auto& v = by_dir_[dir];
            v.push_back(Pending{basename_of(tmp), basename_of(final), std::move(done)});
            if (v.size() < kBatch) return;
            full.swap(v);
            by_dir_.erase(dir);
        }
        send(dir, full);
    }
    void flush() {
        std::map<std::string, std::vector<Pending>> all;
        {
            std::lock_guard lk(mu_);
            all.swap(by_dir_);
        }
        for (auto& [dir, v] : all) send(dir, v);
    }

private:
    struct Pending {
        std::string tmp, final;  // names in the directory
        std::function<void(Status)> done;
    };
    void send(const std::string& dir, std::vector<Pending>& batch) {
        std::vector<std::pair<std::string, std::string>> names;
        for (const auto& p : batch) names.emplace_back(p.tmp, p.final);
        auto r = c_.rename_in_dir(dir, names);
        const std::string slash = dir == "/" ? "/" : dir + "/";
        for (size_t i = 0; i < batch.size(); ++i) {
            Status s = r.ok() ? (*r)[i] : r.status();
            if (!s.ok()) {
                s = s.with_context("rename jobfs:" + slash + batch[i].tmp);
                (void)c_.unlink(slash + batch[i].tmp);
            }
            batch[i].done(s);
        }
    }
    client::Client& c_;
    std::mutex mu_;
    std::map<std::string, std::vector<Pending>> by_dir_;
};

class JobfsWrite : public WriteHandle {
public:
    JobfsWrite(client::Client& c, RenameBatches& batches, std::unique_ptr<client::File> f, std::string tmp,
               std::string final)
        : c_(c), batches_(batches), f_(std::move(f)), tmp_(std::move(tmp)), final_(std::move(final)) {}
    ~JobfsWrite() override { discard(); }
    Status pwrite(uint64_t offset, std::span<const uint8_t> data) override {
        Status s = c_.pwrite(*f_, offset, data);
        return s.ok() ? s : s.with_context("write jobfs:" + tmp_);
    }
    Status commit() override {
        // The size and ETag came with the create: the close settles nothing, one call less
        // per object, and the rename is the only metadata call after the data.
        Status s = c_.close(*f_);
        if (!s.ok()) return s.with_context("close jobfs:" + tmp_);
        s = c_.rename(tmp_, final_);
        if (!s.ok()) return s.with_context("rename jobfs:" + tmp_);
        tmp_.clear();
        // In place at the daemons before it counts as done (a rename in a delegated directory
        // is queued until then).
        s = c_.sync_namespace();
        return s.ok() ? s : s.with_context("put jobfs:" + final_ + " in place");
    }
    void commit_later(std::function<void(Status)> done) override {
        Status s = c_.close(*f_);
        if (!s.ok()) {
            discard();
            return done(s.with_context("close jobfs:" + tmp_));
        }
        batches_.add(tmp_, final_, std::move(done));
        tmp_.clear();
    }
    void discard() override {
        if (tmp_.empty()) return;
        (void)c_.close(*f_);
        (void)c_.unlink(tmp_);
        tmp_.clear();
    }

private:
    client::Client& c_;
    RenameBatches& batches_;
    std::unique_ptr<client::File> f_;
    std::string tmp_, final_;
};

class JobfsRead : public ReadHandle {
public:
    JobfsRead(client::Client& c, std::unique_ptr<client::File> f) : c_(c), f_(std::move(f)) {}
    ~JobfsRead() override { (void)c_.close(*f_); }
    Result<size_t> pread(uint64_t offset, std::span<uint8_t> out) override {
        size_t done = 0;
        while (done < out.size()) {
            auto n = c_.pread(*f_, offset + done, out.subspan(done));
            if (!n.ok()) return n.status();
            if (*n == 0) break;
            done += *n;
        }
        return done;
    }

private:
    client::Client& c_;
    std::unique_ptr<client::File> f_;
};

class JobfsStore : public FileStore {
public:
    explicit JobfsStore(std::unique_ptr<client::Client> c) : c_(std::move(c)), batches_(*c_) {}
    std::string display(const std::string& path) const override { return "jobfs:" + path; }
    Result<FileInfo> stat(const std::string& path) override {
        auto a = c_->stat(path);
        if (!a.ok()) return a.status();
        return FileInfo{"", a->size, a->mtime_ns, a->type == 2};
    }
    Result<std::vector<FileInfo>> list_files(const std::string& dir) override {
        std::vector<FileInfo> out;
        JOBFS_RETURN_IF_ERROR(walk(dir, "", out));
        return out;
    }
    Status mkdirs(const std::string& dir) override {
        if (dir.empty() || dir == "/") return Status::OK();
        auto a = c_->stat(dir);
        if (a.ok()) return a->type == 2 ? Status::OK() : Status(Code::not_dir, "jobfs:" + dir + " is not a directory");
        JOBFS_RETURN_IF_ERROR(mkdirs(dirname_of(dir)));
        auto m = c_->mkdir(dir);
        if (!m.ok() && m.status().code() != Code::exists) return m.status();
        return Status::OK();
    }
    Result<std::vector<std::string>> names(const std::string& dir) override {
        std::vector<std::string> out;
        auto entries = c_->list(dir);
        if (!entries.ok()) {
            if (entries.status().code() == Code::not_found) return out;
            return entries.status();
        }
        for (auto& e : *entries) out.push_back(std::move(e.name));
        return out;
    }
    std::string recorded_etag(const std::string& path) override {
        auto v = c_->getxattr(path, kEtagXattr);
        return v.ok() ? *v : "";
    }
    Result<std::unique_ptr<WriteHandle>> create(const std::string& path, uint64_t size, const std::string& etag) override {
        const std::string tmp = temp_name(path);
        client::NewFile init{size, {}};
        if (!etag.empty()) init.xattrs.emplace_back(kEtagXattr, etag);
        auto f = c_->create(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644, init);
        if (!f.ok()) return f.status();
        return std::unique_ptr<WriteHandle>(new JobfsWrite(*c_, batches_, std::move(*f), tmp, path));
    }
    Status flush_commits() override {
        batches_.flush();
        return c_->sync_namespace();
    }
    Result<std::unique_ptr<ReadHandle>> open(const std::string& path) override {
        auto f = c_->open(path, O_RDONLY);
        if (!f.ok()) return f.status();
        return std::unique_ptr<ReadHandle>(new JobfsRead(*c_, std::move(*f)));
    }

private:
    Status walk(const std::string& dir, const std::string& rel, std::vector<FileInfo>& out) {
        auto entries = c_->list(dir);
        if (!entries.ok()) return entries.status();
        for (const auto& e : *entries) {
            const std::string full = (dir == "/" ? "" : dir) + "/" + e.name, r = rel.empty() ? e.name : rel + "/" + e.name;
            if (e.type == 2) {
                JOBFS_RETURN_IF_ERROR(walk(full, r, out));
            } else if (e.type == 1) {
                auto a = c_->stat(full);
                if (!a.ok()) continue;  // gone meanwhile
                out.push_back({r, a->size, a->mtime_ns, false});
            }
        }
        return Status::OK();
    }

    std::unique_ptr<client::Client> c_;
    RenameBatches batches_;  // after c_: flushed (destroyed) before the client goes
};

} // namespace

Status FileStore::write_file(const std::string& path, const std::string& data) {
    auto w = create(path, data.size(), "");
    if (!w.ok()) return w.status();
    JOBFS_RETURN_IF_ERROR((*w)->pwrite(0, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size())));
    return (*w)->commit();
}

std::unique_ptr<FileStore> fs_store_local() { return std::make_unique<LocalStore>(); }

Result<std::unique_ptr<FileStore>> fs_store_jobfs() {
    auto c = client::Client::connect_env();
    if (!c.ok()) return c.status();
    return std::unique_ptr<FileStore>(new JobfsStore(std::move(*c)));
}

} // namespace jobfs::stage
