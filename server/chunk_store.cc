// chunk_store.cc: chunk files with per-block CRC32C. See chunk_store.h for the guarantees.
//
// On disk, chunk (ino, index) is one file:
//   <data_dir>/chunks/<ino % 256 as 2 hex>/<ino as 16 hex>.<index as 8 hex>
// holding its checksums in [0, kDataOffset) and its data from kDataOffset on, so the file's
// length is kDataOffset + the chunk's length (or 0 for a chunk created but never written).
// The checksums are one 8-byte entry per 64 KiB block: the CRC32C of the block's bytes (up to
// the chunk's length) and a word that is 1 once the block has been written. A block never
// written is a hole and reads as zeros without a check. (The checksums were a second file
// once: two inodes per chunk. Creating them is dear on ext4 without a journal, which scans
// past recently deleted inodes at every creation: docs/design.md, "ChunkStore".)
#include "server/chunk_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <isa-l/crc.h>

#include <algorithm>
#include <atomic>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <list>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "file_util.h"
#include "local_read_socket.h"
#include "log.h"
#include "server/chunk_stamps.h"
#include "server/crc_table_cache.h"

namespace jobfs::server {
namespace {

constexpr uint32_t kBlock = ChunkStore::kBlockSize;
constexpr uint64_t kData = ChunkStore::kDataOffset;
constexpr size_t kLockStripes = 64;

// The chunk a file of the store holds, from its name "<16 hex digits of the inode>.<8 of the
// index>" (Impl::path); nothing for anything else.
std::optional<ChunkId> chunk_of_name(const char* name) {
    if (std::strlen(name) != 25 || name[16] != '.') return std::nullopt;
    char* end = nullptr;
    const uint64_t ino = std::strtoull(name, &end, 16);
    if (end != name + 16) return std::nullopt;
    const uint64_t index = std::strtoull(name + 17, &end, 16);
    if (*end != '\0') return std::nullopt;
    return ChunkId{ino, index};
}

// Calls fn(name) for every entry of directory `dir` (none if it does not exist); an error fn
// returns ends the walk.
template <class Fn>
Status for_each_name_in(const std::string& dir, Fn fn) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return errno == ENOENT ? Status::OK() : Status::from_errno(errno, "list " + dir);
    Status s;
    while (dirent* e = ::readdir(d))
        if (!(s = fn(static_cast<const char*>(e->d_name))).ok()) break;
    ::closedir(d);
    return s;
}

// Calls fn(ChunkId) for every chunk file in directory `dir` (none if it does not exist).
template <class Fn>
Status for_each_chunk_in(const std::string& dir, Fn fn) {
    return for_each_name_in(dir, [&](const char* name) {
        if (auto id = chunk_of_name(name)) fn(*id);
        return Status::OK();
    });
}
// What layout the chunks of a store's directory have, written there at its first open: a
// daemon of another version refuses the directory rather than reading chunks it would take for
// corrupt (every block would fail its checksum).
constexpr char kLayoutFile[] = "/.layout";
constexpr char kLayoutMark[] = "jobfs chunk layout 3: one file per chunk, CRC32C entries, the bytes from 2 MiB on\n";

// A shortened chunk is written under its name plus this, then renamed over it (truncate).
// chunk_of_name does not take such a name for a chunk.
constexpr char kShortenedSuffix[] = ".shortened";

constexpr size_t kMaxOpenChunks = 256;
// O_DIRECT's alignment of offset, length and memory (the page size covers every block size).
constexpr size_t kDirectAlign = 4096;

// Every block of the largest chunk (ChunkStore::open checks 1 GiB) has its entry before the data.
static_assert((1ull << 30) / ChunkStore::kBlockSize * sizeof(CrcEntry) <= ChunkStore::kDataOffset);
static_assert(ChunkStore::kDataOffset % kDirectAlign == 0);

uint32_t crc32c(const uint8_t* p, size_t n) {
    return crc32_iscsi(const_cast<unsigned char*>(p), static_cast<int>(n), 0);
}

Status errno_status(const std::string& what) { return Status::from_errno(errno, what); }

// pread/pwrite until done: regular files may return short counts on signals.
bool pread_all(int fd, uint8_t* p, size_t n, off_t off, size_t* got) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = ::pread(fd, p + done, n - done, off + static_cast<off_t>(done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return false;
        if (r == 0) break;
        done += static_cast<size_t>(r);
    }
    *got = done;
    return true;
}

bool pwrite_all(int fd, const uint8_t* p, size_t n, off_t off) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = ::pwrite(fd, p + done, n - done, off + static_cast<off_t>(done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        done += static_cast<size_t>(r);
    }
    return true;
}

} // namespace

struct ChunkStore::Impl {
    std::string dir; // <data_dir>/chunks
    std::unique_ptr<ChunkStamps> stamps; // null: none could be made (readers then ask every time)
    uint64_t chunk_size = 0;
    std::atomic<bool> direct{false};       // write aligned pieces with O_DIRECT (ChunkStore::open)
    uint64_t direct_min = 0;               // ... of at least this many bytes
    uint64_t writeback_min = 0;            // start writeback of buffered pieces this large (0: never)
    std::atomic<uint64_t> direct_writes{0};
    std::array<std::mutex, kLockStripes> locks;

