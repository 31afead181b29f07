// stage.cc: the staging engine. The main thread lists both sides, decides what to copy
// (this rank's share, minus what is complete already) and queues work units (a stage-in of
// a prefix page by page, as the listing comes in); a pool of
// --parallel threads runs them. An object up to the part size is one unit (one GET or PUT);
// a larger one is a unit per part, and whichever part finishes last completes the object
// (rename into place, or CompleteMultipartUpload), or undoes it if any part failed.
#include "client/stage/stage.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "client/stage/fs_store.h"
#include "client/stage/location.h"
#include "client/stage/paths.h"
#include "client/stage/progress.h"

namespace jobfs::stage {

int stage_rank_of(const std::string& key, int ranks) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : key) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return ranks <= 1 ? 0 : static_cast<int>(h % static_cast<uint64_t>(ranks));
}

namespace {

using Clock = std::chrono::steady_clock;

class Pool {
public:
    explicit Pool(int n) {
        for (int i = 0; i < std::max(1, n); ++i) threads_.emplace_back([this] { run(); });
    }
    ~Pool() { wait(); }
    void add(std::function<void()> f) {
        {
            std::lock_guard<std::mutex> lk(mu_);
            q_.push_back(std::move(f));
        }
        cv_.notify_one();
    }
    void wait() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            done_ = true;
        }
        cv_.notify_all();
        for (auto& t : threads_)
            if (t.joinable()) t.join();
    }

private:
    void run() {
        for (;;) {
            std::function<void()> f;
            {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [this] { return done_ || !q_.empty(); });
                if (q_.empty()) return;
                f = std::move(q_.front());
                q_.pop_front();
            }
            f();
        }
    }
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> q_;
    bool done_ = false;
    std::vector<std::thread> threads_;
};

// Stage-in of small objects (one GET each): the file-system side (create, write, settle) runs
// in a pool of its own, so the S3 side keeps --parallel GETs in flight while the bodies already
// received are written into jobfs: a GET waits for the daemons' RPCs of its own write no more.
// The bodies queued hold at most `limit` bytes (one always passes): a GET thread that would
// pass it waits, so memory stays within about twice parallel x part size. (A large object's
// parts stream into the file from the GET's own thread: get_part.)
class Writer {
public:
    Writer(int threads, uint64_t limit) : limit_(limit), pool_(threads) {}
    void add(uint64_t bytes, std::function<void()> f) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return pending_ == 0 || pending_ + bytes <= limit_; });
            pending_ += bytes;
        }
        pool_.add([this, bytes, f = std::move(f)] {
            f();
            {
                std::lock_guard<std::mutex> lk(mu_);
                pending_ -= bytes;
            }
            cv_.notify_all();
        });
    }
    void wait() { pool_.wait(); }  // after the last add

private:
    std::mutex mu_;
    std::condition_variable cv_;
    uint64_t pending_ = 0;
    const uint64_t limit_;
    Pool pool_;
};

bool is_manifest_or_temp(const std::string& rel) {
    const std::string base = basename_of(rel);
    return base.rfind(kManifestName, 0) == 0 || base.rfind(".jobfs-stage.", 0) == 0;
}

// A key below the prefix must map to a path below DST: no empty, "." or ".." component.
bool safe_relative(const std::string& rel) {
    size_t b = 0;
    for (;;) {
        const size_t e = rel.find('/', b);
        const std::string c = rel.substr(b, e == std::string::npos ? std::string::npos : e - b);
        if (c.empty() || c == "." || c == "..") return false;
        if (e == std::string::npos) return true;
        b = e + 1;
    }
}

std::string join(const std::string& dir, const std::string& rel) {
    return dir == "/" ? "/" + rel : dir + "/" + rel;
}

