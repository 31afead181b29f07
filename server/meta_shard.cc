// meta_shard.cc: the SQLite side of one metadata shard (see meta_shard.h for the rules).
//
// Every public method takes the mutex, records a short description of the operation (used as
// the context of every error it returns), and runs its body; bodies that write run inside
// BEGIN IMMEDIATE … COMMIT and roll back on any error, so a failed operation leaves nothing.
// Bodies read an inode into an Attr, change it in C++ and write the whole row back: simple,
// and a row is small.
#include "meta_shard.h"

#include "log.h"

// The session extension (changesets for replication) is declared only with these; Debian's
// libsqlite3 is built with both (configure checks for sqlite3session_create).
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <unordered_map>

namespace jobfs::server {

namespace {

// 3: inodes.replicas (chain replication, docs/replication.md). A version-2 database is
// migrated when opened: its files were stored once, so they get replicas = 1.
constexpr int64_t kSchemaVersion = 3;
constexpr int kBusyTimeoutMs = 5000;
// WAL pages after which a commit checkpoints the WAL into the database (SQLite's own default
// for its automatic checkpoints, which the WAL hook below replaces).
constexpr int kCheckpointPages = 4000;

// Root's parent walk and corrupt databases: never follow more parents than this.
constexpr int kMaxDepth = 1 << 20;

// Reservations remembered per file (append_tokens): a retry comes back after a failover, which
// stops the shard's appends meanwhile, so only the appends already in flight elsewhere can come
// between a reservation and its retry. Pruned on every 64th reservation (by token): that
// sorts the file's few hundred rows, where an index by size would cost a write on every append.
constexpr int64_t kAppendTokensKept = 256;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS inodes(
    ino INTEGER PRIMARY KEY, type INTEGER NOT NULL, mode INTEGER NOT NULL,
    uid INTEGER NOT NULL, gid INTEGER NOT NULL, size INTEGER NOT NULL, nlink INTEGER NOT NULL,
    atime_ns INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL,
    rdev INTEGER NOT NULL, target BLOB, chunk_size INTEGER NOT NULL,
    stripe_count INTEGER NOT NULL, generation INTEGER NOT NULL, parent INTEGER NOT NULL,
    replicas INTEGER NOT NULL DEFAULT 1);
CREATE TABLE IF NOT EXISTS dentries(
    parent INTEGER NOT NULL, name BLOB NOT NULL, ino INTEGER NOT NULL, type INTEGER NOT NULL,
    PRIMARY KEY(parent, name)) WITHOUT ROWID;
-- Entries are only ever found by their directory (and name). An index by inode, which shards
-- made before 2026-12 carry, answered no query and doubled the B-tree work of every create,
-- unlink and rename.
DROP INDEX IF EXISTS dentries_by_ino;
CREATE TABLE IF NOT EXISTS xattrs(
    ino INTEGER NOT NULL, name BLOB NOT NULL, value BLOB NOT NULL,
    PRIMARY KEY(ino, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
-- Layouts of replicated files whose last link went (docs/replication.md, "Resync"): a file
-- still open somewhere lives on without an inode, and a resync must still find its chunks'
-- chains. One row per such file for the life of the file system (the size of a layout).
CREATE TABLE IF NOT EXISTS removed_files(
    ino INTEGER PRIMARY KEY, chunk_size INTEGER NOT NULL, stripe_count INTEGER NOT NULL,
    replicas INTEGER NOT NULL);
-- The places of the last O_APPEND reservations of each file, by the requester's token: a
-- reservation asked again (its answer was lost with a primary that failed) gets the same place,
-- not a second one (a hole of zeros in the file). Kept on every copy of the shard; about the
-- last kAppendTokensKept per file.
CREATE TABLE IF NOT EXISTS append_tokens(
    ino INTEGER NOT NULL, token INTEGER NOT NULL, size INTEGER NOT NULL,
    PRIMARY KEY(ino, token)) WITHOUT ROWID;
-- Directories delegated to a client (server/dir_delegations.h), by the holder's token.
CREATE TABLE IF NOT EXISTS dir_delegations(dir INTEGER PRIMARY KEY, token INTEGER NOT NULL);
-- Cross-shard operations this shard coordinates and has not finished (docs/design.md).
-- AUTOINCREMENT: an id is never handed out twice, so peers may remember ids they applied.
CREATE TABLE IF NOT EXISTS intents(
    id INTEGER PRIMARY KEY AUTOINCREMENT, op INTEGER NOT NULL, parent INTEGER NOT NULL,
    name BLOB NOT NULL, ino INTEGER NOT NULL, type INTEGER NOT NULL, new_parent INTEGER NOT NULL,
    new_name BLOB NOT NULL, expect_ino INTEGER NOT NULL, peer INTEGER NOT NULL);
-- Steps of other shards' intents applied here (result -1: the step was aborted before it ran).
CREATE TABLE IF NOT EXISTS applied(
    intent INTEGER NOT NULL, step INTEGER NOT NULL, result INTEGER NOT NULL,
    PRIMARY KEY(intent, step)) WITHOUT ROWID;
)sql";

// MetaShard::recall_dir.
thread_local uint64_t t_recall_dir = 0;
thread_local uint64_t t_recall_token = 0;

constexpr const char* kInodeColumns =
    "ino, type, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, rdev, target, "
    "chunk_size, stripe_count, generation, parent, replicas";
constexpr int count_columns(const char* s) { return *s ? (*s == ',') + count_columns(s + 1) : 1; }
constexpr int kInodeColumnCount = count_columns(kInodeColumns);

int64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

uint32_t type_bits(FileType type) {
    switch (type) {
    case FileType::directory: return S_IFDIR;
    case FileType::symlink: return S_IFLNK;
    case FileType::regular: break;
    }
    return S_IFREG;
}

bool valid_type(int64_t t) { return t >= 1 && t <= 3; }

Code code_of_sqlite(int rc) {
    switch (rc & 0xff) {
    case SQLITE_FULL: return Code::no_space;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return Code::busy;
    case SQLITE_NOMEM: return Code::no_memory;
    case SQLITE_PERM:
    case SQLITE_AUTH: return Code::permission;
    case SQLITE_TOOBIG: return Code::too_large;
    case SQLITE_IOERR:
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PROTOCOL: return Code::io;
    default: return Code::internal;
    }
}

// A name for messages: printable bytes as they are, others as \xNN, long names shortened.
std::string quoted(std::string_view name) {
    static const char hex[] = "0123456789abcdef";
    std::string out = "'";
    size_t shown = 0;
    for (unsigned char c : name) {
        if (++shown > 64) {
            out += "...";
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out += char(c);
        } else {
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out + "'";
}

std::string ino_str(uint64_t ino) { return std::to_string(ino); }

// Binds text explicitly (SQLite TEXT); plain strings bind as BLOBs so names of any bytes sort
// and compare bytewise.
struct Text {
    std::string_view s;
};

// One use of a cached prepared statement: binds in order, steps, reads columns, and resets
// the statement when it goes out of scope so the cache can hand it out again.
class Stmt {
public:
    Stmt(sqlite3* db, sqlite3_stmt* s) : db_(db), s_(s) {}
    Stmt(Stmt&& o) noexcept : db_(o.db_), s_(o.s_), n_(o.n_), bind_rc_(o.bind_rc_) { o.s_ = nullptr; }
    Stmt(const Stmt&) = delete;
    Stmt& operator=(const Stmt&) = delete;
    Stmt& operator=(Stmt&&) = delete;
    ~Stmt() {
        if (s_) {
            sqlite3_reset(s_);
            sqlite3_clear_bindings(s_);
        }
    }

    template <class T>
    void bind(const T& v) {
        int rc;
        ++n_;
        if constexpr (std::is_same_v<T, Text>) {
            rc = sqlite3_bind_text(s_, n_, v.s.data() ? v.s.data() : "", int(v.s.size()),
                                   SQLITE_TRANSIENT);
        } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
            std::string_view sv = v;
            // A null pointer would bind NULL; an empty value must stay an empty BLOB.
            rc = sqlite3_bind_blob(s_, n_, sv.data() ? sv.data() : "", int(sv.size()),
                                   SQLITE_TRANSIENT);
        } else if constexpr (std::is_enum_v<T>) {
            rc = sqlite3_bind_int64(s_, n_, static_cast<int64_t>(v));
        } else {
            static_assert(std::is_integral_v<T>, "bind integers, enums, Text or strings");
            rc = sqlite3_bind_int64(s_, n_, static_cast<int64_t>(v));
        }
        if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
    }

    // true: a row is ready; false: done.
    Result<bool> step() {
        if (bind_rc_ != SQLITE_OK) return error(bind_rc_);
        int rc = sqlite3_step(s_);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        return error(rc);
    }

    int64_t i64(int col) const { return sqlite3_column_int64(s_, col); }
    uint64_t u64(int col) const { return static_cast<uint64_t>(i64(col)); }
    uint32_t u32(int col) const { return static_cast<uint32_t>(i64(col)); }
    bool is_null(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }
    std::string bytes(int col) const {
        const void* p = sqlite3_column_blob(s_, col);
        int n = sqlite3_column_bytes(s_, col);
        return p ? std::string(static_cast<const char*>(p), size_t(n)) : std::string();
    }

private:
    Status error(int rc) const {
        return Status(code_of_sqlite(rc), std::string("sqlite: ") + sqlite3_errmsg(db_));
    }

    sqlite3* db_;
    sqlite3_stmt* s_;
    int n_ = 0;
    int bind_rc_ = SQLITE_OK;
};

} // namespace

bool Cred::in_group(uint32_t g) const {
    return g == gid || std::find(groups.begin(), groups.end(), g) != groups.end();
}

bool may_access(const Attr& attr, const Cred& cred, int mask) {
    if (cred.uid == 0) {
        // Root may do anything, except execute a file nobody may execute.
        if ((mask & kMayExec) && attr.type != FileType::directory && !(attr.mode & 0111))
            return false;
        return true;
    }
    uint32_t bits;
    if (cred.uid == attr.uid)
        bits = (attr.mode >> 6) & 7;
    else if (cred.in_group(attr.gid))
        bits = (attr.mode >> 3) & 7;
    else
        bits = attr.mode & 7;
    return (bits & uint32_t(mask)) == uint32_t(mask);
}

// ------------------------------------------------------------------------------------------
struct MetaShard::Impl {
    sqlite3* db = nullptr;
    uint32_t shard_id = 0;
    uint32_t default_chunk_size = kDefaultChunkSize;
    uint32_t default_stripe_count = 0;  // 0: all daemons
    uint32_t default_replicas = 1;
    std::mutex mu;
    std::string op;  // the running operation, for error messages ("mkdir 'a' in 1")
    std::unordered_map<std::string, sqlite3_stmt*> stmts;
    // The same statements by the address of their text: almost all SQL here is a literal (or a
    // static string), found again without building and hashing a string (a delegated unlink
    // prepares six statements; the string lookups were a seventh of its time).
    std::unordered_map<const char*, sqlite3_stmt*> stmts_by_text;
    // Replication, primary side (start_shipping): the changes of the running transaction are
    // recorded by `session`, made afresh at each BEGIN.
    MetaShard::ShipFn ship;
    uint64_t term = 0;
    // note_intents_done: per coordinator shard, the intent id below which all are finished.
    std::unordered_map<uint32_t, uint64_t> intents_done_below;
    sqlite3_session* session = nullptr;
    // The WAL's pages after the last commit (on_wal_commit), and whether the running operation
    // leaves checkpoints to others: it runs on the transport's progress thread (a try_ write),
    // where the fsyncs of a checkpoint must not happen.
    int wal_pages = 0;
    bool no_checkpoint = false;
    MetaShard::ChangeObserver observer; // set_change_observer
    void changed(uint64_t ino) {
        if (observer.inode) observer.inode(ino);
    }
    // Every row of `inodes` written or removed (its rowid is the inode number).
    static void on_row_change(void* arg, int, const char*, const char* table, sqlite3_int64 rowid) {
        auto* self = static_cast<Impl*>(arg);
        if (std::strcmp(table, "inodes") == 0) self->changed(static_cast<uint64_t>(rowid));
    }
    struct NoCheckpoint {
        Impl& impl;
        explicit NoCheckpoint(Impl& i) : impl(i) { impl.no_checkpoint = true; }
        ~NoCheckpoint() { impl.no_checkpoint = false; }
    };

    ~Impl() {
        if (session) sqlite3session_delete(session);
        for (auto& [sql, s] : stmts) sqlite3_finalize(s);
        if (db) sqlite3_close(db);
    }

    // ---- errors ---------------------------------------------------------------------------
    Status fail(Code code, std::string_view what) const {
        std::string msg = op;
        msg += ": ";
        msg += what;
        return Status(code, std::move(msg));
    }
    Status with_op(const Status& s) const {
        // Errors made by fail() already name the operation; SQLite's do not.
        if (s.ok() || s.message().rfind(op, 0) == 0) return s;
        return s.with_context(op);
    }

    // ---- statements -----------------------------------------------------------------------
    Result<Stmt> prepare(const char* sql) {
        // A text at the address of another, freed one: sqlite3_sql is the text it was made of.
        if (auto p = stmts_by_text.find(sql); p != stmts_by_text.end() && std::strcmp(sqlite3_sql(p->second), sql) == 0)
            return Stmt(db, p->second);
        auto it = stmts.find(sql);
        if (it == stmts.end()) {
            sqlite3_stmt* s = nullptr;
            int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr);
            if (rc != SQLITE_OK)
                return Status(code_of_sqlite(rc), std::string("sqlite: prepare: ") + sqlite3_errmsg(db));
            it = stmts.emplace(sql, s).first;
        }
        if (stmts_by_text.size() > 2 * stmts.size() + 64) stmts_by_text.clear(); // texts built at run time
        stmts_by_text[sql] = it->second;
        return Stmt(db, it->second);
    }

    template <class... Args>
    Result<Stmt> query(const char* sql, const Args&... args) {
        auto st = prepare(sql);
        if (!st.ok()) return st.status();
        (st->bind(args), ...);
        return st;
    }

    // Runs a statement that returns no rows.
    template <class... Args>
    Status run(const char* sql, const Args&... args) {
        auto st = query(sql, args...);
        if (!st.ok()) return st.status();
        auto r = st->step();
        if (!r.ok()) return r.status();
        return Status::OK();
    }

    // Runs SQL text once, uncached (schema, pragmas, transaction control).
    Status exec(const char* sql) {
        char* err = nullptr;
        int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
        if (rc == SQLITE_OK) return Status::OK();
        std::string msg = std::string("sqlite: ") + (err ? err : sqlite3_errmsg(db));
        sqlite3_free(err);
        return Status(code_of_sqlite(rc), msg);
    }

    // One transaction around fn; fn returns Status or Result<T>. Any error rolls back.
    // With shipping on, the changes are shipped to the replicas before the commit; `local`
    // transactions never are (a replica applying its primary's changes, its own bookkeeping).
    template <class F>
    auto transact(F&& fn, bool local = false) -> decltype(fn()) {
        Status begun = exec("BEGIN IMMEDIATE");
        if (!begun.ok()) return with_op(begun);
        const bool shipping = ship && !local;
        if (shipping) {
            Status rec = record();
            if (!rec.ok()) {
                rollback();
                return with_op(rec);
            }
        }
        auto r = fn();
        if (r.ok()) {
            Status shipped = shipping ? ship_changes() : Status::OK();
            Status done = shipped.ok() ? exec("COMMIT") : shipped;
            if (done.ok()) return r;
            rollback();
            return with_op(done);
        }
        rollback();
        return with_op(jobfs_status_of(r));
    }

    // A new session for the transaction just begun (a session keeps what it recorded, so one
    // per transaction: a rolled-back body's changes are never shipped later).
    Status record() {
        if (session) sqlite3session_delete(session);
        session = nullptr;
        int rc = sqlite3session_create(db, "main", &session);
        if (rc == SQLITE_OK) rc = sqlite3session_attach(session, nullptr); // every table
        if (rc != SQLITE_OK) return Status(code_of_sqlite(rc), std::string("sqlite: session: ") + sqlite3_errstr(rc));
        return Status::OK();
    }

    // The transaction's changes, numbered: the next seq and the term are written into meta
    // first, so the changeset itself moves every replica's position.
    Status ship_changes() {
        if (!session || sqlite3session_isempty(session)) return Status::OK(); // read-only
        auto at = position_now();
        if (!at.ok()) return at.status();
        MetaShard::ReplPosition next{term, at->seq + 1};
        JOBFS_RETURN_IF_ERROR(put_meta("repl_term", next.term));
        JOBFS_RETURN_IF_ERROR(put_meta("repl_seq", next.seq));
        int n = 0;
        void* buf = nullptr;
        int rc = sqlite3session_changeset(session, &n, &buf);
        if (rc != SQLITE_OK) return Status(code_of_sqlite(rc), std::string("sqlite: changeset: ") + sqlite3_errstr(rc));
        Status s = ship(*at, next, std::span<const uint8_t>(static_cast<const uint8_t*>(buf), size_t(n)));
        sqlite3_free(buf);
        return s;
    }

    Status put_meta(const char* key, uint64_t value) {
        return run("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                   Text{key}, value);
    }

    Result<int64_t> meta_value_or(const char* key, int64_t fallback) {
        auto st = query("SELECT value FROM meta WHERE key = ?", Text{key});
        if (!st.ok()) return st.status();
        auto row = st->step();
        if (!row.ok()) return row.status();
        return *row ? st->i64(0) : fallback;
    }

    Result<MetaShard::ReplPosition> position_now() {
        auto t = meta_value_or("repl_term", 0);
        if (!t.ok()) return t.status();
        auto q = meta_value_or("repl_seq", 0);
        if (!q.ok()) return q.status();
        return MetaShard::ReplPosition{uint64_t(*t), uint64_t(*q)};
    }

    void rollback() {
        // SQLite may already have rolled back by itself (SQLITE_FULL, I/O errors).
        if (!sqlite3_get_autocommit(db)) (void)exec("ROLLBACK");
    }

    // ---- rows -----------------------------------------------------------------------------
    // Every row of a statement that selects kInodeColumns.
    static Result<std::vector<Attr>> attrs_of(Stmt& st) {
        std::vector<Attr> out;
        for (;;) {
            auto row = st.step();
            if (!row.ok()) return row.status();
            if (!*row) break;
            out.push_back(attr_of(st));
        }
        return out;
    }

    static Attr attr_of(const Stmt& st) {
        Attr a;
        a.ino = st.u64(0);
        a.type = static_cast<FileType>(st.i64(1));
        a.mode = st.u32(2);
        a.uid = st.u32(3);
        a.gid = st.u32(4);
        a.size = st.u64(5);
        a.nlink = st.u32(6);
        a.atime_ns = st.i64(7);
        a.mtime_ns = st.i64(8);
        a.ctime_ns = st.i64(9);
        a.rdev = st.u64(10);
        a.target = st.bytes(11);
        a.chunk_size = st.u32(12);
        a.stripe_count = st.u32(13);
        a.generation = st.u64(14);
        a.parent = st.u64(15);
        a.replicas = st.u32(16);
        return a;
    }

    Result<std::optional<Attr>> find_inode(uint64_t ino) {
        static const std::string sql =
            std::string("SELECT ") + kInodeColumns + " FROM inodes WHERE ino = ?";
        auto st = query(sql.c_str(), ino);
        if (!st.ok()) return st.status();
        auto row = st->step();
        if (!row.ok()) return row.status();
        if (!*row) return std::optional<Attr>();
        return std::optional<Attr>(attr_of(*st));
    }

    Result<Attr> load_inode(uint64_t ino) {
        auto a = find_inode(ino);
        if (!a.ok()) return a.status();
        if (!a->has_value()) return missing(ino);
        return std::move(**a);
    }

    // A directory whose entries the operation reads or changes: not while it is delegated to
    // someone else (Code::recall).
    Result<Attr> load_dir(uint64_t ino) {
        auto a = load_inode(ino);
        if (!a.ok()) return a;
        if (a->type != FileType::directory)
            return fail(Code::not_dir, "inode " + ino_str(ino) + " is not a directory");
        JOBFS_RETURN_IF_ERROR(check_delegation(ino));
        return a;
    }

    // ---- directory delegations ------------------------------------------------------------
    // The token of the delegation the running operation acts under (delegate_dir, dir_ops);
    // 0 for every other operation.
    uint64_t acting_token = 0;
    struct ActingAs {
        Impl& impl;
        ActingAs(Impl& i, uint64_t token) : impl(i) { impl.acting_token = token; }
        ~ActingAs() { impl.acting_token = 0; }
    };

    // The token dir is delegated to, 0 if none.
    Result<uint64_t> delegation_of(uint64_t dir) {
        auto st = query("SELECT token FROM dir_delegations WHERE dir = ?", dir);
        if (!st.ok()) return st.status();
        auto row = st->step();
        if (!row.ok()) return row.status();
        return *row ? st->u64(0) : 0;
    }

    Status check_delegation(uint64_t dir) {
        auto t = delegation_of(dir);
        if (!t.ok()) return t.status();
        if (*t == 0 || *t == acting_token) return Status::OK();
        return with_op(MetaShard::must_recall(dir, *t));
    }

    // Inode numbers [first, first + n) for a holder's new files, taken from the counter.
    Result<std::pair<uint64_t, uint32_t>> reserve_inos(uint32_t n) {
        auto next = meta_value("next_seq");
        if (!next.ok()) return next.status();
        const uint64_t seq = uint64_t(*next);
        if (seq + n >= kSeqMask) return fail(Code::no_space, "inode numbers exhausted");
        JOBFS_RETURN_IF_ERROR(run("UPDATE meta SET value = ? WHERE key = 'next_seq'", seq + n));
        return std::make_pair(make_ino(shard_id, seq), n);
    }

    // An entry and, in the same statement, its inode's row when that is on this shard: one
    // statement instead of find_dentry's and load_local's (SQLite's cost per statement is most
    // of a delegated unlink's).
    struct EntryHere {
        DirEntry entry;
        std::optional<Attr> attr; // none: the inode's row is not here
    };
    Result<std::optional<EntryHere>> find_entry_here(uint64_t parent, const std::string& name) {
        static const std::string sql = std::string("SELECT ") + kInodeColumns +
                                       ", e_ino, e_type FROM (SELECT ino AS e_ino, type AS e_type FROM dentries "
                                       "WHERE parent = ? AND name = ?) LEFT JOIN inodes ON ino = e_ino";
        auto st = query(sql.c_str(), parent, name);
        if (!st.ok()) return st.status();
        auto row = st->step();
        if (!row.ok()) return row.status();
        if (!*row) return std::optional<EntryHere>();
        EntryHere out{DirEntry{name, st->u64(kInodeColumnCount), static_cast<FileType>(st->i64(kInodeColumnCount + 1))}, {}};
        if (!st->is_null(0)) out.attr = attr_of(*st);
        return std::optional<EntryHere>(std::move(out));
    }

    // A whole operation can use an inode only when it is on this shard.
    Status here(uint64_t ino) const {
        if (shard_of(ino) == shard_id) return Status::OK();
        return fail(Code::cross_device, "inode " + ino_str(ino) + " lives on shard " + std::to_string(shard_of(ino)));
    }
    Status missing(uint64_t ino) const { return fail(Code::not_found, "inode " + ino_str(ino) + " not found"); }

    // load_local's answer for an entry find_entry_here found.
    Result<Attr> local_of(EntryHere&& e) {
        JOBFS_RETURN_IF_ERROR(here(e.entry.ino));
        if (!e.attr) return missing(e.entry.ino);
        return std::move(*e.attr);
    }

    // The attributes of a dentry's inode, which a whole operation can only use when it is here.
    Result<Attr> load_local(const DirEntry& e) {
        JOBFS_RETURN_IF_ERROR(here(e.ino));
        return load_inode(e.ino);
    }

    // getattr and lookup, under the shard's lock (taken or tried by the caller).
    Result<Attr> getattr_locked(uint64_t ino);
    Result<Attr> lookup_locked(const Cred& cred, uint64_t parent, const std::string& name);

    Status insert_inode(const Attr& a) { return run_insert_inode(false, a); }

    // insert_inode unless the number is taken (false, nothing written): the check and the
    // insert in one statement, as a delegated create needs them.
    Result<bool> insert_inode_unless_taken(const Attr& a) {
        JOBFS_RETURN_IF_ERROR(run_insert_inode(true, a));
        return sqlite3_changes(db) == 1;
    }

    Status run_insert_inode(bool unless_taken, const Attr& a) {
        static const std::string insert = std::string("INSERT INTO inodes(") + kInodeColumns +
                                          ") VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
        static const std::string unless = insert + " ON CONFLICT(ino) DO NOTHING";
        return run((unless_taken ? unless : insert).c_str(), a.ino, a.type, a.mode, a.uid, a.gid, a.size, a.nlink,
                   a.atime_ns, a.mtime_ns, a.ctime_ns, a.rdev, a.target, a.chunk_size, a.stripe_count, a.generation,
                   a.parent, a.replicas);
    }

    Status store_inode(const Attr& a) {
        return run("UPDATE inodes SET mode = ?, uid = ?, gid = ?, size = ?, nlink = ?, "
                   "atime_ns = ?, mtime_ns = ?, ctime_ns = ?, rdev = ?, target = ?, "
                   "chunk_size = ?, stripe_count = ?, parent = ?, replicas = ? WHERE ino = ?",
                   a.mode, a.uid, a.gid, a.size, a.nlink, a.atime_ns, a.mtime_ns, a.ctime_ns,
                   a.rdev, a.target, a.chunk_size, a.stripe_count, a.parent, a.replicas, a.ino);
    }

    // replicated: the inode may be a replicated regular file (false when its row says it is
    // not: the row's layout need not be looked up again).
    Status erase_inode(uint64_t ino, bool replicated = true) {
        if (replicated)
            JOBFS_RETURN_IF_ERROR(run("INSERT OR REPLACE INTO removed_files(ino, chunk_size, stripe_count, replicas) "
                                      "SELECT ino, chunk_size, stripe_count, replicas FROM inodes "
                                      "WHERE ino = ? AND type = 1 AND replicas > 1", ino));
        if (!none_in.xattrs) JOBFS_RETURN_IF_ERROR(run("DELETE FROM xattrs WHERE ino = ?", ino));
        if (!none_in.append_tokens) JOBFS_RETURN_IF_ERROR(run("DELETE FROM append_tokens WHERE ino = ?", ino));
        return run("DELETE FROM inodes WHERE ino = ?", ino);
    }

    // Tables known to be empty in the running transaction, so that erase_inode need not
    // delete the inode's rows there: a batch of delegated unlinks asks once (two statements of
    // six per unlink saved). Set by EmptyTables for its scope; whatever writes such a row
    // clears its flag (saw_xattr, saw_append_token).
    struct NoneIn {
        bool xattrs = false, append_tokens = false;
    } none_in;
    class EmptyTables {
    public:
        explicit EmptyTables(Impl& im) : im_(im) {}
        Status look() {
            auto x = im_.count("SELECT EXISTS(SELECT 1 FROM xattrs)");
            if (!x.ok()) return x.status();
            auto t = im_.count("SELECT EXISTS(SELECT 1 FROM append_tokens)");
            if (!t.ok()) return t.status();
            im_.none_in = NoneIn{*x == 0, *t == 0};
            return Status::OK();
        }
        ~EmptyTables() { im_.none_in = NoneIn{}; }
        EmptyTables(const EmptyTables&) = delete;
        EmptyTables& operator=(const EmptyTables&) = delete;

    private:
        Impl& im_;
    };
    void saw_xattr() { none_in.xattrs = false; }
    void saw_append_token() { none_in.append_tokens = false; }

    Result<std::optional<DirEntry>> find_dentry(uint64_t parent, const std::string& name) {
        auto st = query("SELECT ino, type FROM dentries WHERE parent = ? AND name = ?", parent, name);
        if (!st.ok()) return st.status();
        auto row = st->step();
        if (!row.ok()) return row.status();
        if (!*row) return std::optional<DirEntry>();
        return std::optional<DirEntry>(
            DirEntry{name, st->u64(0), static_cast<FileType>(st->i64(1))});
    }

    Status put_dentry(uint64_t parent, const std::string& name, uint64_t ino, FileType type) {
        return run("INSERT INTO dentries(parent, name, ino, type) VALUES(?, ?, ?, ?)", parent,
                   name, ino, type);
    }

    Status erase_dentry(uint64_t parent, const std::string& name) {
        // The inode may keep its row (other links, or it lives on another shard): what was
        // known of it under this name is gone all the same.
        if (observer.inode) {
            auto e = find_dentry(parent, name);
            if (!e.ok()) return e.status();
            if (*e) changed((*e)->ino);
        }
        return run("DELETE FROM dentries WHERE parent = ? AND name = ?", parent, name);
    }

    // Asked before a directory is removed (or replaced): not while it is delegated.
    Result<bool> has_entries(uint64_t dir) {
        JOBFS_RETURN_IF_ERROR(check_delegation(dir));
        auto st = query("SELECT 1 FROM dentries WHERE parent = ? LIMIT 1", dir);
        if (!st.ok()) return st.status();
        return st->step();
    }

    // The directory holding directory ino (none for the root). An inode of another shard is
    // that shard's to answer: cross_device, and the coordinator walks on there.
    Result<std::optional<uint64_t>> parent_of_dir(uint64_t ino) {
        if (shard_of(ino) != shard_id)
            return fail(Code::cross_device, "the parent of inode " + ino_str(ino) + " is on shard " +
                                                std::to_string(shard_of(ino)));
        auto a = load_inode(ino);
        if (!a.ok()) return a.status();
        if (a->parent == 0) return std::optional<uint64_t>();
        return std::optional<uint64_t>(a->parent);
    }

    // Whether dir is ancestor (or itself) of ino. Walks up the parent pointers; a walk that
    // leaves this shard fails with cross_device.
    Result<bool> contains(uint64_t dir, uint64_t ino) {
        uint64_t cur = ino;
        for (int depth = 0; depth < kMaxDepth; ++depth) {
            if (cur == dir) return true;
            auto up = parent_of_dir(cur);
            if (!up.ok()) return up.status();
            if (!up->has_value()) return false;
            cur = **up;
        }
        return fail(Code::io, "directory loop above inode " + ino_str(ino));
    }

    Result<int64_t> meta_value(const char* key) {
        auto st = query("SELECT value FROM meta WHERE key = ?", Text{key});
        if (!st.ok()) return st.status();
        auto row = st->step();
        if (!row.ok()) return row.status();
        if (!*row) return fail(Code::io, std::string("meta key ") + key + " missing");
        return st->i64(0);
    }

    // Inode numbers come from a counter in meta, advanced in the same transaction as the
    // insert: a rolled-back create consumes nothing, a committed one is never handed out again.
    Result<uint64_t> alloc_ino() {
        auto next = meta_value("next_seq");
        if (!next.ok()) return next.status();
        uint64_t seq = uint64_t(*next);
        if (seq >= kSeqMask) return fail(Code::no_space, "inode numbers exhausted");
        JOBFS_RETURN_IF_ERROR(run("UPDATE meta SET value = ? WHERE key = 'next_seq'", seq + 1));
        return make_ino(shard_id, seq);
    }

    // ---- checks -------------------------------------------------------------------------
    Status check_name(const std::string& name) const {
        if (name.empty()) return fail(Code::invalid, "empty name");
        if (name == "." || name == "..") return fail(Code::invalid, "name " + quoted(name) + " is reserved");
        if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos)
            return fail(Code::invalid, "name " + quoted(name) + " contains '/' or NUL");
        if (name.size() > kMaxNameLen)
            return fail(Code::name_too_long, "name is " + std::to_string(name.size()) +
                                                 " bytes, more than " + std::to_string(kMaxNameLen));
        return Status::OK();
    }

    Status need(const Attr& a, const Cred& cred, int mask) const {
        if (may_access(a, cred, mask)) return Status::OK();
        std::string what;
        if (mask & kMayRead) what += "read";
        if (mask & kMayWrite) what += what.empty() ? "write" : "+write";
        if (mask & kMayExec) what += what.empty() ? "search" : "+search";
        return fail(Code::permission, "uid " + std::to_string(cred.uid) + " lacks " + what +
                                          " permission on inode " + ino_str(a.ino));
    }

    static bool owner_or_root(const Attr& a, const Cred& cred) {
        return cred.uid == 0 || cred.uid == a.uid;
    }

    // In a sticky directory only the owner of the entry or of the directory (or root) may
    // remove or rename it.
    Status check_sticky(const Attr& dir, const Attr& victim, const Cred& cred) const {
        if (!(dir.mode & S_ISVTX) || owner_or_root(dir, cred) || owner_or_root(victim, cred))
            return Status::OK();
        return fail(Code::not_permitted, "sticky directory " + ino_str(dir.ino) +
                                             ": uid " + std::to_string(cred.uid) +
                                             " owns neither it nor inode " + ino_str(victim.ino));
    }

    Status check_layout(const Layout& l) const {
        if (l.replicas > kMaxReplicas)
            return fail(Code::invalid, "replication factor " + std::to_string(l.replicas) + " is not 1 to " +
                                           std::to_string(kMaxReplicas));
        if (l.chunk_size == 0) return Status::OK();
        if (l.chunk_size < kMinChunkSize || l.chunk_size > kMaxChunkSize ||
            (l.chunk_size & (l.chunk_size - 1)) != 0)
            return fail(Code::invalid, "chunk size " + std::to_string(l.chunk_size) +
                                           " is not a power of two from 4 KiB to 1 GiB");
        return Status::OK();
    }

    // Lookup in a directory: the name, the directory, search permission.
    Result<Attr> dir_for_name(const Cred& cred, uint64_t parent, const std::string& name) {
        JOBFS_RETURN_IF_ERROR(check_name(name));
        auto dir = load_dir(parent);
        if (!dir.ok()) return dir;
        JOBFS_RETURN_IF_ERROR(need(*dir, cred, kMayExec));
        return dir;
    }

    Result<DirEntry> get_dentry(uint64_t parent, const std::string& name) {
        auto e = find_dentry(parent, name);
        if (!e.ok()) return e.status();
        if (!e->has_value()) return fail(Code::not_found, "no entry");
        return std::move(**e);
    }

    // ---- building blocks of the operations --------------------------------------------
    // A fresh inode owned by cred in dir, following the BSD/Linux setgid-directory rule.
    Attr new_inode(FileType type, uint32_t perms, const Cred& cred, const Attr& dir) {
        Attr a;
        a.type = type;
        a.mode = type_bits(type) | (perms & 07777);
        a.uid = cred.uid;
        a.gid = cred.gid;
        if (dir.mode & S_ISGID) {
            a.gid = dir.gid;
            if (type == FileType::directory) a.mode |= S_ISGID;
        }
        // A non-member may not create a setgid file of a group it is not in.
        if (type == FileType::regular && (a.mode & S_ISGID) && cred.uid != 0 && !cred.in_group(a.gid))
            a.mode &= ~uint32_t(S_ISGID);
        a.atime_ns = a.mtime_ns = a.ctime_ns = now_ns();
        a.generation = 1;
        // A directory's parent; for a file, the directory its (last renamed) name is in, so
        // that a request by inode finds the directory a client may hold (meta_service: Getattr).
        a.parent = dir.ino;
        return a;
    }

    // Gives a an inode number and stores it.
    Status add_inode(Attr& a) {
        auto ino = alloc_ino();
        if (!ino.ok()) return ino.status();
        a.ino = *ino;
        return insert_inode(a);
    }

    // Bookkeeping of a directory whose entries changed: times, and the link a subdirectory's
    // ".." holds on it.
    Status touch_dir(Attr& dir, int subdir_delta, int64_t now) {
        dir.mtime_ns = dir.ctime_ns = now;
        int64_t nlink = int64_t(dir.nlink) + subdir_delta;
        dir.nlink = uint32_t(std::max<int64_t>(nlink, 0));
        return store_inode(dir);
    }

    Status add_entry(Attr& dir, const std::string& name, const Attr& child) {
        JOBFS_RETURN_IF_ERROR(put_dentry(dir.ino, name, child.ino, child.type));
        return touch_dir(dir, child.type == FileType::directory ? 1 : 0, child.ctime_ns);
    }

    // One link of a fewer; the inode goes with its last link.
    Result<UnlinkResult> drop_link(Attr a, int64_t now) {
        UnlinkResult out;
        a.nlink = a.nlink > 0 ? a.nlink - 1 : 0;
        // A directory has no links left once its name is gone (its "." does not count).
        if (a.type == FileType::directory) a.nlink = 0;
        a.ctime_ns = now;
        out.last_link = a.nlink == 0;
        if (out.last_link) {
            JOBFS_RETURN_IF_ERROR(erase_inode(a.ino, a.type == FileType::regular && a.replicas > 1));
        } else {
            JOBFS_RETURN_IF_ERROR(store_inode(a));
        }
        out.attr = std::move(a);
        return out;
    }

    // The layout of a new file in dir: what was asked, else the directory's default, else
    // the shard's.
    Layout file_layout(const Attr& dir, Layout asked) const {
        return Layout{asked.chunk_size ? asked.chunk_size : dir.chunk_size ? dir.chunk_size : default_chunk_size,
                      asked.stripe_count ? asked.stripe_count : dir.stripe_count ? dir.stripe_count : default_stripe_count,
                      asked.replicas ? asked.replicas : dir.replicas ? dir.replicas : default_replicas};
    }

    // ---- operations -----------------------------------------------------------------------
    Result<Attr> do_create(const Cred& cred, uint64_t parent, const std::string& name,
                           uint32_t mode, bool exclusive, Layout layout, const NewFile& init) {
        if (!exclusive && (init.size != 0 || !init.xattrs.empty()))
            return fail(Code::invalid, "size and attributes at create need an exclusive create");
        if (init.size > uint64_t(INT64_MAX)) return fail(Code::too_large, "size too large");
        auto dir = dir_for_name(cred, parent, name);
        if (!dir.ok()) return dir;
        auto existing = find_dentry(parent, name);
        if (!existing.ok()) return existing.status();
        if (existing->has_value()) {
            if (exclusive) return fail(Code::exists, "exists");
            if ((*existing)->type == FileType::directory) return fail(Code::is_dir, "is a directory");
            return load_local(**existing);
        }
        JOBFS_RETURN_IF_ERROR(need(*dir, cred, kMayWrite | kMayExec));
        JOBFS_RETURN_IF_ERROR(check_layout(layout));
        Attr a = new_inode(FileType::regular, mode, cred, *dir);
        a.nlink = 1;
        const Layout l = file_layout(*dir, layout);
        a.chunk_size = l.chunk_size;
        a.stripe_count = l.stripe_count;
        a.replicas = l.replicas;
        a.size = init.size;
        JOBFS_RETURN_IF_ERROR(add_inode(a));
        JOBFS_RETURN_IF_ERROR(add_entry(*dir, name, a));
        if (init.xattrs.empty()) return a;
        for (const auto& [n, v] : init.xattrs) JOBFS_RETURN_IF_ERROR(do_setxattr(cred, a.ino, n, v, 0));
        return load_inode(a.ino);
    }

    // Checks shared by mkdir, symlink and link: the name is free and the directory writable
    // (after the search check, in the order Linux reports them).
    Result<Attr> dir_for_new_name(const Cred& cred, uint64_t parent, const std::string& name) {
        auto dir = dir_for_name(cred, parent, name);
        if (!dir.ok()) return dir;
        auto existing = find_dentry(parent, name);
        if (!existing.ok()) return existing.status();
        if (existing->has_value()) return fail(Code::exists, "exists");
        JOBFS_RETURN_IF_ERROR(need(*dir, cred, kMayWrite | kMayExec));
        return dir;
    }

    Result<Attr> do_mkdir(const Cred& cred, uint64_t parent, const std::string& name, uint32_t mode) {
        auto dir = dir_for_new_name(cred, parent, name);
        if (!dir.ok()) return dir;
        Attr a = new_inode(FileType::directory, mode, cred, *dir);
        a.nlink = 2;
        a.parent = dir->ino;
        a.chunk_size = dir->chunk_size;
        a.stripe_count = dir->stripe_count;
        a.replicas = dir->replicas;
        JOBFS_RETURN_IF_ERROR(add_inode(a));
        JOBFS_RETURN_IF_ERROR(add_entry(*dir, name, a));
        return a;
    }

    Result<Attr> do_symlink(const Cred& cred, uint64_t parent, const std::string& name,
                            const std::string& target) {
        auto dir = dir_for_new_name(cred, parent, name);
        if (!dir.ok()) return dir;
        if (target.empty()) return fail(Code::not_found, "empty target");
        if (target.find('\0') != std::string::npos) return fail(Code::invalid, "target contains NUL");
        if (target.size() > kMaxSymlinkLen) return fail(Code::name_too_long, "target too long");
        Attr a = new_inode(FileType::symlink, 0777, cred, *dir);
        a.mode = S_IFLNK | 0777;
        a.nlink = 1;
        a.target = target;
        a.size = target.size();
        JOBFS_RETURN_IF_ERROR(add_inode(a));
        JOBFS_RETURN_IF_ERROR(add_entry(*dir, name, a));
        return a;
    }

    Result<Attr> do_link(const Cred& cred, uint64_t ino, uint64_t new_parent, const std::string& name) {
        auto a = load_local(DirEntry{"", ino, FileType::regular});
        if (!a.ok()) return a;
        if (a->type == FileType::directory) return fail(Code::not_permitted, "hard link to a directory");
        auto dir = dir_for_new_name(cred, new_parent, name);
        if (!dir.ok()) return dir;
        if (a->nlink >= kMaxLinks) return fail(Code::too_large, "too many links");
        int64_t now = now_ns();
        a->nlink += 1;
        a->ctime_ns = now;
        JOBFS_RETURN_IF_ERROR(store_inode(*a));
        JOBFS_RETURN_IF_ERROR(put_dentry(dir->ino, name, a->ino, a->type));
        JOBFS_RETURN_IF_ERROR(touch_dir(*dir, 0, now));
        return a;
    }

    // The entry to remove from parent, after the checks unlink and rmdir share (permission,
    // then sticky bit, as Linux orders them).
    struct Victim {
        Attr dir;
        DirEntry entry;
        Attr attr;
    };
    Result<Victim> victim(const Cred& cred, uint64_t parent, const std::string& name) {
        auto dir = dir_for_name(cred, parent, name);
        if (!dir.ok()) return dir.status();
        auto e = get_dentry(parent, name);
        if (!e.ok()) return e.status();
        JOBFS_RETURN_IF_ERROR(need(*dir, cred, kMayWrite | kMayExec));
        auto a = load_local(*e);
        if (!a.ok()) return a.status();
        JOBFS_RETURN_IF_ERROR(check_sticky(*dir, *a, cred));
        return Victim{std::move(*dir), std::move(*e), std::move(*a)};
    }

    Result<UnlinkResult> do_unlink(const Cred& cred, uint64_t parent, const std::string& name) {
        auto v = victim(cred, parent, name);
        if (!v.ok()) return v.status();
        if (v->attr.type == FileType::directory) return fail(Code::is_dir, "is a directory");
        int64_t now = now_ns();
        JOBFS_RETURN_IF_ERROR(erase_dentry(parent, name));
        JOBFS_RETURN_IF_ERROR(touch_dir(v->dir, 0, now));
        return drop_link(std::move(v->attr), now);
    }

    Status do_rmdir(const Cred& cred, uint64_t parent, const std::string& name) {
        auto v = victim(cred, parent, name);
        if (!v.ok()) return v.status();
        if (v->attr.type != FileType::directory) return fail(Code::not_dir, "not a directory");
        auto full = has_entries(v->attr.ino);
        if (!full.ok()) return full.status();
        if (*full) return fail(Code::not_empty, "directory not empty");
        int64_t now = now_ns();
        JOBFS_RETURN_IF_ERROR(erase_dentry(parent, name));
        JOBFS_RETURN_IF_ERROR(touch_dir(v->dir, -1, now));
        return erase_inode(v->attr.ino);
    }

    Result<MetaShard::Delegation> do_delegate(const Cred& cred, uint64_t dir_ino, uint64_t token,
                                              uint32_t max_entries, uint32_t inos) {
        if (token == 0) return fail(Code::invalid, "delegation token 0");
        const ActingAs acting(*this, token); // a delegation it held already is given again
        auto dir = load_dir(dir_ino);
        if (!dir.ok()) return dir.status();
        JOBFS_RETURN_IF_ERROR(need(*dir, cred, kMayWrite | kMayExec));
        if ((dir->mode & S_ISVTX) && !owner_or_root(*dir, cred))
            return fail(Code::not_permitted, "a sticky directory is delegated to its owner only");
        // An operation of several shards on its entries, between its first and last step
        // (intent_begin): its last step here must not meet the delegation. The asker tries later.
        auto in_log = count("SELECT count(*) FROM intents WHERE parent = ? OR new_parent = ?", dir_ino, dir_ino);
        if (!in_log.ok()) return in_log.status();
        if (*in_log) return fail(Code::busy, "directory " + ino_str(dir_ino) + " has an operation of several shards in progress");
        MetaShard::Delegation out;
        auto st = query("SELECT name, ino, type FROM dentries WHERE parent = ? LIMIT ?", dir_ino,
                        int64_t(max_entries) + 1);
        if (!st.ok()) return st.status();
        for (;;) {
            auto row = st->step();
            if (!row.ok()) return row.status();
            if (!*row) break;
            if (out.entries.size() == max_entries)
                return fail(Code::too_large, "more than " + std::to_string(max_entries) + " entries");
            out.entries.push_back(DirEntry{st->bytes(0), st->u64(1), static_cast<FileType>(st->i64(2))});
        }
        JOBFS_RETURN_IF_ERROR(run("INSERT INTO dir_delegations(dir, token) VALUES(?, ?) "
                                  "ON CONFLICT(dir) DO UPDATE SET token = excluded.token",
                                  dir_ino, token));
        auto range = reserve_inos(inos);
        if (!range.ok()) return range.status();
        out.ino_first = range->first;
        out.ino_count = range->second;
        out.layout = file_layout(*dir, {});
        // Leases others hold on its entries would outlive what the holder changes unseen.
        if (observer.dir_access) observer.dir_access(dir_ino);
        out.dir = std::move(*dir);
        return out;
    }

    // The holder's operations (dir_ops) share what each would do alone: the directory is
    // loaded and checked once, and its times stored once at the end (`dir` carries them).
    // A delegated create: the holder's inode number and times.
    Result<Attr> do_create_delegated(const Cred& cred, Attr& dir, uint64_t next_seq, const MetaShard::DirOp& op) {
        JOBFS_RETURN_IF_ERROR(check_name(op.name));
        auto existing = find_dentry(dir.ino, op.name);
        if (!existing.ok()) return existing.status();
        if (existing->has_value()) {
            if ((*existing)->ino == op.ino) return load_local(**existing); // made by this batch before
            return fail(Code::exists, "exists");
        }
        if (shard_of(op.ino) != shard_id || (op.ino & kSeqMask) >= next_seq || (op.ino & kSeqMask) == 0)
            return fail(Code::invalid, "inode number " + ino_str(op.ino) + " was not reserved here");
        Attr a = new_inode(FileType::regular, op.mode, cred, dir);
        if (op.time_ns) a.atime_ns = a.mtime_ns = a.ctime_ns = op.time_ns;
        a.ino = op.ino;
        a.nlink = 1;
        const Layout l = file_layout(dir, {});
        a.chunk_size = l.chunk_size;
        a.stripe_count = l.stripe_count;
        a.replicas = l.replicas;
        // Size and attributes as do_create sets them, checked before anything is written.
        if (op.init.size > uint64_t(INT64_MAX)) return fail(Code::too_large, "size too large");
        a.size = op.init.size;
        for (const auto& [n, v] : op.init.xattrs) JOBFS_RETURN_IF_ERROR(xattr_settable(cred, a, n, v));
        auto free = insert_inode_unless_taken(a);
        if (!free.ok()) return wrote(free.status());
        if (!*free) return fail(Code::exists, "inode number " + ino_str(op.ino) + " is taken");
        if (Status w = put_dentry(dir.ino, op.name, a.ino, a.type); !w.ok()) return wrote(w);
        for (const auto& [n, v] : op.init.xattrs) {
            saw_xattr();
            if (Status w = run("INSERT OR REPLACE INTO xattrs(ino, name, value) VALUES(?, ?, ?)", a.ino, n, v); !w.ok())
                return wrote(w);
        }
        dir.mtime_ns = dir.ctime_ns = a.ctime_ns;
        return a;
    }

    // A delegated rename of a regular file within dir (a temporary name to the final one, as
    // stage-in makes them): a regular file under the new name is replaced, as rename(2) does.
    // The outcome is the replaced file's (nothing replaced: an empty one).
    Result<UnlinkResult> do_rename_delegated(const Cred& cred, Attr& dir, const MetaShard::DirOp& op, int64_t now) {
        JOBFS_RETURN_IF_ERROR(check_name(op.name));
        JOBFS_RETURN_IF_ERROR(check_name(op.new_name));
        auto src_e = find_dentry(dir.ino, op.name);
        if (!src_e.ok()) return src_e.status();
        auto dst_e = find_dentry(dir.ino, op.new_name);
        if (!dst_e.ok()) return dst_e.status();
        UnlinkResult out;
        const bool dst_is_it = dst_e->has_value() && (*dst_e)->ino == op.ino;
        if (!src_e->has_value() || (*src_e)->ino != op.ino) {
            if (dst_is_it) return out; // renamed by this batch before
            return fail(Code::not_found, "no entry");
        }
        if ((*src_e)->type != FileType::regular) return fail(Code::invalid, "a delegated rename moves regular files only");
        if (dst_is_it) return out; // two names of one inode: POSIX says do nothing
        auto src = load_local(**src_e);
        if (!src.ok()) return src.status();
        JOBFS_RETURN_IF_ERROR(check_sticky(dir, *src, cred));
        std::optional<Attr> dst;
        if (dst_e->has_value()) {
            if ((*dst_e)->type == FileType::directory) return fail(Code::is_dir, "target is a directory");
            auto d = load_local(**dst_e);
            if (!d.ok()) return d.status();
            JOBFS_RETURN_IF_ERROR(check_sticky(dir, *d, cred));
            dst = std::move(*d);
        }
        const int64_t t = op.time_ns ? op.time_ns : now;
        if (dst) {
            if (Status w = erase_dentry(dir.ino, op.new_name); !w.ok()) return wrote(w);
            auto gone = drop_link(std::move(*dst), t);
            if (!gone.ok()) return wrote(gone.status());
            out = std::move(*gone);
        }
        if (Status w = run("UPDATE dentries SET name = ? WHERE parent = ? AND name = ?", op.new_name, dir.ino, op.name);
            !w.ok())
            return wrote(w);
        src->ctime_ns = t;
        if (Status w = store_inode(*src); !w.ok()) return wrote(w);
        dir.mtime_ns = dir.ctime_ns = t;
        return out;
    }

    Result<UnlinkResult> do_unlink_delegated(const Cred& cred, Attr& dir, const MetaShard::DirOp& op, int64_t now) {
        JOBFS_RETURN_IF_ERROR(check_name(op.name));
        auto e = find_entry_here(dir.ino, op.name);
        if (!e.ok()) return e.status();
        if (!e->has_value() || (op.ino && (*e)->entry.ino != op.ino)) {
            UnlinkResult done; // unlinked by this batch before (and the name maybe made again)
            done.attr.ino = op.ino;
            return done;
        }
        if ((*e)->entry.type == FileType::directory) return fail(Code::is_dir, "is a directory");
        auto a = local_of(std::move(**e));
        if (!a.ok()) return a.status();
        JOBFS_RETURN_IF_ERROR(check_sticky(dir, *a, cred));
        changed(a->ino);
        if (Status w = run("DELETE FROM dentries WHERE parent = ? AND name = ?", dir.ino, op.name); !w.ok())
            return wrote(w);
        dir.mtime_ns = dir.ctime_ns = now;
        auto gone = drop_link(std::move(*a), now);
        if (!gone.ok()) return wrote(gone.status());
        return gone;
    }

    // Each delegated operation checks everything before it writes, so one refused changed
    // nothing and the others go on (no savepoint each: two statements of six). A write that
    // fails fails the whole batch (`write_failed`): what it had written is rolled back with it.
    bool write_failed = false;
    Status wrote(const Status& s) {
        write_failed = true;
        return s;
    }

    Result<RenameResult> do_rename(const Cred& cred, uint64_t old_parent, const std::string& old_name,
                                   uint64_t new_parent, const std::string& new_name, uint32_t flags) {
        if ((flags & ~(kRenameNoReplace | kRenameExchange)) != 0 ||
            flags == (kRenameNoReplace | kRenameExchange))
            return fail(Code::invalid, "bad flags " + std::to_string(flags));
        const bool exchange = flags & kRenameExchange;
        JOBFS_RETURN_IF_ERROR(check_name(old_name));
        JOBFS_RETURN_IF_ERROR(check_name(new_name));
        if (shard_of(new_parent) != shard_id)
            return fail(Code::cross_device, "the new directory is on shard " + std::to_string(shard_of(new_parent)));

        // When both names are in one directory, both references below name the same Attr.
        auto odir_r = load_dir(old_parent);
        if (!odir_r.ok()) return odir_r.status();
        Attr odir = std::move(*odir_r);
        Attr ndir_other;
        if (new_parent != old_parent) {
            auto n = load_dir(new_parent);
            if (!n.ok()) return n.status();
            ndir_other = std::move(*n);
        }
        Attr& ndir = new_parent == old_parent ? odir : ndir_other;
        JOBFS_RETURN_IF_ERROR(need(odir, cred, kMayExec));
        JOBFS_RETURN_IF_ERROR(need(ndir, cred, kMayExec));

        auto src_e = get_dentry(old_parent, old_name);
        if (!src_e.ok()) return src_e.status();
        auto dst_e = find_dentry(new_parent, new_name);
        if (!dst_e.ok()) return dst_e.status();
        std::optional<DirEntry> dst_entry = std::move(*dst_e);
        if (exchange && !dst_entry) return fail(Code::not_found, "no entry to exchange with");
        if ((flags & kRenameNoReplace) && dst_entry) return fail(Code::exists, "target exists");

        JOBFS_RETURN_IF_ERROR(need(odir, cred, kMayWrite | kMayExec));
        JOBFS_RETURN_IF_ERROR(need(ndir, cred, kMayWrite | kMayExec));
        // Two names of one inode (or one name twice): POSIX says do nothing, successfully.
        if (dst_entry && dst_entry->ino == src_e->ino) return RenameResult{};

        auto src_r = load_local(*src_e);
        if (!src_r.ok()) return src_r.status();
        Attr src = std::move(*src_r);
        std::optional<Attr> dst;
        if (dst_entry) {
            auto d = load_local(*dst_entry);
            if (!d.ok()) return d.status();
            dst = std::move(*d);
        }
        const bool src_dir = src.type == FileType::directory;
        const bool dst_dir = dst && dst->type == FileType::directory;

        // A directory cannot move below itself.
        if (src_dir) {
            auto loop = contains(src.ino, new_parent);
            if (!loop.ok()) return loop.status();
            if (*loop) return fail(Code::invalid, "would move a directory into its own subtree");
        }
        if (exchange && dst_dir) {
            auto loop = contains(dst->ino, old_parent);
            if (!loop.ok()) return loop.status();
            if (*loop) return fail(Code::invalid, "would move a directory into its own subtree");
        }
        if (dst && !exchange) {
            if (src_dir && !dst_dir) return fail(Code::not_dir, "target is not a directory");
            if (!src_dir && dst_dir) return fail(Code::is_dir, "target is a directory");
            if (dst_dir) {
                auto full = has_entries(dst->ino);
                if (!full.ok()) return full.status();
                if (*full) return fail(Code::not_empty, "target directory not empty");
            }
        }
        JOBFS_RETURN_IF_ERROR(check_sticky(odir, src, cred));
        if (dst) JOBFS_RETURN_IF_ERROR(check_sticky(ndir, *dst, cred));
        // A directory changing parents rewrites its "..": that needs write permission on it.
        if (old_parent != new_parent) {
            if (src_dir) JOBFS_RETURN_IF_ERROR(need(src, cred, kMayWrite));
            if (exchange && dst_dir) JOBFS_RETURN_IF_ERROR(need(*dst, cred, kMayWrite));
        }

        int64_t now = now_ns();
        RenameResult out;
        int odelta = 0, ndelta = 0;  // subdirectory links gained by each parent
        if (exchange) {
            JOBFS_RETURN_IF_ERROR(run("UPDATE dentries SET ino = ?, type = ? WHERE parent = ? AND name = ?",
                                      dst->ino, dst->type, old_parent, old_name));
            JOBFS_RETURN_IF_ERROR(run("UPDATE dentries SET ino = ?, type = ? WHERE parent = ? AND name = ?",
                                      src.ino, src.type, new_parent, new_name));
            odelta = int(dst_dir) - int(src_dir);
            ndelta = int(src_dir) - int(dst_dir);
            dst->ctime_ns = now;
            dst->parent = old_parent;
            JOBFS_RETURN_IF_ERROR(store_inode(*dst));
        } else {
            if (dst) {
                JOBFS_RETURN_IF_ERROR(erase_dentry(new_parent, new_name));
                auto gone = drop_link(std::move(*dst), now);
                if (!gone.ok()) return gone.status();
                out.replaced = std::move(*gone);
                ndelta -= int(dst_dir);
            }
            JOBFS_RETURN_IF_ERROR(run("UPDATE dentries SET parent = ?, name = ? WHERE parent = ? AND name = ?",
                                      new_parent, new_name, old_parent, old_name));
            odelta -= int(src_dir);
            ndelta += int(src_dir);
        }
        src.ctime_ns = now;
        src.parent = new_parent;
        JOBFS_RETURN_IF_ERROR(store_inode(src));
        if (old_parent == new_parent) {
            JOBFS_RETURN_IF_ERROR(touch_dir(odir, odelta + ndelta, now));
        } else {
            JOBFS_RETURN_IF_ERROR(touch_dir(odir, odelta, now));
            JOBFS_RETURN_IF_ERROR(touch_dir(ndir, ndelta, now));
        }
        return out;
    }

    Result<ReadDirResult> do_readdir(const Cred& cred, uint64_t ino, const std::string& after,
                                     uint32_t max_entries) {
        if (max_entries == 0) return fail(Code::invalid, "max_entries is 0");
        auto dir = load_dir(ino);
        if (!dir.ok()) return dir.status();
        JOBFS_RETURN_IF_ERROR(need(*dir, cred, kMayRead));
        // One row more than asked tells whether there is more.
        auto st = query("SELECT name, ino, type FROM dentries WHERE parent = ? AND name > ? "
                        "ORDER BY name LIMIT ?",
                        ino, after, int64_t(max_entries) + 1);
        if (!st.ok()) return st.status();
        ReadDirResult out;
        for (;;) {
            auto row = st->step();
            if (!row.ok()) return row.status();
            if (!*row) break;
            if (out.entries.size() == max_entries) {
                out.more = true;
                break;
            }
            out.entries.push_back(DirEntry{st->bytes(0), st->u64(1), static_cast<FileType>(st->i64(2))});
        }
        return out;
    }

    Result<Attr> do_setattr(const Cred& cred, uint64_t ino, const SetAttr& set) {
        if ((set.atime_ns && set.atime_now) || (set.mtime_ns && set.mtime_now))
            return fail(Code::invalid, "a time both given and 'now'");
        auto ar = load_inode(ino);
        if (!ar.ok()) return ar;
        Attr a = std::move(*ar);
        // The holder of a delegated directory checks permissions in it by its mode and owner.
        if (a.type == FileType::directory) JOBFS_RETURN_IF_ERROR(check_delegation(ino));
        const bool root = cred.uid == 0;
        const bool owner = owner_or_root(a, cred);
        int64_t now = now_ns();

        if (set.uid && *set.uid != a.uid && !root)
            return fail(Code::not_permitted, "only root may change the owner");
        if (set.gid && *set.gid != a.gid && !root) {
            // The owner may give the file to a group it belongs to.
            if (cred.uid != a.uid || (set.uid && *set.uid != a.uid) || !cred.in_group(*set.gid))
                return fail(Code::not_permitted, "uid " + std::to_string(cred.uid) +
                                                     " may not change the group to " +
                                                     std::to_string(*set.gid));
        }
        // Before a write the kernel drops setuid and setgid with a chmod in the writer's name
        // (file_remove_privs): a writer may do that much, as its write would.
        const uint32_t setid = S_ISUID | S_ISGID, cur = a.mode & 07777;
        const bool drops_setid_only = set.mode && (*set.mode & 07777 & ~cur) == 0 &&
                                      ((*set.mode & 07777) | setid) == (cur | setid);
        if (set.mode && !owner && !(drops_setid_only && may_access(a, cred, kMayWrite)))
            return fail(Code::not_permitted, "only the owner may chmod");
        if ((set.atime_ns || set.mtime_ns) && !owner)
            return fail(Code::not_permitted, "only the owner may set times");
        if ((set.atime_now || set.mtime_now) && !owner && !may_access(a, cred, kMayWrite))
            return fail(Code::permission, "no write permission to touch inode " + ino_str(ino));
        if (set.size) {
            if (a.type == FileType::directory) return fail(Code::is_dir, "truncate a directory");
            if (a.type != FileType::regular) return fail(Code::invalid, "truncate a non-regular file");
            if (*set.size > uint64_t(INT64_MAX)) return fail(Code::too_large, "size too large");
            JOBFS_RETURN_IF_ERROR(need(a, cred, kMayWrite));
        }

        if (set.mode) {
            uint32_t mode = *set.mode & 07777;
            // Like Linux: a non-member loses the setgid bit it tries to set.
            uint32_t gid = set.gid.value_or(a.gid);
            if (!root && !cred.in_group(gid)) mode &= ~uint32_t(S_ISGID);
            a.mode = (a.mode & S_IFMT) | mode;
        }
        bool owner_changes = (set.uid && *set.uid != a.uid) || (set.gid && *set.gid != a.gid);
        if (set.uid) a.uid = *set.uid;
        if (set.gid) a.gid = *set.gid;
        if (a.type == FileType::directory && (set.mode || owner_changes) && observer.dir_access) observer.dir_access(ino);
        // Giving a file away must not give away setuid/setgid powers.
        if (owner_changes && !root && a.type != FileType::directory) {
            a.mode &= ~uint32_t(S_ISUID);
            if (a.mode & S_IXGRP) a.mode &= ~uint32_t(S_ISGID);
        }
        if (set.size) {
            a.size = *set.size;
            if (!set.mtime_ns) a.mtime_ns = now;  // truncate changes the data
        }
        if (set.atime_ns) a.atime_ns = *set.atime_ns;
        if (set.atime_now) a.atime_ns = now;
        if (set.mtime_ns) a.mtime_ns = *set.mtime_ns;
        if (set.mtime_now) a.mtime_ns = now;
        a.ctime_ns = now;
        JOBFS_RETURN_IF_ERROR(store_inode(a));
        return a;
    }

    Result<Attr> do_set_layout(const Cred& cred, uint64_t ino, Layout layout) {
        JOBFS_RETURN_IF_ERROR(check_layout(layout));
        auto a = load_inode(ino);
        if (!a.ok()) return a;
        if (!owner_or_root(*a, cred)) return fail(Code::not_permitted, "only the owner may set the layout");
        if (a->type == FileType::symlink) return fail(Code::invalid, "a symlink has no layout");
        if (a->type == FileType::regular) {
            if (a->size != 0) return fail(Code::busy, "file already has data");
            // A file always has a concrete chunk size.
            a->chunk_size = layout.chunk_size ? layout.chunk_size : default_chunk_size;
            a->replicas = layout.replicas ? layout.replicas : default_replicas;
        } else {
            a->chunk_size = layout.chunk_size;
            a->replicas = layout.replicas;
        }
        a->stripe_count = layout.stripe_count;
        a->ctime_ns = now_ns();
        JOBFS_RETURN_IF_ERROR(store_inode(*a));
        return a;
    }

    // A regular file's inode; is_dir or invalid for any other (sizes are a file's).
    Result<Attr> load_regular(uint64_t ino) {
        auto a = load_inode(ino);
        if (!a.ok()) return a;
        if (a->type == FileType::directory) return fail(Code::is_dir, "is a directory");
        if (a->type != FileType::regular) return fail(Code::invalid, "not a regular file");
        return a;
    }

    Result<Attr> do_extend_size(uint64_t ino, uint64_t size) {
        auto a = load_regular(ino);
        if (!a.ok()) return a;
        if (size > uint64_t(INT64_MAX)) return fail(Code::too_large, "size too large");
        a->size = std::max(a->size, size);
        a->mtime_ns = a->ctime_ns = now_ns();
        JOBFS_RETURN_IF_ERROR(store_inode(*a));
        return a;
    }

    Result<Attr> do_reserve_append(uint64_t ino, uint64_t at_least, uint64_t length, uint64_t token) {
        auto a = load_regular(ino);
        if (!a.ok()) return a;
        if (token) { // asked before: the same place (the size right after it)
            auto st = query("SELECT size FROM append_tokens WHERE ino = ? AND token = ?", ino, int64_t(token));
            if (!st.ok()) return st.status();
            auto row = st->step();
            if (!row.ok()) return row.status();
            if (*row) {
                a->size = uint64_t(st->i64(0));
                return a;
            }
        }
        const uint64_t at = std::max(a->size, at_least);
        if (at > uint64_t(INT64_MAX) || length > uint64_t(INT64_MAX) - at) return fail(Code::too_large, "size too large");
        a->size = at + length;
        a->mtime_ns = a->ctime_ns = now_ns();
        // What the kernel drops before a write through its page cache (file_remove_privs),
        // which these writes bypass: setuid, setgid with group execute, file capabilities.
        a->mode &= ~uint32_t(S_ISUID);
        if (a->mode & S_IXGRP) a->mode &= ~uint32_t(S_ISGID);
        JOBFS_RETURN_IF_ERROR(run("DELETE FROM xattrs WHERE ino = ? AND name = ?", ino, std::string("security.capability")));
        JOBFS_RETURN_IF_ERROR(store_inode(*a));
        if (token) {
            saw_append_token();
            JOBFS_RETURN_IF_ERROR(run("INSERT INTO append_tokens(ino, token, size) VALUES(?, ?, ?)", ino,
                                      int64_t(token), int64_t(a->size)));
            if (token % 64 == 0)
                JOBFS_RETURN_IF_ERROR(run("DELETE FROM append_tokens WHERE ino = ?1 AND size < (SELECT size FROM "
                                          "append_tokens WHERE ino = ?1 ORDER BY size DESC LIMIT 1 OFFSET ?2)",
                                          ino, kAppendTokensKept - 1));
        }
        return a;
    }

    // ---- xattrs ---------------------------------------------------------------------------
    enum class XattrNs { user, trusted, security, system, unknown };
    static XattrNs xattr_ns(const std::string& name) {
        auto starts = [&](const char* p) { return name.rfind(p, 0) == 0 && name.size() > strlen(p); };
        if (starts("user.")) return XattrNs::user;
        if (starts("trusted.")) return XattrNs::trusted;
        if (starts("security.")) return XattrNs::security;
        if (starts("system.")) return XattrNs::system;
        return XattrNs::unknown;
    }

    // May cred read (write=false) or change this xattr? Errors as Linux's xattr_permission.
    Status xattr_access(const Cred& cred, const Attr& a, const std::string& name, bool write) {
        if (name.empty() || name.size() > kMaxXattrNameLen)
            return fail(Code::range, "xattr name length " + std::to_string(name.size()));
        if (name.find('\0') != std::string::npos) return fail(Code::invalid, "xattr name contains NUL");
        const bool root = cred.uid == 0;
        switch (xattr_ns(name)) {
        case XattrNs::user:
            if (a.type != FileType::regular && a.type != FileType::directory)
                return write ? fail(Code::not_permitted, "user xattrs only on files and directories")
                             : fail(Code::no_data, "no such attribute");
            if (write && a.type == FileType::directory && (a.mode & S_ISVTX) && !owner_or_root(a, cred))
                return fail(Code::not_permitted, "sticky directory: only its owner sets user xattrs");
            return need(a, cred, write ? kMayWrite : kMayRead);
        case XattrNs::trusted:
            if (root) return Status::OK();
            return write ? fail(Code::not_permitted, "trusted xattrs need root")
                         : fail(Code::no_data, "no such attribute");
        case XattrNs::security:
            if (write && !root) return fail(Code::not_permitted, "security xattrs need root");
            return Status::OK();
        case XattrNs::system:
            return write ? fail(Code::unsupported, "system xattrs (ACLs) are not supported")
                         : fail(Code::no_data, "no such attribute");
        case XattrNs::unknown: break;
        }
        return fail(Code::unsupported, "unknown xattr namespace");
    }

    // May cred set attribute name to value on a (setxattr, and a delegated create's attributes)?
    Status xattr_settable(const Cred& cred, const Attr& a, const std::string& name, const std::string& value) {
        if (value.size() > kMaxXattrValueLen) return fail(Code::too_large, "value of " + name + " larger than 64 KiB");
        return xattr_access(cred, a, name, true);
    }

    Result<std::optional<std::string>> find_xattr(uint64_t ino, const std::string& name) {
        auto st = query("SELECT value FROM xattrs WHERE ino = ? AND name = ?", ino, name);
        if (!st.ok()) return st.status();
        auto row = st->step();
        if (!row.ok()) return row.status();
        if (!*row) return std::optional<std::string>();
        return std::optional<std::string>(st->bytes(0));
    }

    Status do_setxattr(const Cred& cred, uint64_t ino, const std::string& name,
                       const std::string& value, int flags) {
        if ((flags & ~(kXattrCreate | kXattrReplace)) != 0)
            return fail(Code::invalid, "bad flags " + std::to_string(flags));
        auto a = load_inode(ino);
        if (!a.ok()) return a.status();
        JOBFS_RETURN_IF_ERROR(xattr_settable(cred, *a, name, value));
        auto old = find_xattr(ino, name);
        if (!old.ok()) return old.status();
        if ((flags & kXattrCreate) && old->has_value()) return fail(Code::exists, "attribute exists");
        if ((flags & kXattrReplace) && !old->has_value()) return fail(Code::no_data, "no such attribute");
        saw_xattr();
        JOBFS_RETURN_IF_ERROR(run("INSERT OR REPLACE INTO xattrs(ino, name, value) VALUES(?, ?, ?)",
                                  ino, name, value));
        a->ctime_ns = now_ns();
        return store_inode(*a);
    }

    Result<std::string> do_getxattr(const Cred& cred, uint64_t ino, const std::string& name) {
        auto a = load_inode(ino);
        if (!a.ok()) return a.status();
        JOBFS_RETURN_IF_ERROR(xattr_access(cred, *a, name, false));
        auto v = find_xattr(ino, name);
        if (!v.ok()) return v.status();
        if (!v->has_value()) return fail(Code::no_data, "no such attribute");
        return std::move(**v);
    }

    Result<std::vector<std::string>> do_listxattr(const Cred& cred, uint64_t ino) {
        auto a = load_inode(ino);
        if (!a.ok()) return a.status();
        auto st = query("SELECT name FROM xattrs WHERE ino = ? ORDER BY name", ino);
        if (!st.ok()) return st.status();
        std::vector<std::string> names;
        for (;;) {
            auto row = st->step();
            if (!row.ok()) return row.status();
            if (!*row) break;
            std::string name = st->bytes(0);
            // trusted.* is invisible to everyone but root, as on Linux.
            if (cred.uid != 0 && xattr_ns(name) == XattrNs::trusted) continue;
            names.push_back(std::move(name));
        }
        return names;
    }

    Status do_removexattr(const Cred& cred, uint64_t ino, const std::string& name) {
        auto a = load_inode(ino);
        if (!a.ok()) return a.status();
        JOBFS_RETURN_IF_ERROR(xattr_access(cred, *a, name, true));
        auto old = find_xattr(ino, name);
        if (!old.ok()) return old.status();
        if (!old->has_value()) return fail(Code::no_data, "no such attribute");
        JOBFS_RETURN_IF_ERROR(run("DELETE FROM xattrs WHERE ino = ? AND name = ?", ino, name));
        a->ctime_ns = now_ns();
        return store_inode(*a);
    }

    // ---- primitives -----------------------------------------------------------------------
    Status do_insert_dentry(uint64_t parent, const std::string& name, uint64_t ino, FileType type) {
        JOBFS_RETURN_IF_ERROR(check_name(name));
        if (ino == 0 || !valid_type(int64_t(type))) return fail(Code::invalid, "bad inode or type");
        auto dir = load_dir(parent);
        if (!dir.ok()) return dir.status();
        auto existing = find_dentry(parent, name);
        if (!existing.ok()) return existing.status();
        if (existing->has_value()) return fail(Code::exists, "exists");
        JOBFS_RETURN_IF_ERROR(put_dentry(parent, name, ino, type));
        return touch_dir(*dir, type == FileType::directory ? 1 : 0, now_ns());
    }

    Result<DirEntry> do_remove_dentry(uint64_t parent, const std::string& name) {
        JOBFS_RETURN_IF_ERROR(check_name(name));
        auto dir = load_dir(parent);
        if (!dir.ok()) return dir.status();
        auto e = get_dentry(parent, name);
        if (!e.ok()) return e;
        JOBFS_RETURN_IF_ERROR(erase_dentry(parent, name));
        JOBFS_RETURN_IF_ERROR(touch_dir(*dir, e->type == FileType::directory ? -1 : 0, now_ns()));
        return e;
    }

    Result<Attr> do_create_inode(const Attr& tmpl) {
        if (!valid_type(int64_t(tmpl.type))) return fail(Code::invalid, "bad type");
        if (tmpl.nlink == 0) return fail(Code::invalid, "nlink 0");
        if (tmpl.type == FileType::symlink &&
            (tmpl.target.empty() || tmpl.target.size() > kMaxSymlinkLen))
            return fail(Code::invalid, "bad symlink target");
        JOBFS_RETURN_IF_ERROR(check_layout(Layout{tmpl.chunk_size, tmpl.stripe_count, tmpl.replicas}));
        Attr a;
        a.type = tmpl.type;
        a.mode = type_bits(tmpl.type) | (tmpl.mode & 07777);
        a.uid = tmpl.uid;
        a.gid = tmpl.gid;
        a.nlink = tmpl.nlink;
        a.rdev = tmpl.rdev;
        a.target = tmpl.type == FileType::symlink ? tmpl.target : std::string();
        a.size = a.target.size();
        a.chunk_size = tmpl.chunk_size;
        if (a.type == FileType::regular && a.chunk_size == 0) a.chunk_size = default_chunk_size;
        a.stripe_count = tmpl.stripe_count;
        a.replicas = tmpl.replicas;
        if (a.type == FileType::regular && a.replicas == 0) a.replicas = default_replicas;
        a.parent = tmpl.type == FileType::directory ? tmpl.parent : 0;
        a.atime_ns = a.mtime_ns = a.ctime_ns = now_ns();
        a.generation = 1;
        JOBFS_RETURN_IF_ERROR(add_inode(a));
        return a;
    }

    Result<UnlinkResult> do_adjust_nlink(uint64_t ino, int delta) {
        auto a = load_inode(ino);
        if (!a.ok()) return a.status();
        int64_t n = int64_t(a->nlink) + delta;
        if (n < 0) return fail(Code::invalid, "nlink would go below 0");
        if (n > int64_t(UINT32_MAX)) return fail(Code::too_large, "too many links");
        if (n == 0 && a->type == FileType::directory) {
            auto full = has_entries(ino);
            if (!full.ok()) return full.status();
            if (*full) return fail(Code::not_empty, "directory not empty");
        }
        UnlinkResult out;
        a->nlink = uint32_t(n);
        a->ctime_ns = now_ns();
        out.last_link = n == 0;
        if (out.last_link) {
            JOBFS_RETURN_IF_ERROR(erase_inode(ino));
        } else {
            JOBFS_RETURN_IF_ERROR(store_inode(*a));
        }
        out.attr = std::move(*a);
        return out;
    }

    Status do_delete_inode(uint64_t ino) {
        auto a = load_inode(ino);
        if (!a.ok()) return a.status();
        if (a->type == FileType::directory) {
            auto full = has_entries(ino);
            if (!full.ok()) return full.status();
            if (*full) return fail(Code::not_empty, "directory not empty");
        }
        return erase_inode(ino);
    }

    // ---- cross-shard steps (docs/design.md) --------------------------------------------
    // Intent ids come from a counter in meta (next_intent), not from AUTOINCREMENT alone: a
    // replica's sqlite_sequence is not part of any changeset, and a replica that becomes
    // primary must never hand out an id a peer may remember as applied. Databases from before
    // the counter start it past sqlite_sequence.
    Status put_intent(Intent& in) {
        auto next = meta_value_or("next_intent", 0);
        if (!next.ok()) return next.status();
        int64_t id = *next;
        if (id == 0) {
            auto st = query("SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'intents'), 0) + 1");
            if (!st.ok()) return st.status();
            auto row = st->step();
            if (!row.ok()) return row.status();
            id = st->i64(0);
        }
        JOBFS_RETURN_IF_ERROR(run("INSERT INTO intents(id, op, parent, name, ino, type, new_parent, new_name, "
                                  "expect_ino, peer) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                  id, in.op, in.parent, in.name, in.ino, in.type, in.new_parent, in.new_name,
                                  in.expect_ino, in.peer));
        JOBFS_RETURN_IF_ERROR(put_meta("next_intent", uint64_t(id) + 1));
        in.id = make_ino(shard_id, uint64_t(id));
        return Status::OK();
    }

    Status erase_intent(uint64_t id) {
        if (shard_of(id) != shard_id) return fail(Code::invalid, "intent " + ino_str(id) + " is not this shard's");
        return run("DELETE FROM intents WHERE id = ?", id & kSeqMask);
    }

    Result<uint64_t> do_intent_begin_remove(Intent& in) {
        auto e = get_dentry(in.parent, in.name);
        if (!e.ok()) return e.status();
        if (e->ino != in.ino) return fail(Code::busy, "the entry changed meanwhile");
        auto dir = load_dir(in.parent);
        if (!dir.ok()) return dir.status();
        JOBFS_RETURN_IF_ERROR(erase_dentry(in.parent, in.name));
        JOBFS_RETURN_IF_ERROR(touch_dir(*dir, e->type == FileType::directory ? -1 : 0, now_ns()));
        JOBFS_RETURN_IF_ERROR(put_intent(in));
        return in.id;
    }

    Status do_intent_finish_rename(const Intent& in) {
        auto e = find_dentry(in.parent, in.name);
        if (!e.ok()) return e.status();
        if (e->has_value() && (*e)->ino == in.ino) {
            auto dir = load_dir(in.parent);
            if (!dir.ok()) return dir.status();
            JOBFS_RETURN_IF_ERROR(erase_dentry(in.parent, in.name));
            JOBFS_RETURN_IF_ERROR(touch_dir(*dir, (*e)->type == FileType::directory ? -1 : 0, now_ns()));
        }
        return erase_intent(in.id);
    }

    Result<std::vector<Intent>> do_intents() {
        auto st = query("SELECT id, op, parent, name, ino, type, new_parent, new_name, expect_ino, peer "
                        "FROM intents ORDER BY id");
        if (!st.ok()) return st.status();
        std::vector<Intent> out;
        for (;;) {
            auto row = st->step();
            if (!row.ok()) return row.status();
            if (!*row) break;
            Intent in;
            in.id = make_ino(shard_id, st->u64(0));
            in.op = static_cast<IntentOp>(st->i64(1));
            in.parent = st->u64(2);
            in.name = st->bytes(3);
            in.ino = st->u64(4);
            in.type = static_cast<FileType>(st->i64(5));
            in.new_parent = st->u64(6);
            in.new_name = st->bytes(7);
            in.expect_ino = st->u64(8);
            in.peer = st->u32(9);
            out.push_back(std::move(in));
        }
        return out;
    }

    // The result recorded for (intent, step): none if it never ran; -1 if it was aborted.
    Result<std::optional<int64_t>> applied_result(uint64_t intent, IntentStep step) {
        auto st = query("SELECT result FROM applied WHERE intent = ? AND step = ?", intent, step);
        if (!st.ok()) return st.status();
        auto row = st->step();
        if (!row.ok()) return row.status();
        if (!*row) return std::optional<int64_t>();
        return std::optional<int64_t>(st->i64(0));
    }

    Status record_applied(uint64_t intent, IntentStep step, int64_t result) {
        // The finished intents of the same coordinator go in the same transaction: this
        // shard's own are known here, another shard's from what its steps said.
        const uint32_t coordinator = shard_of(intent);
        uint64_t below = 0;
        if (coordinator == shard_id) {
            auto own = do_intents_done_below();
            if (!own.ok()) return own.status();
            below = *own;
        } else if (auto it = intents_done_below.find(coordinator); it != intents_done_below.end()) {
            below = it->second;
        }
        if (below != 0)
            JOBFS_RETURN_IF_ERROR(run("DELETE FROM applied WHERE intent >= ? AND intent < ?", make_ino(coordinator, 0), below));
        return run("INSERT INTO applied(intent, step, result) VALUES(?, ?, ?)", intent, step, result);
    }

    Result<uint64_t> do_intents_done_below() {
        auto st = query("SELECT min(id) FROM intents");
        if (!st.ok()) return st.status();
        auto row = st->step();
        if (!row.ok()) return row.status();
        if (*row && !st->is_null(0)) return make_ino(shard_id, st->u64(0));
        auto next = meta_value_or("next_intent", 0);
        if (!next.ok()) return next.status();
        return make_ino(shard_id, uint64_t(*next)); // 0: no intent ever (nothing to forget)
    }

    Status aborted(uint64_t intent, IntentStep step) const {
        return fail(Code::busy, "step " + std::to_string(uint32_t(step)) + " of intent " + ino_str(intent) +
                                    " was aborted");
    }

    Result<RenameInsertResult> do_rename_insert(uint64_t intent, uint64_t parent, const std::string& name,
                                                uint64_t ino, FileType type, uint64_t expect_ino) {
        auto done = applied_result(intent, IntentStep::rename_insert);
        if (!done.ok()) return done.status();
        if (done->has_value()) {
            if (**done < 0) return aborted(intent, IntentStep::rename_insert);
            RenameInsertResult again;
            again.replaced_ino = uint64_t(**done);
            again.repeated = true;
            return again;
        }
        JOBFS_RETURN_IF_ERROR(check_name(name));
        if (ino == 0 || !valid_type(int64_t(type))) return fail(Code::invalid, "bad inode or type");
        auto dir = load_dir(parent);
        if (!dir.ok()) return dir.status();
        auto cur = find_dentry(parent, name);
        if (!cur.ok()) return cur.status();
        const uint64_t now_there = cur->has_value() ? (*cur)->ino : 0;
        if (now_there != expect_ino) return fail(Code::busy, "the destination entry changed meanwhile");
        RenameInsertResult out;
        int delta = type == FileType::directory ? 1 : 0;
        int64_t now = now_ns();
        if (cur->has_value()) {
            const DirEntry& old = **cur;
            out.replaced_ino = old.ino;
            out.replaced_type = old.type;
            if (old.type == FileType::directory) delta -= 1;
            JOBFS_RETURN_IF_ERROR(erase_dentry(parent, name));
            if (shard_of(old.ino) == shard_id) {
                auto victim = load_inode(old.ino);
                if (!victim.ok()) return victim.status();
                if (victim->type == FileType::directory) {
                    auto full = has_entries(old.ino);
                    if (!full.ok()) return full.status();
                    if (*full) return fail(Code::not_empty, "target directory not empty");
                }
                auto gone = drop_link(std::move(*victim), now);
                if (!gone.ok()) return gone.status();
                out.replaced_here = std::move(*gone);
            }
        }
        JOBFS_RETURN_IF_ERROR(put_dentry(parent, name, ino, type));
        JOBFS_RETURN_IF_ERROR(touch_dir(*dir, delta, now));
        // A replaced inode that lives elsewhere is the coordinator's to drop, also on a re-drive.
        JOBFS_RETURN_IF_ERROR(record_applied(intent, IntentStep::rename_insert,
                                             out.replaced_here ? 0 : int64_t(out.replaced_ino)));
        return out;
    }

    Result<UnlinkResult> do_adjust_nlink_once(uint64_t intent, IntentStep step, uint64_t ino, int delta) {
        auto done = applied_result(intent, step);
        if (!done.ok()) return done.status();
        if (done->has_value()) {
            if (**done < 0) return aborted(intent, step);
            UnlinkResult again;
            auto a = find_inode(ino);
            if (!a.ok()) return a.status();
            if (a->has_value()) {
                again.attr = std::move(**a);
            } else {
                again.attr.ino = ino;
                again.last_link = true;
            }
            return again;
        }
        if (delta != 1 && delta != -1) return fail(Code::invalid, "nlink changes by one");
        auto a = load_inode(ino);
        if (!a.ok()) return a.status();
        int64_t now = now_ns();
        UnlinkResult out;
        if (delta < 0) {
            if (a->type == FileType::directory) {
                auto full = has_entries(ino);
                if (!full.ok()) return full.status();
                if (*full) return fail(Code::not_empty, "directory not empty");
            }
            auto gone = drop_link(std::move(*a), now);
            if (!gone.ok()) return gone.status();
            out = std::move(*gone);
        } else {
            if (a->type == FileType::directory) return fail(Code::not_permitted, "hard link to a directory");
            if (a->nlink >= kMaxLinks) return fail(Code::too_large, "too many links");
            a->nlink += 1;
            a->ctime_ns = now;
            JOBFS_RETURN_IF_ERROR(store_inode(*a));
            out.attr = std::move(*a);
        }
        JOBFS_RETURN_IF_ERROR(record_applied(intent, step, 1));
        return out;
    }

    Result<Attr> do_create_inode_once(uint64_t intent, const Attr& tmpl) {
        auto done = applied_result(intent, IntentStep::create_inode);
        if (!done.ok()) return done.status();
        if (done->has_value()) {
            if (**done < 0) return aborted(intent, IntentStep::create_inode);
            return load_inode(uint64_t(**done));
        }
        auto a = do_create_inode(tmpl);
        if (!a.ok()) return a;
        JOBFS_RETURN_IF_ERROR(record_applied(intent, IntentStep::create_inode, int64_t(a->ino)));
        return a;
    }

    Result<std::optional<int64_t>> do_abort_step(uint64_t intent, IntentStep step) {
        auto done = applied_result(intent, step);
        if (!done.ok()) return done.status();
        if (done->has_value()) {
            if (**done < 0) return std::optional<int64_t>();
            return done;
        }
        JOBFS_RETURN_IF_ERROR(record_applied(intent, step, -1));
        return std::optional<int64_t>();
    }

    Status do_set_parent(uint64_t ino, uint64_t parent) {
        auto a = load_inode(ino);
        if (!a.ok()) return a.status();
        a->ctime_ns = now_ns();
        a->parent = parent;
        return store_inode(*a);
    }

    template <class... Args>
    Result<uint64_t> count(const char* sql, const Args&... args) {
        auto st = query(sql, args...);
        if (!st.ok()) return st.status();
        auto row = st->step();
        if (!row.ok()) return row.status();
        return st->u64(0);
    }

    // ---- opening --------------------------------------------------------------------------
    Status configure() {
        sqlite3_busy_timeout(db, kBusyTimeoutMs);
        // The daemon is the only user of its database: exclusive locking, set before WAL is
        // entered, keeps the WAL index in memory and saves the file-lock system calls of every
        // transaction (a second daemon on the same directory gets "database is locked").
        JOBFS_RETURN_IF_ERROR(exec("PRAGMA locking_mode = EXCLUSIVE"));
        // journal_mode answers with the mode it got; anything but wal means no WAL here.
        auto st = query("PRAGMA journal_mode = WAL");
        if (!st.ok()) return st.status();
        auto row = st->step();
        if (!row.ok()) return row.status();
        if (!*row || st->bytes(0) != "wal") return fail(Code::io, "cannot enable WAL journal mode");
        sqlite3_wal_hook(db, on_wal_commit, this);
        sqlite3_update_hook(db, on_row_change, this);
        return exec("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = OFF;");
    }

    // After each commit: SQLite's automatic checkpoint (a passive one past kCheckpointPages),
    // except in an operation that must not wait for the disk; the next other commit does it.
    static int on_wal_commit(void* arg, sqlite3* db, const char* name, int pages) {
        auto* impl = static_cast<Impl*>(arg);
        impl->wal_pages = pages;
        if (pages >= kCheckpointPages && !impl->no_checkpoint) {
            (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
            impl->wal_pages = 0;
        }
        return SQLITE_OK;
    }

    Status init_schema() {
        JOBFS_RETURN_IF_ERROR(exec(kSchema));
        auto st = query("SELECT value FROM meta WHERE key = 'shard_id'");
        if (!st.ok()) return st.status();
        auto row = st->step();
        if (!row.ok()) return row.status();
        if (*row) return check_existing(st->i64(0));
        return init_new();
    }

    Status check_existing(int64_t stored_shard) {
        if (stored_shard != int64_t(shard_id))
            return fail(Code::invalid, "database belongs to shard " + std::to_string(stored_shard));
        auto version = meta_value("schema_version");
        if (!version.ok()) return version.status();
        if (*version == 2) JOBFS_RETURN_IF_ERROR(migrate_from_2());
        else if (*version != kSchemaVersion)
            return fail(Code::unsupported, "schema version " + std::to_string(*version) +
                                               ", this build reads " + std::to_string(kSchemaVersion));
        return meta_value("next_seq").status();
    }

    // Version 2 had no replicas column: every file was stored once.
    Status migrate_from_2() {
        JOBFS_INFO("%s: migrating schema version 2 to %lld (replicas = 1 for existing files)", op.c_str(),
                   static_cast<long long>(kSchemaVersion));
        JOBFS_RETURN_IF_ERROR(exec("ALTER TABLE inodes ADD COLUMN replicas INTEGER NOT NULL DEFAULT 1;"
                                   "UPDATE inodes SET replicas = 0 WHERE type = 2;"));
        return run("UPDATE meta SET value = ? WHERE key = 'schema_version'", kSchemaVersion);
    }

    Status init_new() {
        const char* put = "INSERT INTO meta(key, value) VALUES(?, ?)";
        JOBFS_RETURN_IF_ERROR(run(put, Text{"shard_id"}, shard_id));
        JOBFS_RETURN_IF_ERROR(run(put, Text{"schema_version"}, kSchemaVersion));
        JOBFS_RETURN_IF_ERROR(run(put, Text{"next_seq"}, kFirstSeq));
        if (shard_id != 0) return Status::OK();
        Attr root;
        root.ino = kRootIno;
        root.type = FileType::directory;
        root.mode = S_IFDIR | 0755;
        root.nlink = 2;
        root.atime_ns = root.mtime_ns = root.ctime_ns = now_ns();
        root.generation = 1;
        return insert_inode(root);
    }
};

// ------------------------------------------------------------------------------------------
MetaShard::MetaShard(uint32_t shard_id, std::unique_ptr<Impl> impl)
    : shard_id_(shard_id), impl_(std::move(impl)) {}

MetaShard::~MetaShard() = default;

Result<std::unique_ptr<MetaShard>> MetaShard::open(const std::string& path, uint32_t shard_id,
                                                   Layout defaults) {
    auto impl = std::make_unique<Impl>();
    impl->shard_id = shard_id;
    impl->default_chunk_size = defaults.chunk_size ? defaults.chunk_size : kDefaultChunkSize;
    impl->default_stripe_count = defaults.stripe_count;
    impl->default_replicas = defaults.replicas ? defaults.replicas : 1;
    impl->op = "open meta shard " + std::to_string(shard_id) + " at " + path;
    if (shard_id > kMaxShardId)
        return impl->fail(Code::invalid, "shard id above " + std::to_string(kMaxShardId));
    // Our own mutex serialises use of the connection, so SQLite's is not needed.
    int rc = sqlite3_open_v2(path.c_str(), &impl->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                             nullptr);
    if (rc != SQLITE_OK) {
        std::string msg = impl->db ? sqlite3_errmsg(impl->db) : sqlite3_errstr(rc);
        return impl->fail(code_of_sqlite(rc), "sqlite: " + msg);
    }
    sqlite3_extended_result_codes(impl->db, 1);
    Status s = impl->configure();
    if (s.ok()) s = impl->transact([&] { return impl->init_schema(); });
    if (!s.ok()) return impl->with_op(s);
    return std::unique_ptr<MetaShard>(new MetaShard(shard_id, std::move(impl)));
}

void MetaShard::set_change_observer(ChangeObserver observer) {
    std::lock_guard lock(impl_->mu);
    impl_->observer = std::move(observer);
}

// Every public method: lock, name the operation for error messages, run the body.
#define JOBFS_META_OP(description)                \
    std::lock_guard<std::mutex> lock_(impl_->mu); \
    impl_->op = (description)

namespace {
std::string in(const std::string& name, uint64_t dir) { return quoted(name) + " in " + ino_str(dir); }
} // namespace

// The shard's lock taken only if it is free: the caller goes elsewhere rather than wait.
#define JOBFS_META_TRY_OP(description)                                  \
    std::unique_lock<std::mutex> lock_(impl_->mu, std::try_to_lock);    \
    if (!lock_.owns_lock()) return std::nullopt;                        \
    impl_->op = (description)

// A write as well, if it can be done at once: not while the shard ships its changes to
// replicas (calls to other daemons), nor when its commit would be the one to checkpoint the
// WAL (fsyncs). Its commit leaves the checkpoint to the next ordinary one.
#define JOBFS_META_TRY_WRITE(description)                                          \
    JOBFS_META_TRY_OP(description);                                                \
    if (impl_->ship || impl_->wal_pages >= kCheckpointPages) return std::nullopt;  \
    const Impl::NoCheckpoint no_checkpoint_(*impl_)

Result<Attr> MetaShard::Impl::getattr_locked(uint64_t ino) {
    auto a = load_inode(ino);
    if (!a.ok()) return with_op(a.status());
    return a;
}

Result<Attr> MetaShard::Impl::lookup_locked(const Cred& cred, uint64_t parent, const std::string& name) {
    auto dir = dir_for_name(cred, parent, name);
    if (!dir.ok()) return with_op(dir.status());
    auto e = get_dentry(parent, name);
    if (!e.ok()) return with_op(e.status());
    auto a = load_local(*e);
    if (!a.ok()) return with_op(a.status());
    return a;
}

Result<Attr> MetaShard::getattr(uint64_t ino) {
    JOBFS_META_OP("getattr " + ino_str(ino));
    return impl_->getattr_locked(ino);
}

std::optional<Result<Attr>> MetaShard::try_getattr(uint64_t ino) {
    JOBFS_META_TRY_OP("getattr " + ino_str(ino));
    return impl_->getattr_locked(ino);
}

Result<Attr> MetaShard::lookup(const Cred& cred, uint64_t parent, const std::string& name) {
    JOBFS_META_OP("lookup " + in(name, parent));
    return impl_->lookup_locked(cred, parent, name);
}

std::optional<Result<Attr>> MetaShard::try_lookup(const Cred& cred, uint64_t parent, const std::string& name) {
    JOBFS_META_TRY_OP("lookup " + in(name, parent));
    return impl_->lookup_locked(cred, parent, name);
}

Result<DirEntry> MetaShard::lookup_dentry(const Cred& cred, uint64_t parent, const std::string& name) {
    JOBFS_META_OP("lookup " + in(name, parent));
    auto dir = impl_->dir_for_name(cred, parent, name);
    if (!dir.ok()) return impl_->with_op(dir.status());
    auto e = impl_->get_dentry(parent, name);
    if (!e.ok()) return impl_->with_op(e.status());
    return e;
}

Result<Attr> MetaShard::create(const Cred& cred, uint64_t parent, const std::string& name,
                               uint32_t mode, bool exclusive, Layout layout, const NewFile& init) {
    JOBFS_META_OP("create " + in(name, parent));
    return impl_->transact([&] { return impl_->do_create(cred, parent, name, mode, exclusive, layout, init); });
}

std::optional<Result<Attr>> MetaShard::try_create(const Cred& cred, uint64_t parent, const std::string& name,
                                                  uint32_t mode, bool exclusive, Layout layout, const NewFile& init) {
    JOBFS_META_TRY_WRITE("create " + in(name, parent));
    return impl_->transact([&] { return impl_->do_create(cred, parent, name, mode, exclusive, layout, init); });
}

Result<Attr> MetaShard::mkdir(const Cred& cred, uint64_t parent, const std::string& name, uint32_t mode) {
    JOBFS_META_OP("mkdir " + in(name, parent));
    return impl_->transact([&] { return impl_->do_mkdir(cred, parent, name, mode); });
}

Result<Attr> MetaShard::symlink(const Cred& cred, uint64_t parent, const std::string& name,
                                const std::string& target) {
    JOBFS_META_OP("symlink " + in(name, parent));
    return impl_->transact([&] { return impl_->do_symlink(cred, parent, name, target); });
}

Result<std::string> MetaShard::readlink(uint64_t ino) {
    JOBFS_META_OP("readlink " + ino_str(ino));
    auto a = impl_->load_inode(ino);
    if (!a.ok()) return impl_->with_op(a.status());
    if (a->type != FileType::symlink) return impl_->fail(Code::invalid, "not a symlink");
    return std::move(a->target);
}

Result<Attr> MetaShard::link(const Cred& cred, uint64_t ino, uint64_t new_parent, const std::string& name) {
    JOBFS_META_OP("link " + ino_str(ino) + " as " + in(name, new_parent));
    return impl_->transact([&] { return impl_->do_link(cred, ino, new_parent, name); });
}

Result<UnlinkResult> MetaShard::unlink(const Cred& cred, uint64_t parent, const std::string& name) {
    JOBFS_META_OP("unlink " + in(name, parent));
    return impl_->transact([&] { return impl_->do_unlink(cred, parent, name); });
}

std::optional<Result<UnlinkResult>> MetaShard::try_unlink(const Cred& cred, uint64_t parent, const std::string& name) {
    JOBFS_META_TRY_WRITE("unlink " + in(name, parent));
    return impl_->transact([&] { return impl_->do_unlink(cred, parent, name); });
}

Status MetaShard::rmdir(const Cred& cred, uint64_t parent, const std::string& name) {
    JOBFS_META_OP("rmdir " + in(name, parent));
    return impl_->transact([&] { return impl_->do_rmdir(cred, parent, name); });
}

Result<RenameResult> MetaShard::rename(const Cred& cred, uint64_t old_parent, const std::string& old_name,
                                       uint64_t new_parent, const std::string& new_name, uint32_t flags) {
    JOBFS_META_OP("rename " + in(old_name, old_parent) + " to " + in(new_name, new_parent));
    return impl_->transact(
        [&] { return impl_->do_rename(cred, old_parent, old_name, new_parent, new_name, flags); });
}

Result<std::vector<Result<RenameResult>>> MetaShard::rename_in_dir(const Cred& cred, uint64_t parent,
                                                                   RenamePairs names, uint32_t flags) {
    JOBFS_META_OP("rename in " + ino_str(parent));
    using Outcomes = std::vector<Result<RenameResult>>;
    return impl_->transact([&]() -> Result<Outcomes> {
        Outcomes out;
        for (const auto& [from, to] : names) {
            // A savepoint per entry: a failed one is undone alone, as its own transaction would be.
            JOBFS_RETURN_IF_ERROR(impl_->exec("SAVEPOINT rename_entry"));
            impl_->op = "rename " + in(from, parent) + " to " + in(to, parent);
            auto r = impl_->do_rename(cred, parent, from, parent, to, flags);
            if (r.ok()) {
                JOBFS_RETURN_IF_ERROR(impl_->exec("RELEASE rename_entry"));
            } else {
                // SQLite ends the whole transaction by itself on some errors (SQLITE_FULL, I/O):
                // the entries before this one are undone too, so the batch fails as a whole.
                if (sqlite3_get_autocommit(impl_->db)) return impl_->with_op(r.status());
                // The directory is delegated (all of the batch is in it): the batch changes
                // nothing and fails as a whole, for the caller to recall it and run it again.
                if (r.status().code() == Code::recall) return impl_->with_op(r.status());
                JOBFS_RETURN_IF_ERROR(impl_->exec("ROLLBACK TO rename_entry; RELEASE rename_entry"));
                r = impl_->with_op(r.status());
            }
            const bool elsewhere = !r.ok() && r.status().code() == Code::cross_device;
            out.push_back(std::move(r));
            if (elsewhere) break;
        }
        impl_->op = "rename in " + ino_str(parent);
        return out;
    });
}

Result<ReadDirResult> MetaShard::readdir(const Cred& cred, uint64_t ino, const std::string& after_name,
                                         uint32_t max_entries) {
    JOBFS_META_OP("readdir " + ino_str(ino) + " after " + quoted(after_name));
    auto r = impl_->do_readdir(cred, ino, after_name, max_entries);
    if (!r.ok()) return impl_->with_op(r.status());
    return r;
}

Result<Attr> MetaShard::setattr(const Cred& cred, uint64_t ino, const SetAttr& set) {
    JOBFS_META_OP("setattr " + ino_str(ino));
    return impl_->transact([&] { return impl_->do_setattr(cred, ino, set); });
}

Result<Attr> MetaShard::set_layout(const Cred& cred, uint64_t ino, Layout layout) {
    JOBFS_META_OP("set layout of " + ino_str(ino));
    return impl_->transact([&] { return impl_->do_set_layout(cred, ino, layout); });
}

Result<Attr> MetaShard::extend_size(uint64_t ino, uint64_t size) {
    JOBFS_META_OP("extend size of " + ino_str(ino) + " to " + std::to_string(size));
    return impl_->transact([&] { return impl_->do_extend_size(ino, size); });
}

Result<Attr> MetaShard::reserve_append(uint64_t ino, uint64_t at_least, uint64_t length, uint64_t token) {
    JOBFS_META_OP("reserve " + std::to_string(length) + " bytes at the end of " + ino_str(ino));
    return impl_->transact([&] { return impl_->do_reserve_append(ino, at_least, length, token); });
}

Status MetaShard::setxattr(const Cred& cred, uint64_t ino, const std::string& name,
                           const std::string& value, int flags) {
    JOBFS_META_OP("setxattr " + quoted(name) + " on " + ino_str(ino));
    return impl_->transact([&] { return impl_->do_setxattr(cred, ino, name, value, flags); });
}

Result<std::string> MetaShard::getxattr(const Cred& cred, uint64_t ino, const std::string& name) {
    JOBFS_META_OP("getxattr " + quoted(name) + " on " + ino_str(ino));
    auto r = impl_->do_getxattr(cred, ino, name);
    if (!r.ok()) return impl_->with_op(r.status());
    return r;
}

Result<std::vector<std::string>> MetaShard::listxattr(const Cred& cred, uint64_t ino) {
    JOBFS_META_OP("listxattr on " + ino_str(ino));
    auto r = impl_->do_listxattr(cred, ino);
    if (!r.ok()) return impl_->with_op(r.status());
    return r;
}

Status MetaShard::removexattr(const Cred& cred, uint64_t ino, const std::string& name) {
    JOBFS_META_OP("removexattr " + quoted(name) + " on " + ino_str(ino));
    return impl_->transact([&] { return impl_->do_removexattr(cred, ino, name); });
}

Status MetaShard::insert_dentry(uint64_t parent, const std::string& name, uint64_t ino, FileType type) {
    JOBFS_META_OP("insert dentry " + in(name, parent));
    return impl_->transact([&] { return impl_->do_insert_dentry(parent, name, ino, type); });
}

Result<DirEntry> MetaShard::remove_dentry(uint64_t parent, const std::string& name) {
    JOBFS_META_OP("remove dentry " + in(name, parent));
    return impl_->transact([&] { return impl_->do_remove_dentry(parent, name); });
}

Result<Attr> MetaShard::create_inode(const Attr& tmpl) {
    JOBFS_META_OP("create inode on shard " + std::to_string(shard_id_));
    return impl_->transact([&] { return impl_->do_create_inode(tmpl); });
}

Result<UnlinkResult> MetaShard::adjust_nlink(uint64_t ino, int delta) {
    JOBFS_META_OP("adjust nlink of " + ino_str(ino) + " by " + std::to_string(delta));
    return impl_->transact([&] { return impl_->do_adjust_nlink(ino, delta); });
}

Status MetaShard::delete_inode(uint64_t ino) {
    JOBFS_META_OP("delete inode " + ino_str(ino));
    return impl_->transact([&] { return impl_->do_delete_inode(ino); });
}

Result<uint64_t> MetaShard::intent_begin(Intent intent) {
    JOBFS_META_OP("log intent " + std::to_string(int(intent.op)) + " for " + in(intent.name, intent.parent));
    return impl_->transact([&]() -> Result<uint64_t> {
        // Not while a directory the intent changes here is delegated (Code::recall: the
        // request runs again after the recall): its last step (the old name's removal, the new
        // name's insertion) would meet the delegation after the point of no return. (An
        // intent_begin_remove loads its directory, which checks the same.) do_delegate refuses
        // the other order, a grant while such an intent is in the log.
        JOBFS_RETURN_IF_ERROR(impl_->check_delegation(intent.parent));
        if (intent.new_parent != 0 && intent.new_parent != intent.parent && shard_of(intent.new_parent) == shard_id_)
            JOBFS_RETURN_IF_ERROR(impl_->check_delegation(intent.new_parent));
        JOBFS_RETURN_IF_ERROR(impl_->put_intent(intent));
        return intent.id;
    });
}

Result<uint64_t> MetaShard::intent_begin_remove(Intent intent) {
    JOBFS_META_OP("remove " + in(intent.name, intent.parent) + " and log intent " + std::to_string(int(intent.op)));
    return impl_->transact([&] { return impl_->do_intent_begin_remove(intent); });
}

Status MetaShard::intent_finish_insert(uint64_t id, uint64_t parent, const std::string& name, uint64_t ino,
                                       FileType type) {
    JOBFS_META_OP("finish intent " + ino_str(id) + ": insert " + in(name, parent));
    return impl_->transact([&] {
        JOBFS_RETURN_IF_ERROR(impl_->do_insert_dentry(parent, name, ino, type));
        return impl_->erase_intent(id);
    });
}

Status MetaShard::intent_finish_rename(const Intent& intent) {
    JOBFS_META_OP("finish intent " + ino_str(intent.id) + ": remove " + in(intent.name, intent.parent));
    return impl_->transact([&] { return impl_->do_intent_finish_rename(intent); });
}

Status MetaShard::intent_end(uint64_t id) {
    JOBFS_META_OP("end intent " + ino_str(id));
    return impl_->transact([&] { return impl_->erase_intent(id); });
}

Result<uint64_t> MetaShard::intents_done_below() {
    JOBFS_META_OP("oldest intent of shard " + std::to_string(shard_id_));
    auto r = impl_->do_intents_done_below();
    if (!r.ok()) return impl_->with_op(r.status());
    return r;
}

void MetaShard::note_intents_done(uint64_t done_below) {
    if (done_below == 0) return;
    std::lock_guard<std::mutex> lock(impl_->mu);
    uint64_t& known = impl_->intents_done_below[shard_of(done_below)];
    known = std::max(known, done_below);
}

Result<std::vector<Intent>> MetaShard::intents() {
    JOBFS_META_OP("list intents");
    auto r = impl_->do_intents();
    if (!r.ok()) return impl_->with_op(r.status());
    return r;
}

Result<RenameInsertResult> MetaShard::rename_insert(uint64_t intent, uint64_t parent, const std::string& name,
                                                    uint64_t ino, FileType type, uint64_t expect_ino) {
    JOBFS_META_OP("rename (intent " + ino_str(intent) + ") into " + in(name, parent));
    return impl_->transact([&] { return impl_->do_rename_insert(intent, parent, name, ino, type, expect_ino); });
}

Result<UnlinkResult> MetaShard::adjust_nlink_once(uint64_t intent, IntentStep step, uint64_t ino, int delta) {
    JOBFS_META_OP("adjust nlink of " + ino_str(ino) + " by " + std::to_string(delta) + " (intent " +
                  ino_str(intent) + ")");
    return impl_->transact([&] { return impl_->do_adjust_nlink_once(intent, step, ino, delta); });
}

Result<Attr> MetaShard::create_inode_once(uint64_t intent, const Attr& tmpl) {
    JOBFS_META_OP("create inode (intent " + ino_str(intent) + ") on shard " + std::to_string(shard_id_));
    return impl_->transact([&] { return impl_->do_create_inode_once(intent, tmpl); });
}

Result<bool> MetaShard::abort_step(uint64_t intent, IntentStep step) {
    auto r = abort_step_result(intent, step);
    if (!r.ok()) return r.status();
    return r->has_value();
}

Result<std::optional<int64_t>> MetaShard::abort_step_result(uint64_t intent, IntentStep step) {
    JOBFS_META_OP("abort step " + std::to_string(uint32_t(step)) + " of intent " + ino_str(intent));
    return impl_->transact([&] { return impl_->do_abort_step(intent, step); });
}

Status MetaShard::set_parent(uint64_t ino, uint64_t parent) {
    JOBFS_META_OP("move inode " + ino_str(ino) + " to " + ino_str(parent));
    return impl_->transact([&] { return impl_->do_set_parent(ino, parent); });
}

Result<uint64_t> MetaShard::parent_of(uint64_t ino) {
    JOBFS_META_OP("parent of " + ino_str(ino));
    auto a = impl_->load_inode(ino);
    if (!a.ok()) return impl_->with_op(a.status());
    return a->parent;
}

Result<std::vector<Attr>> MetaShard::regular_files() {
    JOBFS_META_OP("files of shard " + std::to_string(shard_id_));
    static const std::string sql = std::string("SELECT ") + kInodeColumns + " FROM inodes WHERE type = 1 ORDER BY ino";
    auto st = impl_->query(sql.c_str());
    if (!st.ok()) return impl_->with_op(st.status());
    auto out = Impl::attrs_of(*st);
    return out.ok() ? out : impl_->with_op(out.status());
}

Result<std::vector<Attr>> MetaShard::removed_files() {
    JOBFS_META_OP("removed files of shard " + std::to_string(shard_id_));
    // kInodeColumns, with zeros for what is not kept.
    auto st = impl_->query("SELECT ino, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, chunk_size, stripe_count, 0, 0, replicas "
                           "FROM removed_files ORDER BY ino");
    if (!st.ok()) return impl_->with_op(st.status());
    auto out = Impl::attrs_of(*st);
    return out.ok() ? out : impl_->with_op(out.status());
}

Result<Counts> MetaShard::counts() {
    JOBFS_META_OP("counts of shard " + std::to_string(shard_id_));
    auto inodes = impl_->count("SELECT count(*) FROM inodes");
    if (!inodes.ok()) return impl_->with_op(inodes.status());
    auto dentries = impl_->count("SELECT count(*) FROM dentries");
    if (!dentries.ok()) return impl_->with_op(dentries.status());
    auto applied = impl_->count("SELECT count(*) FROM applied");
    if (!applied.ok()) return impl_->with_op(applied.status());
    auto xattrs = impl_->count("SELECT count(*) FROM xattrs");
    if (!xattrs.ok()) return impl_->with_op(xattrs.status());
    return Counts{*inodes, *dentries, *applied, *xattrs};
}

// ---- directory delegations -------------------------------------------------------------------

uint64_t MetaShard::recall_dir() { return t_recall_dir; }
uint64_t MetaShard::recall_token() { return t_recall_token; }
Status MetaShard::must_recall(uint64_t dir, uint64_t token) {
    t_recall_dir = dir;
    t_recall_token = token;
    return Status(Code::recall, "directory " + ino_str(dir) + " is delegated to a client");
}

Result<MetaShard::Delegation> MetaShard::delegate_dir(const Cred& cred, uint64_t dir, uint64_t token,
                                                      uint32_t max_entries, uint32_t inos) {
    JOBFS_META_OP("delegate " + ino_str(dir));
    return impl_->transact([&] { return impl_->do_delegate(cred, dir, token, max_entries, inos); });
}

Result<MetaShard::DirOpsResult> MetaShard::dir_ops(const Cred& cred, uint64_t dir, uint64_t token,
                                                   std::span<const DirOp> ops, bool release, uint32_t more_inos) {
    JOBFS_META_OP("delegated operations in " + ino_str(dir));
    return impl_->transact([&]() -> Result<DirOpsResult> {
        auto holder = impl_->delegation_of(dir);
        if (!holder.ok()) return holder.status();
        if (*holder != token || token == 0)
            return impl_->fail(Code::busy, "the delegation of directory " + ino_str(dir) + " has ended");
        const Impl::ActingAs acting(*impl_, token);
        auto d = impl_->load_dir(dir);
        if (!d.ok()) return d.status();
        Attr dir_attr = std::move(*d);
        JOBFS_RETURN_IF_ERROR(impl_->need(dir_attr, cred, kMayExec | kMayWrite));
        auto next = impl_->meta_value("next_seq");
        if (!next.ok()) return next.status();
        const Attr dir_before = dir_attr;
        const int64_t now = now_ns();
        DirOpsResult out;
        out.outcomes.reserve(ops.size());
        impl_->write_failed = false;
        Impl::EmptyTables empty(*impl_);
        JOBFS_RETURN_IF_ERROR(empty.look());
        for (const DirOp& op : ops) {
            Result<UnlinkResult> r = Status(Code::invalid, "unset");
            if (op.kind == kDirOpCreate) {
                auto a = impl_->do_create_delegated(cred, dir_attr, uint64_t(*next), op);
                if (a.ok()) r = UnlinkResult{std::move(*a), false};
                else r = a.status();
            } else if (op.kind == kDirOpUnlink) {
                r = impl_->do_unlink_delegated(cred, dir_attr, op, now);
            } else if (op.kind == kDirOpRename) {
                r = impl_->do_rename_delegated(cred, dir_attr, op, now);
            } else {
                r = impl_->fail(Code::invalid, "delegated operation " + std::to_string(op.kind));
            }
            if (!r.ok()) {
                if (impl_->write_failed || sqlite3_get_autocommit(impl_->db)) return impl_->with_op(r.status());
                const std::string what = (op.kind == kDirOpCreate   ? "create "
                                          : op.kind == kDirOpUnlink ? "unlink "
                                                                    : "rename to " + op.new_name + " of ") +
                                         in(op.name, dir);
                r = Status(r.status().code(), what + ": " + r.status().message());
            }
            out.outcomes.push_back(std::move(r));
        }
        if (dir_attr.mtime_ns != dir_before.mtime_ns) JOBFS_RETURN_IF_ERROR(impl_->store_inode(dir_attr));
        impl_->op = "delegated operations in " + ino_str(dir);
        if (more_inos) {
            auto range = impl_->reserve_inos(more_inos);
            if (!range.ok()) return range.status();
            out.ino_first = range->first;
            out.ino_count = range->second;
        }
        if (release) JOBFS_RETURN_IF_ERROR(impl_->run("DELETE FROM dir_delegations WHERE dir = ?", dir));
        return out;
    });
}

Status MetaShard::end_delegation(uint64_t dir, uint64_t token) {
    JOBFS_META_OP("end the delegation of " + ino_str(dir));
    return impl_->transact(
        [&] { return impl_->run("DELETE FROM dir_delegations WHERE dir = ? AND token = ?", dir, token); });
}

// ---- replication ---------------------------------------------------------------------------

Status MetaShard::start_shipping(uint64_t term, ShipFn ship) {
    JOBFS_META_OP("ship changes of shard " + std::to_string(shard_id_));
    impl_->ship = std::move(ship);
    impl_->term = term;
    if (!impl_->ship && impl_->session) {
        sqlite3session_delete(impl_->session);
        impl_->session = nullptr;
    }
    return Status::OK();
}

Status MetaShard::forget_position() {
    JOBFS_META_OP("forget the position of shard " + std::to_string(shard_id_));
    return impl_->transact(
        [&]() -> Status {
            JOBFS_RETURN_IF_ERROR(impl_->put_meta("repl_term", 0));
            return impl_->put_meta("repl_seq", kOutOfStep);
        },
        true);
}

Result<MetaShard::ReplPosition> MetaShard::position() {
    JOBFS_META_OP("position of shard " + std::to_string(shard_id_));
    auto at = impl_->position_now();
    if (!at.ok()) return impl_->with_op(at.status());
    return at;
}

namespace {
// A replica in step with its primary has every row a changeset names exactly as the primary
// had it: anything else (a conflict, a missing row) means it is not, and must take a snapshot.
int refuse_conflicts(void*, int, sqlite3_changeset_iter*) { return SQLITE_CHANGESET_ABORT; }
} // namespace

Status MetaShard::apply_changeset(const ReplPosition& prev, const ReplPosition& at, std::span<const uint8_t> changeset) {
    JOBFS_META_OP("apply changeset " + std::to_string(at.term) + "/" + std::to_string(at.seq) + " to shard " +
                  std::to_string(shard_id_));
    auto mine = impl_->position_now();
    if (!mine.ok()) return impl_->with_op(mine.status());
    if (mine->term == at.term && at.seq <= mine->seq) return Status::OK(); // applied before
    if (!(*mine == prev))
        return impl_->fail(Code::again, "this replica is at " + std::to_string(mine->term) + "/" +
                                            std::to_string(mine->seq) + ", the changeset follows " +
                                            std::to_string(prev.term) + "/" + std::to_string(prev.seq) +
                                            ": it needs a snapshot");
    return impl_->transact([&]() -> Status {
        int rc = sqlite3changeset_apply(impl_->db, int(changeset.size()), const_cast<uint8_t*>(changeset.data()), nullptr,
                                        refuse_conflicts, nullptr);
        if (rc == SQLITE_ABORT) return impl_->fail(Code::again, "the changeset does not apply cleanly: it needs a snapshot");
        if (rc != SQLITE_OK) return Status(code_of_sqlite(rc), std::string("sqlite: apply: ") + sqlite3_errmsg(impl_->db));
        // The changeset carries the primary's new position (ship_changes): check it arrived.
        auto now = impl_->position_now();
        if (!now.ok()) return now.status();
        if (!(*now == at)) return impl_->fail(Code::protocol, "the changeset did not carry its position");
        return Status::OK();
    }, true);
}

namespace {
// A private in-memory database: the medium of snapshots (sqlite3_serialize of a WAL database
// would carry WAL's file format bytes, which an in-memory copy cannot open).
struct MemDb {
    sqlite3* db = nullptr;
    ~MemDb() {
        if (db) sqlite3_close(db);
    }
};

Status copy_db(sqlite3* to, sqlite3* from, const char* what) {
    sqlite3_backup* b = sqlite3_backup_init(to, "main", from, "main");
    if (!b) return Status(code_of_sqlite(sqlite3_errcode(to)), std::string("sqlite: ") + what + ": " + sqlite3_errmsg(to));
    int rc = sqlite3_backup_step(b, -1);
    int fin = sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) return Status(code_of_sqlite(rc), std::string("sqlite: ") + what + ": " + sqlite3_errstr(rc));
    if (fin != SQLITE_OK) return Status(code_of_sqlite(fin), std::string("sqlite: ") + what + ": " + sqlite3_errstr(fin));
    return Status::OK();
}
} // namespace

Result<MetaShard::Snapshot> MetaShard::snapshot() {
    JOBFS_META_OP("snapshot of shard " + std::to_string(shard_id_));
    Snapshot snap;
    auto at = impl_->position_now();
    if (!at.ok()) return impl_->with_op(at.status());
    snap.at = *at;
    MemDb mem;
    if (sqlite3_open_v2(":memory:", &mem.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK)
        return impl_->fail(Code::no_memory, "cannot open an in-memory database");
    Status s = copy_db(mem.db, impl_->db, "snapshot");
    if (!s.ok()) return impl_->with_op(s);
    sqlite3_int64 size = 0;
    unsigned char* image = sqlite3_serialize(mem.db, "main", &size, 0);
    if (!image) return impl_->fail(Code::no_memory, "cannot serialize the snapshot");
    snap.image.assign(image, image + size);
    sqlite3_free(image);
    // The copy kept the WAL file-format bytes of the source's header; an image in WAL format
    // cannot be opened from memory. Mark it as a rollback-journal database (the format of
    // every page is the same; a backup into a WAL database marks it WAL again).
    if (snap.image.size() >= 100) snap.image[18] = snap.image[19] = 1;
    return snap;
}

Status MetaShard::install_snapshot(const Snapshot& snap) {
    JOBFS_META_OP("install snapshot " + std::to_string(snap.at.term) + "/" + std::to_string(snap.at.seq) +
                  " into shard " + std::to_string(shard_id_));
    MemDb mem;
    if (sqlite3_open_v2(":memory:", &mem.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK)
        return impl_->fail(Code::no_memory, "cannot open an in-memory database");
    auto* buf = static_cast<unsigned char*>(sqlite3_malloc64(snap.image.size()));
    if (!buf && !snap.image.empty()) return impl_->fail(Code::no_memory, "no memory for the snapshot");
    if (!snap.image.empty()) std::memcpy(buf, snap.image.data(), snap.image.size());
    int rc = sqlite3_deserialize(mem.db, "main", buf, sqlite3_int64(snap.image.size()), sqlite3_int64(snap.image.size()),
                                 SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE);
    if (rc != SQLITE_OK) return impl_->fail(Code::invalid, std::string("not a database image: ") + sqlite3_errstr(rc));
    // Check it before it replaces anything: this shard's, and at the position it claims.
    sqlite3_stmt* st = nullptr;
    int64_t shard = -1, term = 0, seq = 0;
    if (sqlite3_prepare_v2(mem.db, "SELECT key, value FROM meta WHERE key IN ('shard_id', 'repl_term', 'repl_seq')", -1,
                           &st, nullptr) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            const std::string key(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
            const int64_t v = sqlite3_column_int64(st, 1);
            if (key == "shard_id") shard = v;
            else if (key == "repl_term") term = v;
            else seq = v;
        }
    }
    sqlite3_finalize(st);
    if (shard != int64_t(shard_id_)) return impl_->fail(Code::invalid, "the snapshot is of shard " + std::to_string(shard));
    if (uint64_t(term) != snap.at.term || uint64_t(seq) != snap.at.seq)
        return impl_->fail(Code::protocol, "the snapshot's image is at " + std::to_string(term) + "/" + std::to_string(seq));
    // The cached statements must not hold the tables while the backup rewrites every page.
    for (auto& [sql, stmt] : impl_->stmts) sqlite3_reset(stmt);
    Status s = copy_db(impl_->db, mem.db, "install snapshot");
    if (!s.ok()) return impl_->with_op(s);
    return Status::OK();
}

} // namespace jobfs::server