    // Open chunk files, most recently used first. Guarded by cache_mu; an entry's fds are used
    // only under that chunk's stripe lock, and closed only when evicted under cache_mu while no
    // user holds it (users take a reference).
    struct Open {
        ChunkId id;
        int data = -1;
        int users = 0;
        int direct = -1; // the file again with O_DIRECT, opened at its first direct write
    };
    std::mutex cache_mu;
    std::list<Open> lru;
    std::unordered_map<ChunkId, std::list<Open>::iterator, ChunkIdHash> index;
    std::atomic<uint64_t> chunk_files{0};
    CrcTableCache crc_tables; // the checksum entries of recently used chunks (load_crcs, write_crcs)

    std::mutex& lock_for(ChunkId id) { return locks[ChunkIdHash()(id) % kLockStripes]; }

    std::string subdir(uint64_t ino) const {
        char b[8];
        std::snprintf(b, sizeof b, "%02" PRIx64, ino % 256);
        return dir + "/" + b;
    }
    std::string path(ChunkId id) const { return dir + "/" + transport::chunk_file_name(id.ino, id.index); }

    // Returns the open files of a chunk (creating them if `create`), or not_found.
    Result<Open*> acquire(ChunkId id, bool create) {
        {
            std::lock_guard l(cache_mu);
            auto it = index.find(id);
            if (it != index.end()) {
                lru.splice(lru.begin(), lru, it->second);
                it->second->users++;
                return &*it->second;
            }
        }
        std::string p = path(id);
        int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
        int data = ::open(p.c_str(), flags, 0600);
        if (data < 0 && errno == ENOENT && create) {
            if (::mkdir(subdir(id.ino).c_str(), 0700) != 0 && errno != EEXIST)
                return errno_status("create chunk directory " + subdir(id.ino));
            data = ::open(p.c_str(), flags, 0600);
        }
        if (data < 0) {
            if (errno == ENOENT) return Status(Code::not_found, "no chunk " + p);
            return errno_status("open chunk " + p);
        }
        if (create) {
            struct stat st {};
            if (::fstat(data, &st) == 0 && st.st_size == 0) chunk_files++;
        }
        std::lock_guard l(cache_mu);
        auto it = index.find(id);
        if (it != index.end()) { // another thread opened it meanwhile
            ::close(data);
            it->second->users++;
            return &*it->second;
        }
        lru.push_front(Open{id, data, 1});
        index[id] = lru.begin();
        evict_locked();
        return &lru.front();
    }

    void release(Open* o) {
        std::lock_guard l(cache_mu);
        o->users--;
        evict_locked();
    }

    // An acquired chunk, released when the handle goes. Use under the chunk's stripe lock.
    class Handle {
    public:
        Handle(Impl* impl, Open* o) : impl_(impl), o_(o) {}
        Handle(Handle&& h) noexcept : impl_(h.impl_), o_(std::exchange(h.o_, nullptr)) {}
        Handle(const Handle&) = delete;
        ~Handle() {
            if (o_) impl_->release(o_);
        }
        Open& operator*() const { return *o_; }
        Open* operator->() const { return o_; }

    private:
        Impl* impl_;
        Open* o_;
    };

    Result<Handle> open_chunk(ChunkId id, bool create) {
        auto o = acquire(id, create);
        if (!o.ok()) return o.status();
        return Handle(this, *o);
    }

    void evict_locked() {
        auto it = lru.end();
        while (lru.size() > kMaxOpenChunks && it != lru.begin()) {
            --it;
            if (it->users > 0) continue;
            ::close(it->data);
            if (it->direct >= 0) ::close(it->direct);
            index.erase(it->id);
            it = lru.erase(it);
        }
    }

    // Forgets the cached files and checksums of a chunk (before it is deleted or replaced).
    // Caller holds its stripe lock.
    void forget(ChunkId id) {
        crc_tables.forget(id);
        std::lock_guard l(cache_mu);
        auto it = index.find(id);
        if (it == index.end()) return;
        // A user of this chunk would hold the stripe lock, which the caller holds: none.
        ::close(it->second->data);
        if (it->second->direct >= 0) ::close(it->second->direct);
        lru.erase(it->second);
        index.erase(it);
    }

    // The entries of blocks [first_block, first_block + count): from crc_tables, or read from
    // the file with those of every block before them and of the whole chunk (one page for a
    // chunk of up to 32 MiB), which are cached for the next reads. Caller holds the stripe lock.
    Result<std::vector<CrcEntry>> load_crcs(const Open& o, uint64_t first_block, uint64_t count) {
        std::vector<CrcEntry> e(count);
        if (crc_tables.get(o.id, first_block, e)) return e;
        auto len = data_length(o);
        if (!len.ok()) return len.status();
        std::vector<CrcEntry> table(std::max<uint64_t>(first_block + count, (*len + kBlock - 1) / kBlock));
        size_t got = 0;
        if (!pread_all(o.data, reinterpret_cast<uint8_t*>(table.data()), table.size() * sizeof(CrcEntry), 0, &got))
            return errno_status("read checksums of " + path(o.id));
        // Entries past the file's end (a chunk never written) were never written: holes.
        std::memset(reinterpret_cast<uint8_t*>(table.data()) + got, 0, table.size() * sizeof(CrcEntry) - got);
        std::copy_n(table.begin() + static_cast<ptrdiff_t>(first_block), count, e.begin());
        crc_tables.put(o.id, std::move(table));
        return e;
    }