std::span<const uint8_t> bytes_of(const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

struct Item {
    std::string key;   // full object key
    std::string path;  // file path (jobfs or local)
    uint64_t size = 0;
    std::string etag;  // stage-in: from the listing; stage-out: from the upload
    int64_t mtime_ns = 0;
    bool skipped = false;
    bool failed = false;
};

struct Run {
    const StageOptions& o;
    S3Client s3;
    std::unique_ptr<FileStore> fs;
    std::string bucket;
    Counters counters;
    std::mutex mu;  // failures' messages and items' results
    uint64_t failed = 0;
    uint64_t not_shown = 0;
    // Connection-level failures (refused, reset, timed out: each already retried) in a row,
    // over all objects. Past a threshold the endpoint is taken as down and the remaining
    // objects fail at once instead of each waiting through its own retries.
    std::atomic<int> down_streak{0};
    static constexpr uint64_t kShownFailures = 20;

    Run(const StageOptions& opts, S3Config cfg) : o(opts), s3(std::move(cfg), opts.retry) {}

    // Prints the failure once, naming the object: "jobfs: stage-in of s3://b/k failed: 404 NoSuchKey: …".
    void fail(Item& it, const Status& s) {
        const Code c = s.code();
        if (c == Code::refused || c == Code::peer_gone || c == Code::timeout) ++down_streak;
        std::lock_guard<std::mutex> lk(mu);
        if (it.failed) return;
        it.failed = true;
        if (++failed > kShownFailures) {
            ++not_shown;
            return;
        }
        const std::string what = o.in ? "stage-in of " + s3_url(bucket, it.key) : "stage-out of " + fs->display(it.path);
        const std::string msg = s.message().empty() ? s.to_string() : s.message();
        std::fprintf(stderr, "jobfs: %s failed: %s\n", what.c_str(), msg.c_str());
    }
    bool endpoint_down() const { return down_streak.load() >= 2 * o.parallel + 4; }
    void succeeded() { down_streak = 0; }
};

// One large object's parts: shared by its part units; the last one to finish settles it.
struct Multi {
    Item* item = nullptr;
    int parts = 0;
    std::atomic<int> left{0};
    std::atomic<bool> bad{false};
    std::unique_ptr<WriteHandle> out;      // stage-in
    std::unique_ptr<ReadHandle> in;        // stage-out
    std::string upload_id;                 // stage-out
    std::vector<std::string> etags;        // stage-out: per part
};

// The S3 side of a small object (one GET, checked); its write into the file system is
// queued on w.
void get_small(Run& r, Writer& w, Item& it) {
    std::string data;
    if (it.size > 0) {
        auto g = r.s3.get(r.bucket, it.key, 0, 0, "");
        if (!g.ok()) return r.fail(it, g.status());
        data = std::move(*g);
    }
    if (data.size() != it.size)
        return r.fail(it, Status(Code::io, "size " + std::to_string(data.size()) + " differs from the listed " +
                                               std::to_string(it.size) + " (object changed while staging?)"));
    if (is_md5_etag(it.etag) && md5_hex(bytes_of(data)) != it.etag)
        return r.fail(it, Status(Code::io, "MD5 of the bytes received differs from the ETag " + it.etag));
    r.succeeded();
    auto body = std::make_shared<std::string>(std::move(data));
    w.add(it.size, [&r, &it, body] {
        auto f = r.fs->create(it.path, it.size, it.etag);
        if (!f.ok()) return r.fail(it, f.status());
        Status s = body->empty() ? Status::OK() : (*f)->pwrite(0, bytes_of(*body));
        if (!s.ok()) {
            (*f)->discard();
            return r.fail(it, s);
        }
        // Put in place by the batch (FileStore::flush_commits at the end at the latest).
        (*f)->commit_later([&r, &it](Status c) {
            if (!c.ok()) return r.fail(it, c);
            r.counters.bytes_done += it.size;
            ++r.counters.objects_done;
        });
    });
}

// The bytes [off, off + len) of a large object that part `part` moves.
std::pair<uint64_t, uint64_t> part_range(const Run& r, const Multi& m, int part) {
    const uint64_t off = static_cast<uint64_t>(part) * r.o.part_size;
    return {off, std::min<uint64_t>(r.o.part_size, m.item->size - off)};
}

// Whether a part is still to be moved: not once another part failed, nor with the S3
// endpoint down (the object then fails: not attempted).
bool part_wanted(Run& r, Multi& m) {
    if (!m.bad && r.endpoint_down()) {
        m.bad = true;
        r.fail(*m.item, Status(Code::refused, "not attempted: the S3 endpoint is unreachable"));
    }
    return !m.bad;
}

void part_failed(Run& r, Multi& m, const Status& s) {
    m.bad = true;
    r.fail(*m.item, s);
}

// One part of a large object: move() transfers [off, off+len); the last part to end calls
// settle(ok), ok when no part failed.
template <class Move, class Settle>
void run_part(Run& r, Multi& m, int part, Move move, Settle settle) {
    const auto [off, len] = part_range(r, m, part);
    if (part_wanted(r, m)) {
        Status s = move(off, len);
        if (!s.ok()) {
            part_failed(r, m, s);
        } else {
            r.counters.bytes_done += len;
            r.succeeded();
        }
    }
    if (--m.left == 0) settle(!m.bad);
}

// A part of a large object that is done (written, failed or not attempted): the last one
// settles the object, committing it when no part failed.
void get_part_done(Run& r, const std::shared_ptr<Multi>& m) {
    if (--m->left != 0) return;
    Item& it = *m->item;
    if (m->bad) return m->out->discard();
    Status s = m->out->commit();
    if (!s.ok()) return r.fail(it, s);
    ++r.counters.objects_done;
}

// A large object's part moves through a small buffer, a block at a time, never whole: a
// 16 MiB buffer per part, touched by the kernel on every copy in and out, cost more in page
// faults and TLB misses than the copies themselves on this project's VMs (perf: stage-in's
// client used 4 to 5 s of system time per GiB; rclone, which streams, 1 to 1.5 s).
constexpr size_t kBlock = 2u << 20;

// One ranged GET, written into the file as it arrives, a block per write (each write is a
// daemon RPC on jobfs, so not one per network read).
void get_part(Run& r, const std::shared_ptr<Multi>& m, int part) {
    Item& it = *m->item;
    const auto [off, len] = part_range(r, *m, part);
    if (!part_wanted(r, *m)) return get_part_done(r, m);
    thread_local std::string block;
    block.reserve(kBlock + (1u << 20));  // a block and one network read past it
    block.clear();
    uint64_t block_at = 0;  // where the block starts within the part
    auto flush = [&]() -> Status {
        if (block.empty()) return Status::OK();
        if (m->bad) return Status(Code::io, "another part of the object failed");
        Status s = m->out->pwrite(off + block_at, bytes_of(block));
        block_at += block.size();
        block.clear();
        return s;
    };
    // If-Match: every range comes from the object that was listed, or the copy fails.
    Status s = r.s3.get_stream(r.bucket, it.key, off, len, it.etag, [&](uint64_t pos, std::span<const uint8_t> piece) {
        if (pos != block_at + block.size()) {  // a retry: from the start of the range again
            block.clear();
            block_at = pos;
        }
        block.append(reinterpret_cast<const char*>(piece.data()), piece.size());
        return block.size() >= kBlock ? flush() : Status::OK();
    });
    if (s.ok()) s = flush();
    if (!s.ok()) {
        part_failed(r, *m, s);
    } else {
        r.succeeded();
        r.counters.bytes_done += len;
    }
    get_part_done(r, m);
}

std::map<std::string, std::string> source_meta(const Item& it) {
    return {{"jobfs-mtime-ns", std::to_string(it.mtime_ns)}, {"jobfs-size", std::to_string(it.size)}};
}

// The PUT of [off, off + len) of a file, through small buffers in two passes: the digests
// first (the request's headers carry them), then the body, read into curl's own buffer as it
// is sent. A file changed in between fails the PUT: on the server (400 BadDigest) or, where
// the server does not check Content-MD5 (s3rver), at the ETag check (check_etag).
template <class Put>
Result<std::string> put_streamed(Run& r, ReadHandle& in, const Item& it, uint64_t off, uint64_t len, Put put) {
    thread_local std::vector<uint8_t> buf(kBlock);
    BodyDigests digests;
    for (uint64_t done = 0; done < len;) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(kBlock, len - done));
        auto n = in.pread(off + done, std::span<uint8_t>(buf.data(), want));
        if (!n.ok()) return n.status().with_context("read " + r.fs->display(it.path));
        if (*n == 0) return Status(Code::io, "file shrank while staging");
        digests.update(std::span<const uint8_t>(buf.data(), *n));
        done += *n;
    }
    if (const char* pause = std::getenv("JOBFS_STAGE_TEST_PAUSE_AFTER_DIGEST_MS")) { // fault injection (tests)
        std::fprintf(stderr, "jobfs: stage-out: digested %s; pausing %s ms (JOBFS_STAGE_TEST_PAUSE_AFTER_DIGEST_MS)\n",
                     r.fs->display(it.path).c_str(), pause);
        std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(pause)));
    }
    const S3Client::Source source = [&](uint64_t pos, std::span<uint8_t> out) -> Result<size_t> {
        auto n = in.pread(off + pos, out);
        if (!n.ok()) return n.status().with_context("read " + r.fs->display(it.path));
        return *n;
    };
    return put(digests.end(), source);
}

