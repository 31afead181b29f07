// jobfs_c.cc: the C API (jobfs.h) over the C++ Client.
//
// Every entry point checks its arguments, calls the Client and turns a failed Status into
// -errno, keeping the Status's message for jobfs_last_error() in a thread-local string. No
// exception crosses the C edge: each entry point runs inside guarded(), which maps
// std::bad_alloc to -ENOMEM and anything else to -EIO.
#include "client/jobfs.h"

#include <fcntl.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.h"

using jobfs::Code;
using jobfs::Status;
using jobfs::client::Client;

struct jobfs_fs {
    std::unique_ptr<Client> client;
    std::atomic<int> handles{0}; // open files and directories: disconnect waits for none
};

struct jobfs_file {
    jobfs_fs* fs = nullptr;
    std::unique_ptr<jobfs::client::File> file;
};

struct jobfs_dir {
    jobfs_fs* fs = nullptr;
    uint64_t ino = 0;
    std::string path;                     // for messages
    std::vector<jobfs::proto::DirEntry> page;
    size_t next = 0;                      // next entry of page to return
    bool more = true;                     // the daemon has entries after page
};

namespace {

thread_local std::string t_last_error;

constexpr size_t kMaxXattrValue = 65536; // as Linux's XATTR_SIZE_MAX, and the daemons' limit

// Keeps msg as this thread's last error; never throws (an unbuildable message leaves "").
void set_last_error(std::string_view a, std::string_view b = {}) noexcept {
    try {
        t_last_error.assign(a);
        t_last_error.append(b);
    } catch (...) {
        t_last_error.clear();
    }
}

// Records why a call failed and returns what the caller gets: -errno.
int fail(const Status& s) noexcept {
    if (s.message().empty()) set_last_error(jobfs::code_name(s.code()));
    else set_last_error(s.message());
    return -s.to_errno();
}

int fail(int err, const std::string& message) noexcept {
    set_last_error(message);
    return -err;
}

// Runs body, keeping exceptions on this side of the C edge (the handlers allocate nothing
// that could throw again).
template <class Body>
auto guarded(const char* op, Body&& body) noexcept -> decltype(body()) {
    try {
        return body();
    } catch (const std::bad_alloc&) {
        set_last_error(op, ": out of memory");
        return -ENOMEM;
    } catch (const std::exception& e) {
        set_last_error(op, ": unexpected error: ");
        try {
            t_last_error.append(e.what());
        } catch (...) {
        }
        return -EIO;
    } catch (...) {
        set_last_error(op, ": unexpected error");
        return -EIO;
    }
}

// 0, or -errno for a path the API refuses before asking anybody.
int check_path(const char* op, const char* path) {
    if (path == nullptr) return fail(EINVAL, std::string(op) + ": path is NULL");
    const size_t len = std::strlen(path);
    if (len >= PATH_MAX)
        return fail(ENAMETOOLONG, std::string(op) + ": path is " + std::to_string(len) + " bytes, " +
                                      std::to_string(PATH_MAX) + " at most with its NUL");
    if (path[0] != '/') return fail(EINVAL, std::string(op) + " " + path + ": path is not absolute");
    return 0;
}

#define JOBFS_CHECK_PATH(op, path)                   \
    do {                                             \
        if (int rc_ = check_path(op, path)) return rc_; \
    } while (0)

#define JOBFS_CHECK_ARG(cond, op, what)                                       \
    do {                                                                      \
        if (!(cond)) return fail(EINVAL, std::string(op) + ": " + (what));    \
    } while (0)

timespec to_timespec(int64_t ns) {
    int64_t sec = ns / 1000000000, rem = ns % 1000000000;
    if (rem < 0) { // floor division, so times before the epoch keep 0 <= tv_nsec < 1e9
        rem += 1000000000;
        --sec;
    }
    return timespec{static_cast<time_t>(sec), static_cast<long>(rem)};
}

void fill_stat(const jobfs::proto::Attr& a, struct stat* st) {
    std::memset(st, 0, sizeof *st);
    const mode_t type = a.type == JOBFS_TYPE_DIRECTORY ? S_IFDIR : a.type == JOBFS_TYPE_SYMLINK ? S_IFLNK : S_IFREG;
    st->st_ino = a.ino;
    st->st_mode = type | (a.mode & 07777);
    st->st_nlink = a.nlink;
    st->st_uid = a.uid;
    st->st_gid = a.gid;
    st->st_rdev = a.rdev;
    st->st_size = static_cast<off_t>(a.size);
    st->st_blksize = a.chunk_size ? a.chunk_size : 4096; // the best request size: a whole chunk
    st->st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
    st->st_atim = to_timespec(a.atime_ns);
    st->st_mtim = to_timespec(a.mtime_ns);
    st->st_ctim = to_timespec(a.ctime_ns);
}

int stat_path(jobfs_t* fs, const char* path, struct stat* st, bool follow) {
    const char* op = follow ? "stat" : "lstat";
    JOBFS_CHECK_ARG(fs && st, op, "NULL argument");
    JOBFS_CHECK_PATH(op, path);
    auto a = follow ? fs->client->stat(path) : fs->client->lstat(path);
    if (!a.ok()) return fail(a.status());
    fill_stat(*a, st);
    return 0;
}

int do_setattr(jobfs_t* fs, const char* op, const char* path, jobfs::proto::SetattrRequest set, bool follow) {
    JOBFS_CHECK_ARG(fs, op, "NULL connection");
    JOBFS_CHECK_PATH(op, path);
    auto r = fs->client->setattr(path, std::move(set), follow);
    return r.ok() ? 0 : fail(r.status().with_context(op));
}

} // namespace