    // Reads block b of the chunk (up to `len` = chunk length) into buf and verifies it.
    // Returns the number of bytes the block holds.
    Result<size_t> read_block(const Open& o, uint64_t b, uint64_t len, const CrcEntry& e, uint8_t* buf) {
        uint64_t start = b * kBlock;
        size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, len > start ? len - start : 0));
        if (n == 0) return size_t{0};
        size_t got = 0;
        if (!pread_all(o.data, buf, n, static_cast<off_t>(kData + start), &got))
            return errno_status("read chunk " + path(o.id));
        if (got < n) std::memset(buf + got, 0, n - got);
        JOBFS_RETURN_IF_ERROR(verify_block(o, b, e, buf, n));
        return n;
    }

    // Checks the n bytes of block b in buf against its checksum entry.
    Status verify_block(const Open& o, uint64_t b, const CrcEntry& e, const uint8_t* buf, size_t n) {
        const uint64_t start = b * kBlock;
        if (e.written && crc32c(buf, n) != e.crc) {
            JOBFS_ERROR("checksum mismatch in %s block %" PRIu64 " (bytes %" PRIu64 "..%" PRIu64 ")",
                        path(o.id).c_str(), b, start, start + n);
            return Status(Code::io, "checksum mismatch in chunk " + path(o.id) + " block " + std::to_string(b));
        }
        if (!e.written && std::any_of(buf, buf + n, [](uint8_t c) { return c != 0; })) {
            // Data where no write was recorded: a write that did not finish updating its
            // checksums (crash). The block cannot be trusted.
            return Status(Code::io, "unrecorded data in chunk " + path(o.id) + " block " + std::to_string(b));
        }
        return Status::OK();
    }

    // Writes a chunk's bytes: with O_DIRECT when the store may and the piece allows it (offset,
    // length and memory aligned to kDirectAlign, and at least direct_min bytes), else through
    // the page cache. The kernel keeps the two coherent (a direct write first writes back and
    // drops the cached pages it overlaps). A file system that refuses a direct write turns
    // direct writes off for good.
    Status write_data(Open& o, uint64_t offset, std::span<const uint8_t> data) {
        const bool aligned = offset % kDirectAlign == 0 && data.size() % kDirectAlign == 0 &&
                             reinterpret_cast<uintptr_t>(data.data()) % kDirectAlign == 0;
        if (direct && aligned && data.size() >= direct_min) {
            if (o.direct < 0) o.direct = ::open(path(o.id).c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
            // (Out of descriptors, say: this write goes through the page cache, the next tries again.)
            if (o.direct >= 0 && pwrite_all(o.direct, data.data(), data.size(), static_cast<off_t>(kData + offset))) {
                direct_writes++;
                return Status::OK();
            }
            if (o.direct >= 0 && errno != EINVAL) return write_error(o);
            if (errno == EINVAL && direct.exchange(false))
                JOBFS_WARN("chunk store %s: a direct write was refused (%s); writing through the page cache from now on",
                           dir.c_str(), std::strerror(errno));
        }
        if (!pwrite_all(o.data, data.data(), data.size(), static_cast<off_t>(kData + offset))) return write_error(o);
        // A large piece goes to the disk now, while the writer goes on (not a wait: writeback
        // is only started), rather than when the flusher or an fsync gets to it. Its pages stay
        // cached. A failure here is the fsync's to report.
        if (writeback_min != 0 && data.size() >= writeback_min)
            (void)::sync_file_range(o.data, static_cast<off_t>(kData + offset), static_cast<off_t>(data.size()),
                                    SYNC_FILE_RANGE_WRITE);
        return Status::OK();
    }
    Status write_error(const Open& o) const {
        return errno == ENOSPC ? Status(Code::no_space, "no space left for chunk " + path(o.id))
                               : errno_status("write chunk " + path(o.id));
    }

    Result<uint64_t> data_length(const Open& o) {
        struct stat st {};
        if (::fstat(o.data, &st) != 0) return errno_status("stat chunk " + path(o.id));
        return length_of(st);
    }
    static uint64_t length_of(const struct stat& st) {
        return static_cast<uint64_t>(st.st_size) > kData ? static_cast<uint64_t>(st.st_size) - kData : 0;
    }
    // The directory's chunks have this version's layout: it says so (kLayoutFile), or it holds
    // no chunk yet and is marked now. Chunks without the mark are of the first layout (their
    // checksums in a ".crc" file beside each).
    Status check_layout() {
        const std::string mark = dir + kLayoutFile;
        std::string text(sizeof kLayoutMark + 64, '\0');
        if (int fd = ::open(mark.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
            size_t got = 0;
            const bool read = pread_all(fd, reinterpret_cast<uint8_t*>(text.data()), text.size(), 0, &got);
            ::close(fd);
            if (!read) return errno_status("read " + mark);
            text.resize(got);
            if (text == kLayoutMark) return Status::OK();
            return Status(Code::invalid, "the chunks in " + dir + " are of another jobfs version (" + mark + ": \"" +
                                             text.substr(0, text.find('\n')) +
                                             "\"); start the daemon on an empty data directory");
        } else if (errno != ENOENT) {
            return errno_status("open " + mark);
        }
        uint64_t chunks = 0;
        for (unsigned sub = 0; sub < 256; ++sub)
            JOBFS_RETURN_IF_ERROR(for_each_chunk_in(subdir(sub), [&](ChunkId) { ++chunks; }));
        if (chunks > 0)
            return Status(Code::invalid, std::to_string(chunks) + " chunk file(s) in " + dir +
                                             " are of an older jobfs (checksums in .crc files), which this version "
                                             "cannot read; start the daemon on an empty data directory");
        // Whole or not at all: a mark cut short by a crash would refuse the directory next time.
        return transport::write_file_atomically(mark, kLayoutMark);
    }
    // Removes the copies of shortened chunks (write_shortened_copy) that a daemon killed
    // before its rename left behind: the chunk itself is as it was before that truncate, and
    // nothing else would ever remove them.
    Status remove_unfinished_copies() {
        for (unsigned sub = 0; sub < 256; ++sub) {
            const std::string d = subdir(sub);
            JOBFS_RETURN_IF_ERROR(for_each_name_in(d, [&](const char* name) {
                if (!std::string_view(name).ends_with(kShortenedSuffix)) return Status::OK();
                const std::string p = d + "/" + name;
                return ::unlink(p.c_str()) == 0 || errno == ENOENT ? Status::OK() : errno_status("remove " + p);
            }));
        }
        return Status::OK();
    }
    // The checksum entry of block b of chunk o (len bytes long, b's entry e) once the chunk is
    // `length` long: the block's old bytes are read and verified, cut there or followed by
    // zeros (truncate).
    Result<CrcEntry> entry_at_length(const Open& o, uint64_t b, uint64_t len, const CrcEntry& e, uint64_t length) {
        std::vector<uint8_t> block(kBlock, 0);
        auto n = read_block(o, b, len, e, block.data());
        if (!n.ok()) return n.status();
        const uint64_t bs = b * kBlock;
        return CrcEntry{crc32c(block.data(), std::min<uint64_t>(bs + kBlock, length) - bs), e.written};
    }
    // Rewrites the checksum entry of the block that holds the chunk's last byte (if it is not
    // whole) for the chunk cut or grown from len to length bytes.
    Status update_last_entry(const Open& o, uint64_t len, uint64_t length) {
        const uint64_t shorter = std::min(len, length);
        if (shorter == 0 || shorter % kBlock == 0) return Status::OK();
        const uint64_t b = (shorter - 1) / kBlock;
        auto crcs = load_crcs(o, b, 1);
        if (!crcs.ok()) return crcs.status();
        auto e = entry_at_length(o, b, len, (*crcs)[0], length);
        if (!e.ok()) return e.status();
        return write_crcs(o, b, std::span(&*e, 1));
    }
    // Cuts chunk o from len to length bytes in its own file (truncate, on a full disk).
    Status shorten_in_place(const Open& o, uint64_t len, uint64_t length) {
        JOBFS_RETURN_IF_ERROR(update_last_entry(o, len, length));
        if (::ftruncate(o.data, static_cast<off_t>(kData + length)) != 0) return errno_status("truncate chunk " + path(o.id));
        // Blocks wholly past the new end are holes again.
        const uint64_t keep = (length + kBlock - 1) / kBlock, had = (len + kBlock - 1) / kBlock;
        const std::vector<CrcEntry> zero(had > keep ? had - keep : 0, CrcEntry{0, 0});
        if (!zero.empty()) JOBFS_RETURN_IF_ERROR(write_crcs(o, keep, zero));
        return Status::OK();
    }
    // Writes the first `length` bytes of chunk o (shorter than it is) with their checksums to
    // path + kShortenedSuffix, durable, for truncate to rename over the chunk. Holes stay holes:
    // only the data extents are copied. On failure (ENOSPC) the copy is removed and the chunk
    // is untouched.
    Status write_shortened_copy(const Open& o, uint64_t len, uint64_t length) {
        const std::string to = path(o.id) + kShortenedSuffix;
        const int fd = ::open(to.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) return errno_status("create " + to);
        Status s = copy_kept_part(o, len, fd, length, to);
        if (s.ok() && ::fdatasync(fd) != 0) s = errno_status("sync " + to);
        ::close(fd);
        if (!s.ok()) ::unlink(to.c_str());
        return s;
    }
    Status copy_kept_part(const Open& o, uint64_t len, int fd, uint64_t length, const std::string& to) {
        const uint64_t blocks = (length + kBlock - 1) / kBlock;
        auto crcs = load_crcs(o, 0, blocks);
        if (!crcs.ok()) return crcs.status();
        if (length % kBlock != 0) {
            auto e = entry_at_length(o, blocks - 1, len, crcs->back(), length);
            if (!e.ok()) return e.status();
            crcs->back() = *e;
        }
        if (!pwrite_all(fd, reinterpret_cast<const uint8_t*>(crcs->data()), blocks * sizeof(CrcEntry), 0))
            return write_error_of(to);
        const off_t end = static_cast<off_t>(kData + length);
        for (off_t at = static_cast<off_t>(kData); at < end;) {
            const off_t data = ::lseek(o.data, at, SEEK_DATA);
            if (data < 0 && errno == ENXIO) break; // only a hole is left
            if (data < 0) return errno_status("find data in chunk " + path(o.id));
            if (data >= end) break;
            off_t hole = ::lseek(o.data, data, SEEK_HOLE);
            if (hole < 0) return errno_status("find a hole in chunk " + path(o.id));
            hole = std::min(hole, end);
            off_t in = data, out = data;
            while (in < hole) {
                const ssize_t r = ::copy_file_range(o.data, &in, fd, &out, static_cast<size_t>(hole - in), 0);
                if (r < 0 && errno == EINTR) continue;
                if (r < 0) return write_error_of(to);
                if (r == 0) return Status(Code::io, "chunk " + path(o.id) + " ended while copied");
            }
            at = hole;
        }
        if (::ftruncate(fd, end) != 0) return write_error_of(to);
        return Status::OK();
    }
    static Status write_error_of(const std::string& file) {
        return errno == ENOSPC ? Status(Code::no_space, "no space left for " + file) : errno_status("write " + file);
    }
    // Writes entries of blocks [first_block, first_block + e.size()), in the file and in
    // crc_tables (a failed write leaves the file's entries unknown: forgotten there). Caller
    // holds the stripe lock.
    Status write_crcs(const Open& o, uint64_t first_block, std::span<const CrcEntry> e) {
        if (!pwrite_all(o.data, reinterpret_cast<const uint8_t*>(e.data()), e.size_bytes(),
                        static_cast<off_t>(first_block * sizeof(CrcEntry)))) {
            const Status s = errno_status("write checksums of " + path(o.id));
            crc_tables.forget(o.id);
            return s;
        }
        crc_tables.update(o.id, first_block, e);
        return Status::OK();
    }
};

ChunkStore::ChunkStore(std::unique_ptr<Impl> impl, uint64_t chunk_size)
    : impl_(std::move(impl)), chunk_size_(chunk_size) {}

ChunkStore::~ChunkStore() {
    for (auto& o : impl_->lru) {
        ::close(o.data);
    }
}

Result<std::unique_ptr<ChunkStore>> ChunkStore::open(const std::string& data_dir, uint64_t chunk_size, bool direct_io,
                                                     uint64_t direct_io_min, uint64_t early_writeback_min) {
    if (chunk_size == 0 || chunk_size % kBlock != 0 || chunk_size > (1ull << 30))
        return Status(Code::invalid, "chunk size " + std::to_string(chunk_size) +
                                         " must be a multiple of 64 KiB, at most 1 GiB");
    auto impl = std::make_unique<Impl>();
    impl->dir = data_dir + "/chunks";
    impl->chunk_size = chunk_size;
    impl->direct_min = direct_io_min;
    impl->writeback_min = early_writeback_min;
    if (::mkdir(data_dir.c_str(), 0700) != 0 && errno != EEXIST) return errno_status("create " + data_dir);
    if (::mkdir(impl->dir.c_str(), 0700) != 0 && errno != EEXIST) return errno_status("create " + impl->dir);
    if (::access(impl->dir.c_str(), W_OK) != 0) return errno_status("data directory " + impl->dir);
    JOBFS_RETURN_IF_ERROR(impl->check_layout());
    JOBFS_RETURN_IF_ERROR(impl->remove_unfinished_copies());
    if (direct_io) {
        // Some file systems (tmpfs before Linux 6.6) refuse O_DIRECT at open: then every write
        // goes through the page cache.
        const std::string probe = impl->dir + "/.direct-io-probe";
        int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
        if (fd >= 0) {
            ::close(fd);
            impl->direct = true;
        } else {
            JOBFS_INFO("chunk store %s: no O_DIRECT here (%s); writing through the page cache", impl->dir.c_str(),
                       std::strerror(errno));
        }
        ::unlink(probe.c_str());
    }
    if (auto st = ChunkStamps::create(); st.ok()) impl->stamps = std::move(*st);
    else JOBFS_INFO("chunk store %s: %s; local readers describe every read", impl->dir.c_str(), st.status().message().c_str());
    return std::unique_ptr<ChunkStore>(new ChunkStore(std::move(impl), chunk_size));
}

ChunkStamps* ChunkStore::stamps() const { return impl_->stamps.get(); }

Result<int> ChunkStore::open_dir_for_reader() const {
    const int fd = ::open(impl_->dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno_status("open " + impl_->dir);
    return fd;
}

bool ChunkStore::direct_io() const { return impl_->direct; }

uint64_t ChunkStore::direct_writes() const { return impl_->direct_writes; }

Status ChunkStore::write(ChunkId id, uint64_t offset, std::span<const uint8_t> data,
                         std::span<const uint32_t> piece_crcs) {
    if (offset > chunk_size_ || data.size() > chunk_size_ - offset)
        return Status(Code::invalid, "write of " + std::to_string(data.size()) + " bytes at " +
                                         std::to_string(offset) + " past the chunk size");
    if (data.empty()) return Status::OK();
    const ChunkStamps::Change change(impl_->stamps.get(), id.ino);
    std::lock_guard lock(impl_->lock_for(id));
    auto h = impl_->open_chunk(id, true);
    if (!h.ok()) return h.status();
    Impl::Open& f = **h;

    auto len = impl_->data_length(f);
    if (!len.ok()) return len.status();
    const uint64_t end = offset + data.size();
    const uint64_t new_len = std::max(*len, end);

    // Reserve the range and its checksums first: ENOSPC now, before anything in the chunk
    // changes, and never after the data was written. Checksum entries the reservation adds
    // read as zeros, "never written".
    const uint64_t b_end = (end - 1) / kBlock + 1;
    const uint64_t b_first = offset / kBlock;
    if (::fallocate(f.data, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(b_first * sizeof(CrcEntry)),
                    static_cast<off_t>((b_end - b_first) * sizeof(CrcEntry))) != 0) {
        if (errno == ENOSPC) return Status(Code::no_space, "no space left for the checksums of chunk " + impl_->path(id));
        if (errno != EOPNOTSUPP) return errno_status("reserve checksums of " + impl_->path(id));
    }
    if (::fallocate(f.data, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(kData + offset), static_cast<off_t>(data.size())) != 0) {
        if (errno == ENOSPC) return Status(Code::no_space, "no space left for chunk " + impl_->path(id));
        if (errno != EOPNOTSUPP) return errno_status("reserve chunk " + impl_->path(id));
    }

    // New checksums of every block the write touches. Edge blocks that keep old bytes are
    // read (and verified) first, so the new checksum covers the whole block.
    const uint64_t b0 = offset / kBlock, b1 = (end - 1) / kBlock;
    // The block that held the old end may grow: it is rewritten too when the write starts past it.
    const uint64_t old_last = *len > 0 ? (*len - 1) / kBlock : 0;
    const uint64_t first = (*len > 0 && old_last < b0 && *len % kBlock != 0) ? old_last : b0;
    // Old entries only of blocks that held bytes: a write past the end (a stream of pieces)
    // reads none.
    const uint64_t held_end = std::min(b1 + 1, (*len + kBlock - 1) / kBlock);
    std::vector<CrcEntry> old;
    if (held_end > first) {
        auto crcs = impl_->load_crcs(f, first, held_end - first);
        if (!crcs.ok()) return crcs.status();
        old = std::move(*crcs);
    }
    std::vector<uint8_t> block(kBlock);
    std::vector<CrcEntry> updated(b1 - first + 1);
    for (uint64_t b = first; b <= b1; ++b) {
        const uint64_t bs = b * kBlock;
        const uint64_t be = std::min<uint64_t>(bs + kBlock, new_len);
        if (bs >= offset && be <= end) {
            // Written whole: its old bytes do not matter, and its new ones are all in data.
            const size_t piece = static_cast<size_t>(b - b0); // pieces start at offset, cut at blocks
            updated[b - first] = CrcEntry{piece < piece_crcs.size() ? piece_crcs[piece]
                                                                     : crc32c(data.data() + (bs - offset), be - bs), 1};
            continue;
        }
        // Old bytes of this block (verified), then the new bytes over them.
        std::fill(block.begin(), block.end(), 0);
        if (bs < *len) {
            auto r = impl_->read_block(f, b, *len, old[b - first], block.data());
            if (!r.ok()) return r.status();
        }
        const uint64_t ws = std::max(bs, offset), we = std::min(be, end);
        if (we > ws) std::memcpy(block.data() + (ws - bs), data.data() + (ws - offset), we - ws);
        updated[b - first] = CrcEntry{crc32c(block.data(), be - bs), 1};
    }
    JOBFS_RETURN_IF_ERROR(impl_->write_data(f, offset, data));
    return impl_->write_crcs(f, first, updated);
}

Result<size_t> ChunkStore::read(ChunkId id, uint64_t offset, std::span<uint8_t> out, std::vector<uint32_t>* piece_crcs) {
    if (piece_crcs) piece_crcs->clear();
    if (offset >= chunk_size_ || out.empty()) return size_t{0};
    std::lock_guard lock(impl_->lock_for(id));
    auto h = impl_->open_chunk(id, false);
    if (!h.ok()) return h.status().code() == Code::not_found ? Result<size_t>(size_t{0}) : Result<size_t>(h.status());
    Impl::Open& f = **h;
    auto len = impl_->data_length(f);
    if (!len.ok()) return len.status();
    if (offset >= *len) return size_t{0};
    const uint64_t end = std::min<uint64_t>(*len, offset + out.size());
    const uint64_t b0 = offset / kBlock, b1 = (end - 1) / kBlock;
    auto crcs = impl_->load_crcs(f, b0, b1 - b0 + 1);
    if (!crcs.ok()) return crcs.status();
    // Blocks returned whole go straight into out, in one pread, and are verified there; only
    // the partial blocks at either edge go through a block buffer.
    const auto whole = [&](uint64_t b) { return b * kBlock >= offset && std::min<uint64_t>((b + 1) * kBlock, *len) <= end; };
    uint64_t w0 = b0, w1 = b1 + 1; // [w0, w1): the blocks returned whole
    if (!whole(w0)) ++w0;
    if (w1 > w0 && !whole(w1 - 1)) --w1;
    if (w1 > w0) {
        const uint64_t ws = w0 * kBlock, we = std::min<uint64_t>(w1 * kBlock, *len);
        size_t got = 0;
        if (!pread_all(f.data, out.data() + (ws - offset), we - ws, static_cast<off_t>(kData + ws), &got))
            return errno_status("read chunk " + impl_->path(id));
        if (got < we - ws) std::memset(out.data() + (ws - offset) + got, 0, we - ws - got);
    }
    std::vector<uint8_t> block;
    for (uint64_t b = b0; b <= b1; ++b) {
        const uint64_t bs = b * kBlock;
        const CrcEntry& e = (*crcs)[b - b0];
        if (b >= w0 && b < w1) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(bs + kBlock, *len) - bs);
            uint8_t* at = out.data() + (bs - offset);
            JOBFS_RETURN_IF_ERROR(impl_->verify_block(f, b, e, at, n));
            if (piece_crcs) piece_crcs->push_back(e.written ? e.crc : crc32c(at, n));
            continue;
        }
        block.resize(kBlock);
        auto n = impl_->read_block(f, b, *len, e, block.data());
        if (!n.ok()) return n.status();
        const uint64_t rs = std::max(bs, offset), re = std::min<uint64_t>(bs + *n, end);
        if (re > rs) std::memcpy(out.data() + (rs - offset), block.data() + (rs - bs), re - rs);
        if (piece_crcs) piece_crcs->push_back(crc32c(out.data() + (rs - offset), re - rs));
    }
    return static_cast<size_t>(end - offset);
}