// A file of at most kBlock bytes: read once into memory (streamed, it would be read twice).
Result<std::string> put_whole(Run& r, ReadHandle& in, const Item& it) {
    std::string data(it.size, '\0');
    auto n = in.pread(0, std::span<uint8_t>(reinterpret_cast<uint8_t*>(data.data()), data.size()));
    if (!n.ok()) return n.status().with_context("read " + r.fs->display(it.path));
    if (*n != it.size) return Status(Code::io, "file shrank while staging");
    return r.s3.put(r.bucket, it.key, bytes_of(data), source_meta(it));  // checks the ETag
}

void put_small(Run& r, Item& it) {
    auto h = r.fs->open(it.path);
    if (!h.ok()) return r.fail(it, h.status());
    auto e = it.size <= kBlock ? put_whole(r, **h, it)
                               : put_streamed(r, **h, it, 0, it.size, [&](const BodyDigest& d, const S3Client::Source& src) {
                                     return r.s3.put(r.bucket, it.key, it.size, d, src, source_meta(it));
                                 });
    if (!e.ok()) return r.fail(it, e.status());
    it.etag = *e;
    r.counters.bytes_done += it.size;
    ++r.counters.objects_done;
    r.succeeded();
}

void put_part(Run& r, const std::shared_ptr<Multi>& m, int part) {
    Item& it = *m->item;
    run_part(
        r, *m, part,
        [&](uint64_t off, uint64_t len) {
            auto e = put_streamed(r, *m->in, it, off, len, [&](const BodyDigest& d, const S3Client::Source& src) {
                return r.s3.multipart_upload_part(r.bucket, it.key, m->upload_id, part + 1, len, d, src);
            });
            if (!e.ok()) return e.status().with_context("part " + std::to_string(part + 1));
            m->etags[static_cast<size_t>(part)] = *e;
            return Status::OK();
        },
        [&](bool ok) {
            if (ok) {
                auto e = r.s3.multipart_complete(r.bucket, it.key, m->upload_id, m->etags);
                if (e.ok()) {
                    it.etag = *e;
                    ++r.counters.objects_done;
                    return;
                }
                r.fail(it, e.status().with_context("CompleteMultipartUpload"));
            }
            // Parts already stored would otherwise be kept (and billed) by the server.
            Status a = r.s3.multipart_abort(r.bucket, it.key, m->upload_id);
            if (!a.ok())
                std::fprintf(stderr, "jobfs: warning: could not abort the multipart upload of %s: %s\n",
                             s3_url(r.bucket, it.key).c_str(), a.message().c_str());
        });
}

