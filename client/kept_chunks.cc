// kept_chunks.cc: see kept_chunks.h.
#include "client/kept_chunks.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>

namespace jobfs::client {

namespace {
constexpr size_t kTableBytes = transport::kStampSlots * sizeof(transport::StampSlot);

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
} // namespace

Result<std::shared_ptr<ChunkStampsView>> ChunkStampsView::map(transport::UniqueFd table, transport::UniqueFd connection,
                                                               transport::UniqueFd dir, uint64_t data_offset) {
    struct stat st {};
    if (::fstat(table.get(), &st) != 0) return Status::from_errno(errno, "chunk stamps");
    if (static_cast<uint64_t>(st.st_size) != kTableBytes)
        return Status(Code::protocol, "chunk stamps of " + std::to_string(st.st_size) + " bytes, expected " +
                                          std::to_string(kTableBytes));
    void* m = ::mmap(nullptr, kTableBytes, PROT_READ, MAP_SHARED, table.get(), 0);
    if (m == MAP_FAILED) return Status::from_errno(errno, "map the chunk stamps");
    return std::shared_ptr<ChunkStampsView>(
        new ChunkStampsView(static_cast<const std::atomic<uint64_t>*>(m), std::move(connection), std::move(dir), data_offset));
}

ChunkStampsView::~ChunkStampsView() { ::munmap(const_cast<std::atomic<uint64_t>*>(slots_), kTableBytes); }

bool ChunkStampsView::alive() const {
    pollfd p{connection_.get(), POLLRDHUP, 0};
    const int n = ::poll(&p, 1, 0);
    return n == 0 || (n > 0 && !(p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)));
}

KeptChunk::~KeptChunk() {
    if (map) ::munmap(map, map_len);
}

namespace {
// kMaxKept, or a quarter of the soft limit on descriptors where that is lower (at least 16):
// the process's own files come first.
size_t max_kept_for_descriptors() {
    struct rlimit rl {};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return KeptChunks::kMaxKept;
    return std::clamp<size_t>(static_cast<size_t>(rl.rlim_cur / 4), 16, KeptChunks::kMaxKept);
}
} // namespace

void KeptChunks::reserve_descriptors() {
    // The chunks' descriptors, and as many again for what the process opens meanwhile. The
    // lowest free descriptor at or above `want` makes the table at least that large; it is
    // closed at once. (Where the limit is lower, the table grows as far as it lets.)
    const size_t count = 2 * max_kept_for_descriptors();
    struct rlimit rl {};
    const size_t limit = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? rl.rlim_cur : INT_MAX;
    int highest = -1;
    if (DIR* d = ::opendir("/proc/self/fd")) {
        while (const dirent* e = ::readdir(d))
            if (e->d_name[0] != '.') highest = std::max(highest, std::atoi(e->d_name));
        ::closedir(d);
    }
    if (limit == 0) return;
    const int want = static_cast<int>(std::min(static_cast<size_t>(highest + 1) + count, limit - 1));
    const int any = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (any < 0) return;
    if (const int fd = ::fcntl(any, F_DUPFD_CLOEXEC, want); fd >= 0) ::close(fd);
    ::close(any);
}

KeptChunks::KeptChunks() : max_kept_(max_kept_for_descriptors()), sweeper_([this] { sweep_loop(); }) {
    reserve_descriptors(); // nothing to do where Client::connect did it (the table is large enough)
}

KeptChunks::~KeptChunks() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    wake_.notify_all();
    sweeper_.join();
}

std::shared_ptr<const KeptChunk> KeptChunks::find(uint32_t rank, uint64_t ino, uint64_t index) {
    std::shared_ptr<const KeptChunk> c;
    {
        std::lock_guard lock(mu_);
        auto it = chunks_.find({ino, index, rank});
        if (it == chunks_.end()) return nullptr;
        c = it->second;
    }
    if (!c->unchanged()) {
        drop(*c);
        return nullptr;
    }
    c->last_read.store(now_ns(), std::memory_order_relaxed);
    return c;
}

void KeptChunks::keep(std::shared_ptr<const KeptChunk> c) {
    c->last_read.store(now_ns(), std::memory_order_relaxed);
    std::shared_ptr<const KeptChunk> evicted; // unmapped outside the lock
    bool first = false;
    {
        std::lock_guard lock(mu_);
        const Key key{c->ino, c->index, c->rank};
        first = chunks_.empty();
        if (chunks_.size() >= max_kept_ && !chunks_.count(key)) {
            auto oldest = std::min_element(chunks_.begin(), chunks_.end(), [](const auto& a, const auto& b) {
                return a.second->last_read.load(std::memory_order_relaxed) < b.second->last_read.load(std::memory_order_relaxed);
            });
            evicted = std::move(oldest->second);
            chunks_.erase(oldest);
        }
        chunks_[key] = std::move(c);
    }
    if (first) wake_.notify_all(); // the sweeper sleeps while nothing is kept
}

void KeptChunks::drop(const KeptChunk& c) {
    std::shared_ptr<const KeptChunk> gone;
    std::lock_guard lock(mu_);
    auto it = chunks_.find({c.ino, c.index, c.rank});
    if (it != chunks_.end() && it->second.get() == &c) {
        gone = std::move(it->second);
        chunks_.erase(it);
    }
}

void KeptChunks::drop_file(uint64_t ino) {
    std::vector<std::shared_ptr<const KeptChunk>> gone; // unmapped outside the lock
    std::lock_guard lock(mu_);
    auto from = chunks_.lower_bound({ino, 0, 0});
    auto to = from;
    for (; to != chunks_.end() && std::get<0>(to->first) == ino; ++to) gone.push_back(std::move(to->second));
    chunks_.erase(from, to);
}

size_t KeptChunks::size() const {
    std::lock_guard lock(mu_);
    return chunks_.size();
}

void KeptChunks::sweep_loop() {
    std::unique_lock lock(mu_);
    while (!stop_) {
        if (chunks_.empty()) {
            wake_.wait(lock, [&] { return stop_ || !chunks_.empty(); });
            continue;
        }
        wake_.wait_for(lock, kSweep, [&] { return stop_; });
        if (stop_) break;
        const int64_t idle_before = now_ns() - std::chrono::duration_cast<std::chrono::nanoseconds>(kIdle).count();
        std::vector<std::shared_ptr<const KeptChunk>> gone; // unmapped outside the lock
        std::map<const ChunkStampsView*, bool> alive;        // one poll per daemon, not per chunk
        for (auto it = chunks_.begin(); it != chunks_.end();) {
            const KeptChunk& c = *it->second;
            auto [a, first] = alive.try_emplace(c.stamps.get(), false);
            if (first) a->second = c.stamps->alive();
            if (c.last_read.load(std::memory_order_relaxed) < idle_before || !a->second || c.stamps->stamp(c.ino) != c.stamp) {
                gone.push_back(std::move(it->second));
                it = chunks_.erase(it);
            } else {
                ++it;
            }
        }
        lock.unlock();
        gone.clear();
        lock.lock();
    }
}

} // namespace jobfs::client