Result<ChunkStore::View> ChunkStore::describe(ChunkId id, uint64_t offset, uint64_t size) {
    View v;
    if (offset >= chunk_size_ || size == 0) return v;
    // Before anything is looked at: a change that begins after this moves the stamp from it.
    v.stamp = impl_->stamps ? impl_->stamps->stamp(id.ino) : 0;
    std::lock_guard lock(impl_->lock_for(id));
    auto h = impl_->open_chunk(id, false);
    if (!h.ok()) return h.status().code() == Code::not_found ? Result<View>(v) : Result<View>(h.status());
    Impl::Open& f = **h;
    struct stat st {};
    if (::fstat(f.data, &st) != 0) return errno_status("stat chunk " + impl_->path(id));
    v.length = Impl::length_of(st);
    v.file_dev = static_cast<uint64_t>(st.st_dev);
    v.file_ino = static_cast<uint64_t>(st.st_ino);
    if (offset >= v.length) return v;
    const uint64_t end = std::min<uint64_t>(v.length, offset + size);
    const uint64_t b0 = offset / kBlock, b1 = (end - 1) / kBlock;
    auto crcs = impl_->load_crcs(f, b0, b1 - b0 + 1);
    if (!crcs.ok()) return crcs.status();
    v.crcs.reserve(crcs->size());
    for (size_t i = 0; i < crcs->size(); ++i) {
        v.crcs.push_back((*crcs)[i].crc);
        if (!(*crcs)[i].written) v.holes.push_back(static_cast<uint32_t>(i));
    }
    return v;
}