// Multipart uploads that an earlier run left open (killed, or its abort failed while the
// endpoint was down) keep their parts on the server, invisible to listings and billed by AWS,
// until aborted. Aborts those of this rank's keys: no other rank writes them, while another
// rank's uploads under the same prefix may be running now and are left alone.
void abort_leftover_uploads(Run& r, const std::string& prefix, const std::vector<Item*>& mine) {
    auto ups = r.s3.multipart_list(r.bucket, prefix);
    if (!ups.ok()) {  // s3rver has no ListMultipartUploads: nothing to learn there
        const std::string& m = ups.status().message();
        if (m.find("NotImplemented") == std::string::npos && m.find("MethodNotAllowed") == std::string::npos)
            std::fprintf(stderr, "jobfs: stage-out: warning: could not list the multipart uploads open under %s: %s\n",
                         s3_url(r.bucket, prefix).c_str(), m.c_str());
        return;
    }
    std::set<std::string> keys;
    for (const Item* it : mine) keys.insert(it->key);
    int aborted = 0;
    for (const auto& u : *ups) {
        if (!keys.count(u.key)) continue;
        Status a = r.s3.multipart_abort(r.bucket, u.key, u.upload_id);
        if (a.ok() || a.code() == Code::not_found) ++aborted;  // 404 NoSuchUpload: gone meanwhile
        else
            std::fprintf(stderr, "jobfs: stage-out: warning: could not abort the multipart upload %s of %s: %s\n",
                         u.upload_id.c_str(), s3_url(r.bucket, u.key).c_str(), a.message().c_str());
    }
    if (aborted)
        std::fprintf(stderr, "jobfs: stage-out: aborted %d multipart upload%s that an earlier run left open under %s\n",
                     aborted, aborted == 1 ? "" : "s", s3_url(r.bucket, prefix).c_str());
}

// ---- planning ----------------------------------------------------------------------------