extern "C" {

// ---- connection -----------------------------------------------------------------------------

int jobfs_connect(const char* cluster_file, jobfs_t** out) {
    return guarded("connect", [&]() -> int {
        JOBFS_CHECK_ARG(out, "connect", "out is NULL");
        *out = nullptr;
        auto info = cluster_file ? jobfs::client::read_cluster(cluster_file) : jobfs::client::read_cluster_from_env();
        if (!info.ok()) return fail(info.status());
        if (info->daemons.empty()) return fail(EINVAL, "connect: the cluster descriptor names no daemon");
        jobfs::client::ClientOptions options;
        // Tuning from the environment, so that programs need no change to use it.
        for (auto [var, unit] : {std::pair<const char*, int>{"JOBFS_WRITE_BEHIND_MIB", 0}, {"JOBFS_DIR_CACHE_MS", 1}}) {
            const char* v = std::getenv(var);
            if (!v || !*v) continue;
            char* end = nullptr;
            errno = 0;
            unsigned long long n = std::strtoull(v, &end, 10);
            if (errno || *end || n > (1ull << 20))
                return fail(EINVAL, std::string("connect: ") + var + "='" + v + "' is not a number from 0 to 1048576");
            if (unit == 0)
                options.write_behind_bytes = static_cast<size_t>(n) << 20;
            else
                options.dir_cache_ttl = std::chrono::milliseconds(n);
        }
        if (const char* v = std::getenv("JOBFS_ATTR_CACHE"); v && *v) {
            if (std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0)
                return fail(EINVAL, std::string("connect: JOBFS_ATTR_CACHE='") + v + "' is not 0 or 1");
            options.attr_cache = *v == '1';
        }
        if (const char* v = std::getenv("JOBFS_DIR_DELEGATION"); v && *v) {
            if (std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0)
                return fail(EINVAL, std::string("connect: JOBFS_DIR_DELEGATION='") + v + "' is not 0 or 1");
            options.dir_delegation = *v == '1';
        }
        auto c = Client::connect(*info, options);
        if (!c.ok()) return fail(c.status().with_context("connect"));
        auto fs = std::make_unique<jobfs_fs>();
        fs->client = std::move(*c);
        *out = fs.release();
        return 0;
    });
}

int jobfs_sync_namespace(jobfs_t* fs) {
    return guarded("sync_namespace", [&]() -> int {
        JOBFS_CHECK_ARG(fs, "sync_namespace", "NULL connection");
        Status s = fs->client->sync_namespace();
        return s.ok() ? 0 : fail(s);
    });
}

int jobfs_disconnect(jobfs_t* fs) {
    return guarded("disconnect", [&]() -> int {
        if (!fs) return 0;
        if (int n = fs->handles.load())
            return fail(EBUSY, "disconnect: " + std::to_string(n) + " files or directories are still open");
        delete fs;
        return 0;
    });
}

int jobfs_daemon_count(const jobfs_t* fs) {
    if (!fs) return fail(EINVAL, "daemon_count: NULL connection");
    return static_cast<int>(fs->client->daemon_count());
}

int jobfs_local_daemon_count(const jobfs_t* fs) {
    if (!fs) return fail(EINVAL, "local_daemon_count: NULL connection");
    return static_cast<int>(fs->client->io().local_daemon_count());
}

const char* jobfs_last_error(void) { return t_last_error.c_str(); }

// ---- files ----------------------------------------------------------------------------------

int jobfs_open(jobfs_t* fs, const char* path, int flags, mode_t mode, const jobfs_layout_t* hint,
               jobfs_file_t** out) {
    return guarded("open", [&]() -> int {
        JOBFS_CHECK_ARG(fs && out, "open", "NULL argument");
        *out = nullptr;
        JOBFS_CHECK_PATH("open", path);
        JOBFS_CHECK_ARG((flags & O_ACCMODE) != O_ACCMODE, std::string("open ") + path, "bad access mode in flags");
        const int known = O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC;
        jobfs::client::Layout layout{0, 0};
        if (hint) layout = jobfs::client::Layout{hint->chunk_size, hint->stripe_count};
        auto f = fs->client->open(path, flags & known, mode & 07777, layout);
        if (!f.ok()) return fail(f.status());
        auto h = std::make_unique<jobfs_file>();
        h->fs = fs;
        h->file = std::move(*f);
        ++fs->handles;
        *out = h.release();
        return 0;
    });
}

int jobfs_close(jobfs_file_t* f) {
    return guarded("close", [&]() -> int {
        if (!f) return 0;
        std::unique_ptr<jobfs_file> h(f);
        --h->fs->handles;
        Status s = h->fs->client->close(*h->file);
        return s.ok() ? 0 : fail(s.with_context("close"));
    });
}

ssize_t jobfs_pread(jobfs_file_t* f, void* buf, size_t count, uint64_t offset) {
    return guarded("pread", [&]() -> ssize_t {
        JOBFS_CHECK_ARG(f, "pread", "NULL file");
        JOBFS_CHECK_ARG(buf || count == 0, "pread", "NULL buffer");
        JOBFS_CHECK_ARG(count <= SSIZE_MAX, "pread", "count larger than SSIZE_MAX");
        auto n = f->fs->client->pread(*f->file, offset, {static_cast<uint8_t*>(buf), count});
        if (!n.ok()) return fail(n.status().with_context("pread"));
        return static_cast<ssize_t>(*n);
    });
}

ssize_t jobfs_pwrite(jobfs_file_t* f, const void* buf, size_t count, uint64_t offset) {
    return guarded("pwrite", [&]() -> ssize_t {
        JOBFS_CHECK_ARG(f, "pwrite", "NULL file");
        JOBFS_CHECK_ARG(buf || count == 0, "pwrite", "NULL buffer");
        JOBFS_CHECK_ARG(count <= SSIZE_MAX, "pwrite", "count larger than SSIZE_MAX");
        if (offset > uint64_t(INT64_MAX) || count > uint64_t(INT64_MAX) - offset)
            return fail(EFBIG, "pwrite: offset " + std::to_string(offset) + " + " + std::to_string(count) +
                                   " passes the largest file size");
        Status s = f->fs->client->pwrite(*f->file, offset, {static_cast<const uint8_t*>(buf), count});
        if (!s.ok()) return fail(s.with_context("pwrite"));
        return static_cast<ssize_t>(count);
    });
}

ssize_t jobfs_append(jobfs_file_t* f, const void* buf, size_t count, uint64_t* offset) {
    return guarded("append", [&]() -> ssize_t {
        JOBFS_CHECK_ARG(f, "append", "NULL file");
        JOBFS_CHECK_ARG(buf || count == 0, "append", "NULL buffer");
        JOBFS_CHECK_ARG(count <= SSIZE_MAX, "append", "count larger than SSIZE_MAX");
        auto at = f->fs->client->append(*f->file, {static_cast<const uint8_t*>(buf), count});
        if (!at.ok()) return fail(at.status().with_context("append"));
        if (offset) *offset = *at;
        return static_cast<ssize_t>(count);
    });
}

int jobfs_fsync(jobfs_file_t* f) {
    return guarded("fsync", [&]() -> int {
        JOBFS_CHECK_ARG(f, "fsync", "NULL file");
        Status s = f->fs->client->fsync(*f->file);
        return s.ok() ? 0 : fail(s.with_context("fsync"));
    });
}

int jobfs_flush(jobfs_file_t* f) {
    return guarded("flush", [&]() -> int {
        JOBFS_CHECK_ARG(f, "flush", "NULL file");
        Status s = f->fs->client->flush(*f->file);
        return s.ok() ? 0 : fail(s.with_context("flush"));
    });
}

int jobfs_fstat(jobfs_file_t* f, struct stat* st) {
    return guarded("fstat", [&]() -> int {
        JOBFS_CHECK_ARG(f && st, "fstat", "NULL argument");
        auto a = f->fs->client->fstat(*f->file);
        if (!a.ok()) return fail(a.status());
        fill_stat(*a, st);
        return 0;
    });
}

int jobfs_ftruncate(jobfs_file_t* f, uint64_t size) {
    return guarded("ftruncate", [&]() -> int {
        JOBFS_CHECK_ARG(f, "ftruncate", "NULL file");
        if (size > uint64_t(INT64_MAX)) return fail(EFBIG, "ftruncate: size " + std::to_string(size) + " too large");
        Status s = f->fs->client->ftruncate(*f->file, size);
        return s.ok() ? 0 : fail(s);
    });
}

int jobfs_file_get_size(jobfs_file_t* f, uint64_t* size) {
    return guarded("file_get_size", [&]() -> int {
        JOBFS_CHECK_ARG(f && size, "file_get_size", "NULL argument");
        auto a = f->fs->client->fstat(*f->file);
        if (!a.ok()) return fail(a.status());
        *size = a->size;
        return 0;
    });
}

int jobfs_file_get_layout(const jobfs_file_t* f, jobfs_layout_t* layout) {
    return guarded("file_get_layout", [&]() -> int {
        JOBFS_CHECK_ARG(f && layout, "file_get_layout", "NULL argument");
        const jobfs::client::Layout& l = f->fs->client->layout(*f->file);
        layout->chunk_size = static_cast<uint32_t>(l.chunk_size);
        layout->stripe_count = jobfs::client::stripe_width(l, f->fs->client->daemon_count());
        return 0;
    });
}

// ---- namespace ------------------------------------------------------------------------------

int jobfs_stat(jobfs_t* fs, const char* path, struct stat* st) {
    return guarded("stat", [&] { return stat_path(fs, path, st, true); });
}

int jobfs_lstat(jobfs_t* fs, const char* path, struct stat* st) {
    return guarded("lstat", [&] { return stat_path(fs, path, st, false); });
}

int jobfs_mkdir(jobfs_t* fs, const char* path, mode_t mode) {
    return guarded("mkdir", [&]() -> int {
        JOBFS_CHECK_ARG(fs, "mkdir", "NULL connection");
        JOBFS_CHECK_PATH("mkdir", path);
        auto a = fs->client->mkdir(path, mode & 07777);
        return a.ok() ? 0 : fail(a.status());
    });
}

int jobfs_rmdir(jobfs_t* fs, const char* path) {
    return guarded("rmdir", [&]() -> int {
        JOBFS_CHECK_ARG(fs, "rmdir", "NULL connection");
        JOBFS_CHECK_PATH("rmdir", path);
        Status s = fs->client->rmdir(path);
        return s.ok() ? 0 : fail(s);
    });
}

int jobfs_unlink(jobfs_t* fs, const char* path) {
    return guarded("unlink", [&]() -> int {
        JOBFS_CHECK_ARG(fs, "unlink", "NULL connection");
        JOBFS_CHECK_PATH("unlink", path);
        Status s = fs->client->unlink(path);
        return s.ok() ? 0 : fail(s);
    });
}

int jobfs_rename(jobfs_t* fs, const char* from, const char* to, unsigned int flags) {
    return guarded("rename", [&]() -> int {
        JOBFS_CHECK_ARG(fs, "rename", "NULL connection");
        JOBFS_CHECK_PATH("rename", from);
        JOBFS_CHECK_PATH("rename", to);
        JOBFS_CHECK_ARG(flags == 0 || flags == JOBFS_RENAME_NOREPLACE || flags == JOBFS_RENAME_EXCHANGE, "rename",
                        "bad flags " + std::to_string(flags));
        Status s = fs->client->rename(from, to, flags);
        return s.ok() ? 0 : fail(s);
    });
}

int jobfs_truncate(jobfs_t* fs, const char* path, uint64_t size) {
    return guarded("truncate", [&]() -> int {
        JOBFS_CHECK_ARG(fs, "truncate", "NULL connection");
        JOBFS_CHECK_PATH("truncate", path);
        if (size > uint64_t(INT64_MAX)) return fail(EFBIG, "truncate: size " + std::to_string(size) + " too large");
        Status s = fs->client->truncate(path, size);
        return s.ok() ? 0 : fail(s);
    });
}

int jobfs_symlink(jobfs_t* fs, const char* target, const char* path) {
    return guarded("symlink", [&]() -> int {
        JOBFS_CHECK_ARG(fs && target, "symlink", "NULL argument");
        JOBFS_CHECK_ARG(*target, "symlink", "empty target");
        JOBFS_CHECK_PATH("symlink", path);
        auto a = fs->client->symlink(target, path);
        return a.ok() ? 0 : fail(a.status());
    });
}

ssize_t jobfs_readlink(jobfs_t* fs, const char* path, char* buf, size_t size) {
    return guarded("readlink", [&]() -> ssize_t {
        JOBFS_CHECK_ARG(fs && (buf || size == 0), "readlink", "NULL argument");
        JOBFS_CHECK_PATH("readlink", path);
        auto t = fs->client->readlink(path);
        if (!t.ok()) return fail(t.status());
        if (size == 0) return static_cast<ssize_t>(t->size());
        if (t->size() + 1 > size)
            return fail(ERANGE, std::string("readlink ") + path + ": target is " + std::to_string(t->size()) +
                                    " bytes, the buffer holds " + std::to_string(size) + " with the NUL");
        std::memcpy(buf, t->data(), t->size());
        buf[t->size()] = '\0';
        return static_cast<ssize_t>(t->size());
    });
}

int jobfs_link(jobfs_t* fs, const char* existing, const char* path) {
    return guarded("link", [&]() -> int {
        JOBFS_CHECK_ARG(fs, "link", "NULL connection");
        JOBFS_CHECK_PATH("link", existing);
        JOBFS_CHECK_PATH("link", path);
        auto a = fs->client->link(existing, path);
        return a.ok() ? 0 : fail(a.status());
    });
}

int jobfs_chmod(jobfs_t* fs, const char* path, mode_t mode) {
    return guarded("chmod", [&]() -> int {
        JOBFS_CHECK_ARG((mode & ~mode_t(07777)) == 0, "chmod", "mode has bits beyond 07777");
        jobfs::proto::SetattrRequest set;
        set.mode = mode;
        return do_setattr(fs, "chmod", path, std::move(set), true);
    });
}

int jobfs_chown(jobfs_t* fs, const char* path, uid_t uid, gid_t gid, int nofollow) {
    return guarded("chown", [&]() -> int {
        jobfs::proto::SetattrRequest set;
        if (uid != static_cast<uid_t>(-1)) set.uid = uid;
        if (gid != static_cast<gid_t>(-1)) set.gid = gid;
        return do_setattr(fs, nofollow ? "lchown" : "chown", path, std::move(set), !nofollow);
    });
}

int jobfs_utimens(jobfs_t* fs, const char* path, int64_t atime_ns, int64_t mtime_ns) {
    return guarded("utimens", [&]() -> int {
        jobfs::proto::SetattrRequest set;
        if (atime_ns == JOBFS_UTIME_NOW) set.atime_now = true;
        else if (atime_ns != JOBFS_UTIME_OMIT) set.atime_ns = atime_ns;
        if (mtime_ns == JOBFS_UTIME_NOW) set.mtime_now = true;
        else if (mtime_ns != JOBFS_UTIME_OMIT) set.mtime_ns = mtime_ns;
        return do_setattr(fs, "utimens", path, std::move(set), true);
    });
}

// ---- directories ----------------------------------------------------------------------------

int jobfs_opendir(jobfs_t* fs, const char* path, jobfs_dir_t** out) {
    return guarded("opendir", [&]() -> int {
        JOBFS_CHECK_ARG(fs && out, "opendir", "NULL argument");
        *out = nullptr;
        JOBFS_CHECK_PATH("opendir", path);
        auto a = fs->client->stat(path);
        if (!a.ok()) return fail(a.status().with_context("opendir"));
        if (a->type != JOBFS_TYPE_DIRECTORY) return fail(ENOTDIR, std::string("opendir ") + path + ": not a directory");
        auto d = std::make_unique<jobfs_dir>();
        d->fs = fs;
        d->ino = a->ino;
        d->path = path;
        ++fs->handles;
        *out = d.release();
        return 0;
    });
}

int jobfs_readdir(jobfs_dir_t* dir, jobfs_dirent_t* entry) {
    return guarded("readdir", [&]() -> int {
        JOBFS_CHECK_ARG(dir && entry, "readdir", "NULL argument");
        if (dir->next == dir->page.size()) {
            if (!dir->more) return 0;
            const std::string after = dir->page.empty() ? std::string() : dir->page.back().name;
            auto p = dir->fs->client->readdir(dir->ino, after);
            if (!p.ok()) return fail(p.status().with_context("readdir " + dir->path));
            dir->page = std::move(p->entries);
            dir->next = 0;
            dir->more = p->more && !dir->page.empty();
            if (dir->page.empty()) return 0;
        }
        const jobfs::proto::DirEntry& e = dir->page[dir->next++];
        entry->ino = e.ino;
        entry->type = e.type;
        const size_t n = std::min(e.name.size(), sizeof entry->name - 1); // names are at most 255 bytes
        std::memcpy(entry->name, e.name.data(), n);
        entry->name[n] = '\0';
        return 1;
    });
}

int jobfs_closedir(jobfs_dir_t* dir) {
    if (!dir) return 0;
    --dir->fs->handles;
    delete dir;
    return 0;
}

// ---- extended attributes --------------------------------------------------------------------

ssize_t jobfs_getxattr(jobfs_t* fs, const char* path, const char* name, void* value, size_t size) {
    return guarded("getxattr", [&]() -> ssize_t {
        JOBFS_CHECK_ARG(fs && name && (value || size == 0), "getxattr", "NULL argument");
        JOBFS_CHECK_PATH("getxattr", path);
        auto v = fs->client->getxattr(path, name);
        if (!v.ok()) return fail(v.status());
        if (size == 0) return static_cast<ssize_t>(v->size());
        if (v->size() > size)
            return fail(ERANGE, std::string("getxattr ") + name + " of " + path + ": value is " +
                                    std::to_string(v->size()) + " bytes, the buffer " + std::to_string(size));
        std::memcpy(value, v->data(), v->size());
        return static_cast<ssize_t>(v->size());
    });
}

int jobfs_setxattr(jobfs_t* fs, const char* path, const char* name, const void* value, size_t size, int flags) {
    return guarded("setxattr", [&]() -> int {
        JOBFS_CHECK_ARG(fs && name && (value || size == 0), "setxattr", "NULL argument");
        JOBFS_CHECK_PATH("setxattr", path);
        JOBFS_CHECK_ARG(flags == 0 || flags == JOBFS_XATTR_CREATE || flags == JOBFS_XATTR_REPLACE, "setxattr",
                        "bad flags " + std::to_string(flags));
        if (size > kMaxXattrValue)
            return fail(E2BIG, std::string("setxattr ") + name + " of " + path + ": value of " + std::to_string(size) +
                                   " bytes, more than " + std::to_string(kMaxXattrValue));
        std::string v(static_cast<const char*>(value), size);
        Status s = fs->client->setxattr(path, name, v, flags);
        return s.ok() ? 0 : fail(s);
    });
}

ssize_t jobfs_listxattr(jobfs_t* fs, const char* path, char* list, size_t size) {
    return guarded("listxattr", [&]() -> ssize_t {
        JOBFS_CHECK_ARG(fs && (list || size == 0), "listxattr", "NULL argument");
        JOBFS_CHECK_PATH("listxattr", path);
        auto names = fs->client->listxattr(path);
        if (!names.ok()) return fail(names.status());
        size_t need = 0;
        for (const std::string& n : *names) need += n.size() + 1;
        if (size == 0) return static_cast<ssize_t>(need);
        if (need > size)
            return fail(ERANGE, std::string("listxattr ") + path + ": the names take " + std::to_string(need) +
                                    " bytes, the buffer " + std::to_string(size));
        char* p = list;
        for (const std::string& n : *names) {
            std::memcpy(p, n.c_str(), n.size() + 1);
            p += n.size() + 1;
        }
        return static_cast<ssize_t>(need);
    });
}

int jobfs_removexattr(jobfs_t* fs, const char* path, const char* name) {
    return guarded("removexattr", [&]() -> int {
        JOBFS_CHECK_ARG(fs && name, "removexattr", "NULL argument");
        JOBFS_CHECK_PATH("removexattr", path);
        Status s = fs->client->removexattr(path, name);
        return s.ok() ? 0 : fail(s);
    });
}

// ---- layout ---------------------------------------------------------------------------------

int jobfs_layout_get(jobfs_t* fs, const char* path, jobfs_layout_t* layout) {
    return guarded("layout_get", [&]() -> int {
        JOBFS_CHECK_ARG(fs && layout, "layout_get", "NULL argument");
        JOBFS_CHECK_PATH("layout_get", path);
        auto a = fs->client->stat(path);
        if (!a.ok()) return fail(a.status());
        layout->chunk_size = a->chunk_size;
        layout->stripe_count = a->stripe_count;
        return 0;
    });
}

int jobfs_layout_set(jobfs_t* fs, const char* path, const jobfs_layout_t* layout) {
    return guarded("layout_set", [&]() -> int {
        JOBFS_CHECK_ARG(fs && layout, "layout_set", "NULL argument");
        JOBFS_CHECK_PATH("layout_set", path);
        auto a = fs->client->set_layout(path, jobfs::client::Layout{layout->chunk_size, layout->stripe_count});
        return a.ok() ? 0 : fail(a.status());
    });
}

} // extern "C"