Result<int> ChunkStore::open_for_reader(ChunkId id) {
    const std::string p = impl_->path(id);
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? Status(Code::not_found, "no chunk " + p) : errno_status("open chunk " + p);
    return fd;
}

Status ChunkStore::truncate(ChunkId id, uint64_t length) {
    if (length > chunk_size_) return Status(Code::invalid, "truncate past the chunk size");
    const ChunkStamps::Change change(impl_->stamps.get(), id.ino);
    std::lock_guard lock(impl_->lock_for(id));
    {
        auto h = impl_->open_chunk(id, length > 0);
        if (!h.ok()) return h.status().code() == Code::not_found ? Status::OK() : h.status();
        Impl::Open& f = **h;
        auto len = impl_->data_length(f);
        if (!len.ok()) return len.status();
        if (length == *len) return Status::OK();
        if (length > *len) {
            // The old last block grows with zeros: its checksum must cover them.
            JOBFS_RETURN_IF_ERROR(impl_->update_last_entry(f, *len, length));
            if (::ftruncate(f.data, static_cast<off_t>(kData + length)) != 0)
                return errno_status("truncate chunk " + impl_->path(id));
            return Status::OK();
        }
        // Shorter: not in place. A local reader may have the file mapped (local_reads.h), and
        // a mapped page past a file's end is a SIGBUS in the reader's process. The kept part
        // goes to a new file that replaces this one; the old inode lives on, whole, for
        // whoever still has it open or mapped. On a full disk, where there is no room for the
        // copy, the chunk is cut in place after all: a truncate must not fail for want of
        // space, and a reader of the cut part in the same milliseconds is a race the
        // application made (local_reads.h says what it costs).
        if (length > 0) {
            const Status copied = impl_->write_shortened_copy(f, *len, length);
            if (copied.code() == Code::no_space) return impl_->shorten_in_place(f, *len, length);
            JOBFS_RETURN_IF_ERROR(copied);
        }
    } // the chunk's cached descriptors are released here, and forgotten below
    impl_->forget(id);
    const std::string p = impl_->path(id);
    if (length == 0) {
        // An empty chunk and no chunk file read the same (zero bytes).
        if (::unlink(p.c_str()) != 0 && errno != ENOENT) return errno_status("remove chunk " + p);
        if (impl_->chunk_files > 0) impl_->chunk_files--;
        return Status::OK();
    }
    if (::rename((p + kShortenedSuffix).c_str(), p.c_str()) != 0) {
        const Status s = errno_status("replace chunk " + p);
        ::unlink((p + kShortenedSuffix).c_str());
        return s;
    }
    return Status::OK();
}