// Where a stage-in reads: one object (its item made here), or every key below a prefix
// (*list_prefix and *manifest_dir set), listed page by page while the transfers run
// (items_of_page).
Status plan_in(Run& r, const Location& src, const Location& dst, std::deque<Item>& items, std::string* list_prefix,
               std::string* manifest_dir) {
    r.bucket = src.bucket;
    std::string prefix = src.key;
    auto dst_info = r.fs->stat(dst.path);
    const bool dst_is_dir = dst_info.ok() && dst_info->is_dir;
    if (!prefix.empty() && prefix.back() != '/') {
        auto h = r.s3.head(src.bucket, prefix);
        if (h.ok()) {  // one object
            Item it;
            it.key = prefix;
            it.size = h->size;
            it.etag = h->etag;
            it.path = dst.trailing_slash || dst_is_dir ? join(dst.path, basename_of(prefix)) : dst.path;
            items.push_back(it);
            return Status::OK();
        }
        if (h.status().code() != Code::not_found) return h.status();
        prefix += '/';  // not an object: the "directory" of that name, as aws s3 cp --recursive
    }
    if (dst_info.ok() && !dst_is_dir) return Status(Code::not_dir, r.fs->display(dst.path) + " is a file; a prefix is staged into a directory");
    *list_prefix = prefix;
    *manifest_dir = dst.path;
    return Status::OK();
}

// This rank's share of a listed page below `prefix`, as items of a stage-in into `dst`,
// appended to `items`.
void items_of_page(Run& r, const std::string& prefix, const Location& dst, std::vector<ObjectInfo>& page,
                   std::deque<Item>& items) {
    for (auto& o : page) {
        std::string rel = o.key.substr(prefix.size());
        if (rel.empty() || rel.back() == '/' || is_manifest_or_temp(rel)) continue;  // directory markers, our own files
        if (stage_rank_of(o.key, r.o.ranks) != r.o.rank) continue;
        Item it;
        it.key = std::move(o.key);
        it.size = o.size;
        it.etag = std::move(o.etag);
        it.path = join(dst.path, rel);
        items.push_back(std::move(it));
        if (!safe_relative(rel))
            r.fail(items.back(), Status(Code::invalid, "key has an empty, '.' or '..' component: no safe file name below " + r.fs->display(dst.path)));
    }
}

Status plan_out(Run& r, const Location& src, const Location& dst, std::deque<Item>& items, std::string* manifest_prefix) {
    r.bucket = dst.bucket;
    auto st = r.fs->stat(src.path);
    if (!st.ok()) return st.status();
    if (!st->is_dir) {
        Item it;
        it.path = src.path;
        it.size = st->size;
        it.mtime_ns = st->mtime_ns;
        it.key = dst.key.empty() || dst.key.back() == '/' ? dst.key + basename_of(src.path) : dst.key;
        items.push_back(it);
        return Status::OK();
    }
    std::string prefix = dst.key;
    if (!prefix.empty() && prefix.back() != '/') prefix += '/';
    *manifest_prefix = prefix;
    auto files = r.fs->list_files(src.path);
    if (!files.ok()) return files.status();
    for (auto& f : *files) {
        if (is_manifest_or_temp(f.rel)) continue;
        Item it;
        it.path = join(src.path, f.rel);
        it.key = prefix + f.rel;
        it.size = f.size;
        it.mtime_ns = f.mtime_ns;
        items.push_back(std::move(it));
    }
    return Status::OK();
}

std::string manifest_text(const Run& r, const Location& src, const Location& dst, const std::vector<Item*>& mine) {
    std::string t = "# jobfs stage manifest v1\n# " + std::string(r.o.in ? "stage-in " : "stage-out ") + src.text + " " +
                    dst.text + " rank " + std::to_string(r.o.rank) + " of " + std::to_string(r.o.ranks) +
                    ": complete\n# size\tetag\tkey (URI-encoded)\tpath (URI-encoded)\tcopied|skipped\n";
    for (const Item* it : mine)
        t += std::to_string(it->size) + "\t" + it->etag + "\t" + uri_encode(it->key, true) + "\t" +
             uri_encode(it->path, true) + "\t" + (it->skipped ? "skipped" : "copied") + "\n";
    return t;
}

} // namespace