Result<uint64_t> ChunkStore::length(ChunkId id) {
    std::lock_guard lock(impl_->lock_for(id));
    auto h = impl_->open_chunk(id, false);
    if (!h.ok()) return h.status().code() == Code::not_found ? Result<uint64_t>(uint64_t{0}) : Result<uint64_t>(h.status());
    return impl_->data_length(**h);
}

Status ChunkStore::sync(ChunkId id) {
    std::lock_guard lock(impl_->lock_for(id));
    auto h = impl_->open_chunk(id, false);
    if (!h.ok()) return h.status().code() == Code::not_found ? Status::OK() : h.status();
    if (::fdatasync((*h)->data) != 0) return errno_status("sync chunk " + impl_->path(id));
    return Status::OK();
}

Result<std::vector<uint64_t>> ChunkStore::chunk_indexes(uint64_t ino) {
    std::vector<uint64_t> indexes;
    JOBFS_RETURN_IF_ERROR(for_each_chunk_in(impl_->subdir(ino), [&](ChunkId id) {
        if (id.ino == ino) indexes.push_back(id.index);
    }));
    return indexes;
}

Status ChunkStore::sync_file(uint64_t ino) {
    auto indexes = chunk_indexes(ino);
    if (!indexes.ok()) return indexes.status();
    // First start writeback of every chunk (a chunk removed meanwhile has nothing to make
    // durable), then wait for each with sync(), so the disk sees one stream.
    for (uint64_t idx : *indexes) {
        const ChunkId id{ino, idx};
        std::lock_guard lock(impl_->lock_for(id));
        auto h = impl_->open_chunk(id, false);
        if (!h.ok() && h.status().code() == Code::not_found) continue;
        if (!h.ok()) return h.status();
        if (::sync_file_range((*h)->data, 0, 0, SYNC_FILE_RANGE_WRITE) != 0)
            return errno_status("start writeback of chunk " + impl_->path(id));
    }
    for (uint64_t idx : *indexes) JOBFS_RETURN_IF_ERROR(sync(ChunkId{ino, idx}));
    return Status::OK();
}

Status ChunkStore::remove_file(uint64_t ino) {
    const ChunkStamps::Change change(impl_->stamps.get(), ino);
    auto indexes = chunk_indexes(ino);
    if (!indexes.ok()) return indexes.status();
    for (uint64_t idx : *indexes) {
        ChunkId id{ino, idx};
        std::lock_guard lock(impl_->lock_for(id));
        impl_->forget(id);
        std::string p = impl_->path(id);
        if (::unlink(p.c_str()) != 0 && errno != ENOENT) return errno_status("remove chunk " + p);
        if (impl_->chunk_files > 0) impl_->chunk_files--;
    }
    return Status::OK();
}

Result<std::vector<std::pair<uint64_t, uint64_t>>> ChunkStore::extents() {
    std::map<uint64_t, uint64_t> ends;
    for (unsigned sub = 0; sub < 256; ++sub)
        JOBFS_RETURN_IF_ERROR(for_each_chunk_in(impl_->subdir(sub), [&](ChunkId id) {
            uint64_t& top = ends[id.ino];
            top = std::max(top, id.index + 1);
        }));
    return std::vector<std::pair<uint64_t, uint64_t>>(ends.begin(), ends.end());
}

Result<DiskSpace> ChunkStore::space() {
    struct statvfs v {};
    if (::statvfs(impl_->dir.c_str(), &v) != 0) return errno_status("statvfs " + impl_->dir);
    DiskSpace s;
    s.total_bytes = static_cast<uint64_t>(v.f_blocks) * v.f_frsize;
    s.free_bytes = static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
    s.chunk_files = impl_->chunk_files;
    return s;
}

} // namespace jobfs::server