Status stage_run(const StageOptions& o, StageSummary* sum) {
    const auto t0 = Clock::now();
    const char* verb = o.in ? "stage-in" : "stage-out";
    if (o.ranks < 1 || o.rank < 0 || o.rank >= o.ranks)
        return Status(Code::invalid, "rank " + std::to_string(o.rank) + " is not in 0.." + std::to_string(o.ranks - 1));
    if (o.part_size < (5u << 20) && !o.in)
        return Status(Code::invalid, "part size below 5 MiB: S3 refuses such multipart parts");
    // S3's largest part; a stage-in also holds --parallel parts in memory at once.
    if (o.part_size == 0 || o.part_size > (5ull << 30))
        return Status(Code::invalid, "part size " + std::to_string(o.part_size) + " is not in 1 byte..5 GiB (S3's largest part)");
    auto src = location_parse(o.src);
    if (!src.ok()) return src.status();
    auto dst = location_parse(o.dst);
    if (!dst.ok()) return dst.status();
    const Location& remote = o.in ? *src : *dst;
    const Location& files = o.in ? *dst : *src;
    if (remote.kind != Location::s3)
        return Status(Code::invalid, std::string(verb) + ": " + (o.in ? "SRC" : "DST") + " must be an s3:// URL, not '" + remote.text + "'");
    if (files.kind == Location::s3)
        return Status(Code::invalid, std::string(verb) + ": " + (o.in ? "DST" : "SRC") + " must be a jobfs:/path or a local path, not '" + files.text + "'");
    auto cfg = s3_config_resolve(o.s3);
    if (!cfg.ok()) return cfg.status();

    Run r(o, std::move(*cfg));
    if (files.kind == Location::jobfs) {
        auto fs = fs_store_jobfs();
        if (!fs.ok()) return fs.status().with_context("connect to jobfs ($JOBFS_CLUSTER)");
        r.fs = std::move(*fs);
    } else {
        r.fs = fs_store_local();
    }

    // Items live in a deque: the work queued holds pointers to them while a listing still adds.
    std::deque<Item> items;
    std::string manifest_at;  // directory (stage-in) or prefix (stage-out); unset for one object
    std::string list_prefix;  // stage-in of a tree: the keys below it, listed as the copy runs
    bool tree = false;
    const std::string what = o.in ? src->text : dst->text;
    auto planning_failed = [&](const Status& s) {
        return Status(s.code(), std::string(verb) + " " + (o.in ? "from " : "to ") + what + " failed: " + s.message());
    };
    {
        std::string where;
        Status s = o.in ? plan_in(r, *src, *dst, items, &list_prefix, &where) : plan_out(r, *src, *dst, items, &where);
        if (!s.ok()) return planning_failed(s);
        tree = o.in ? !where.empty() : !(items.size() == 1 && items[0].path == src->path);
        manifest_at = where;
    }
    const bool streamed = o.in && tree;
    bool paused = false;
    auto test_pause = [&](size_t listed) { // fault injection (tests), once the listing (or its first page) is in
        const char* pause = std::getenv("JOBFS_STAGE_TEST_PAUSE_AFTER_LIST_MS");
        if (!pause || paused) return;
        paused = true;
        // Said first, so that a test changes the store once the listing is done, however
        // long the start took (a fixed sleep in the test lost that race on a loaded machine).
        std::fprintf(stderr, "%s: listed %zu objects; pausing %s ms (JOBFS_STAGE_TEST_PAUSE_AFTER_LIST_MS)\n", verb,
                     listed, pause);
        std::fflush(stderr);
        std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(pause)));
    };
    if (!streamed) test_pause(items.size());

    // This rank's share (a streamed listing's pages come with only this rank's items).
    std::vector<Item*> mine;
    if (!streamed)
        for (auto& it : items)
            if (stage_rank_of(it.key, o.ranks) == o.rank) mine.push_back(&it);
    std::map<std::string, ObjectInfo> remote_now;
    bool listed = true; // false: the listing failed, so every object is asked for by HEAD
    if (!o.in && o.resume) {
        auto l = r.s3.list(r.bucket, tree ? manifest_at : mine.empty() ? "" : mine[0]->key);
        if (l.ok()) {
            for (auto& x : *l) remote_now[x.key] = x;
        } else if (const std::string& m = l.status().message(); l.status().code() == Code::refused ||
                   l.status().code() == Code::peer_gone || l.status().code() == Code::timeout ||
                   m.find("NoSuchBucket") != std::string::npos ||
                   m.find("SignatureDoesNotMatch") != std::string::npos || m.find("InvalidAccessKeyId") != std::string::npos) {
            return Status(l.status().code(), std::string(verb) + " to " + dst->text + " failed: " + l.status().message());
        } else {
            // Never "nothing is there": a server that lost one object's metadata (killed
            // mid-write) fails the whole listing, yet answers HEAD for every intact object.
            std::fprintf(stderr, "jobfs: %s: listing %s for the resume failed (%s); asking object by object\n", verb,
                         dst->text.c_str(), l.status().message().c_str());
            listed = false;
        }
    }
    if (!o.in && !mine.empty()) abort_leftover_uploads(r, tree ? manifest_at : mine[0]->key, mine);

    // Resume: what a previous run completed is left alone. Stage-in's looks up only the names
    // that are there: one listing per destination directory, not a lookup per object (a fresh
    // destination, the usual case, costs none). A directory that cannot be listed is asked
    // name by name.
    std::map<std::string, std::optional<std::set<std::string>>> present; // nullopt: not listed
    auto may_exist = [&](const std::string& path) {
        const std::string d = dirname_of(path);
        auto p = present.find(d);
        if (p == present.end()) {
            auto n = r.fs->names(d);
            p = present.emplace(d, n.ok() ? std::optional(std::set<std::string>(n->begin(), n->end())) : std::nullopt).first;
        }
        return !p->second || p->second->count(basename_of(path)) != 0;
    };
    std::set<std::string> dirs;  // stage-in: destination directories made
    // An item of this rank: skipped if complete, else counted and its directory made.
    auto admit = [&](Item* it) -> Status {
        if (it->failed) return Status::OK();
        r.counters.objects_total++;
        if (o.resume && o.in) {
            if (may_exist(it->path)) {
                auto f = r.fs->stat(it->path);
                if (f.ok() && !f->is_dir && f->size == it->size && r.fs->recorded_etag(it->path) == it->etag)
                    it->skipped = true;
            }
        } else if (o.resume) {
            auto x = remote_now.find(it->key);
            if (!listed || (x != remote_now.end() && x->second.size == it->size)) {
                auto h = r.s3.head(r.bucket, it->key);
                if (h.ok() && h->meta["jobfs-mtime-ns"] == std::to_string(it->mtime_ns) &&
                    h->meta["jobfs-size"] == std::to_string(it->size)) {
                    it->skipped = true;
                    it->etag = h->etag;
                }
            }
        }
        if (it->skipped) {
            ++r.counters.objects_done;
            return Status::OK();
        }
        r.counters.bytes_total += it->size;
        if (o.in) {
            const std::string d = dirname_of(it->path);
            if (dirs.insert(d).second) {
                Status s = r.fs->mkdirs(d);
                if (!s.ok()) return s.with_context(std::string(verb) + ": create " + r.fs->display(d));
            }
        }
        return Status::OK();
    };

    Status stopped;  // what ended the planning early (a page of the listing, or a directory not made)
    Status synced;   // the file system has every file committed (FileStore::flush_commits)
    size_t listed_n = 0;        // keys listed (a streamed listing)
    bool listing_failed = false; // a streamed listing ended in an error (stopped says which)
    {
        std::optional<Progress> progress;  // from the first work queued: a failed start prints no bar
        // Declared before the S3 pool: destroyed after it, so no GET queues a write on a
        // writer that has stopped.
        Writer writer(o.in ? o.parallel : 0, static_cast<uint64_t>(std::max(1, o.parallel)) * o.part_size);
        Pool pool(o.parallel);
        auto queue = [&](Item* it) {
            if (it->failed || it->skipped) return;
            if (it->size <= (o.in ? o.part_size : std::max(o.part_size, o.multipart_threshold))) {
                pool.add([&r, &writer, it] {
                    if (r.endpoint_down()) return r.fail(*it, Status(Code::refused, "not attempted: the S3 endpoint is unreachable"));
                    r.o.in ? get_small(r, writer, *it) : put_small(r, *it);
                });
                return;
            }
            auto m = std::make_shared<Multi>();
            m->item = it;
            m->parts = static_cast<int>((it->size + o.part_size - 1) / o.part_size);
            if (!o.in && m->parts > 10000) return r.fail(*it, Status(Code::too_large, "more than 10000 parts: use a larger --part-size"));
            m->left = m->parts;
            if (o.in) {
                auto w = r.fs->create(it->path, it->size, it->etag);
                if (!w.ok()) return r.fail(*it, w.status());
                m->out = std::move(*w);
            } else {
                auto h = r.fs->open(it->path);
                if (!h.ok()) return r.fail(*it, h.status());
                m->in = std::move(*h);
                auto id = r.s3.multipart_create(r.bucket, it->key, source_meta(*it));
                if (!id.ok()) return r.fail(*it, id.status().with_context("CreateMultipartUpload"));
                m->upload_id = *id;
                m->etags.resize(static_cast<size_t>(m->parts));
            }
            for (int p = 0; p < m->parts; ++p)
                pool.add([&r, m, p] { r.o.in ? get_part(r, m, p) : put_part(r, m, p); });
        };
        if (streamed) {
            // Each page's objects are queued as it arrives: the copy starts with the first
            // page, not after the last (the server lists the next page while GETs run).
            Status admit_failed;  // a directory not made: said as it is, not as a listing's failure
            r.counters.listing = true;
            stopped = r.s3.list_pages(r.bucket, list_prefix, 1000, [&](std::vector<ObjectInfo>&& page) -> Status {
                listed_n += page.size();
                const size_t first = items.size();
                items_of_page(r, list_prefix, *dst, page, items);
                test_pause(listed_n);
                if (!progress && first < items.size()) progress.emplace(verb, r.counters, o.progress, o.progress_interval_s);
                for (size_t i = first; i < items.size(); ++i) {
                    mine.push_back(&items[i]);
                    if (Status a = admit(&items[i]); !a.ok()) return admit_failed = a;
                    queue(&items[i]);
                }
                return Status::OK();
            });
            r.counters.listing = false;
            if (stopped.ok() && listed_n == 0)
                stopped = Status(Code::not_found, "nothing to stage: no object " + s3_url(src->bucket, src->key) +
                                                      (src->key.empty() || src->key.back() == '/' ? "" : " and none below " + s3_url(src->bucket, list_prefix)));
            listing_failed = !stopped.ok() && admit_failed.ok();
        } else {
            for (Item* it : mine)
                if (stopped = admit(it); !stopped.ok()) break;
            if (stopped.ok()) {
                progress.emplace(verb, r.counters, o.progress, o.progress_interval_s);
                for (Item* it : mine) queue(it);
            }
        }
        pool.wait();
        writer.wait();
        synced = r.fs->flush_commits();
        if (progress) progress->stop();
    }
    // A listing that failed after its first pages had been queued: what was queued finished
    // (above), but nothing claims completeness: no manifest, a non-zero exit, and the message
    // says how far it got.
    if (listing_failed && listed_n > 0)
        return planning_failed(Status(stopped.code(), "the listing stopped after " + std::to_string(listed_n) +
                                                          " keys (" + std::to_string(r.counters.objects_done.load()) +
                                                          " objects copied or complete; run it again to resume): " +
                                                          stopped.message()));
    if (listing_failed) return planning_failed(stopped);
    if (!stopped.ok()) return stopped;
    // Nothing names the files lost: the copy as a whole is not complete (no manifest), and a
    // run again finds which are missing.
    if (!synced.ok())
        return Status(synced.code(), std::string(verb) + " into " + r.fs->display(dst->path) +
                                         ": files reported copied may be missing (run it again to resume): " +
                                         synced.message());

    if (r.not_shown)
        std::fprintf(stderr, "jobfs: %s: %llu more objects failed (not shown)\n", verb,
                     static_cast<unsigned long long>(r.not_shown));
    sum->objects = mine.size();
    sum->failed = r.failed;
    for (Item* it : mine) {
        if (it->skipped) ++sum->skipped;
        else if (!it->failed) ++sum->copied;
    }
    sum->bytes = r.counters.bytes_done;
    sum->seconds = std::chrono::duration<double>(Clock::now() - t0).count();

    // The manifest is written only when all of this rank's objects are complete: its presence
    // says the copy is whole.
    if (r.failed == 0 && tree && o.write_manifest) {
        const std::string text = manifest_text(r, *src, *dst, mine);
        const std::string name = std::string(kManifestName) + (o.ranks > 1 ? ".rank-" + std::to_string(o.rank) : "");
        Status s;
        if (!o.manifest.empty()) {
            auto m = location_parse(o.manifest);
            if (!m.ok()) s = m.status();
            else if (m->kind == Location::s3) s = r.s3.put(m->bucket, m->key, bytes_of(text)).status();
            else if (m->kind == Location::local) s = fs_store_local()->write_file(m->path, text);
            else if (files.kind == Location::jobfs) s = r.fs->write_file(m->path, text);
            else {
                auto js = fs_store_jobfs();
                s = js.ok() ? (*js)->write_file(m->path, text) : js.status();
            }
        } else if (o.in) {
            s = r.fs->write_file(join(manifest_at, name), text);
        } else {
            s = r.s3.put(r.bucket, manifest_at + name, bytes_of(text)).status();
        }
        if (!s.ok()) {
            std::fprintf(stderr, "jobfs: %s: writing the manifest failed: %s\n", verb, s.message().c_str());
            return Status(s.code(), std::string(verb) + " copied everything but could not write its manifest");
        }
    }
    if (r.failed)
        return Status(Code::io, std::string(verb) + " incomplete: " + std::to_string(r.failed) + " of " +
                                    std::to_string(mine.size()) + " objects failed (run it again to resume)");
    return Status::OK();
}

} // namespace jobfs::stage
